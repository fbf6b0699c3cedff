// Activation checkpointing: run a block without keeping its intermediate activations and
// recompute them during backward. Trades one extra forward of the block for memory.
//
// LibTorch has no torch.utils.checkpoint in C++; this implements the non-reentrant semantics
// that matter here: gradients reach the block's parameters even when no input requires grad
// (e.g. the first block of a frozen model with LoRA adapters inside), and the default RNG
// states (CPU, and each accelerator device the inputs are on) are restored for the
// recomputation so dropout draws the same mask.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace yeto::nn {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// What runs around each run of a checkpointed fn (its forward and its recomputation in
// backward): enter(recompute) before it, exit() after it (in backward: after the recomputed
// graph's own backward, so what enter() made stays valid while that graph uses it). exit() runs
// also when fn or the backward throws. Sharded blocks gather and free their weights with it.
struct CheckpointScope {
  std::function<void(bool recompute)> enter;
  std::function<void()> exit;
};

// Calls fn(inputs). With grad mode enabled, the outputs are attached to one autograd node that
// re-runs fn in backward; with grad mode disabled (inference) fn simply runs. fn must be a pure
// function of its inputs and the module parameters it captures; inputs must not be modified in
// place before backward. `scope` (optional) wraps every run of fn, forward and recomputation.
std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   std::shared_ptr<const CheckpointScope> scope = nullptr);

// Single-tensor convenience.
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input);

// Which blocks of a model recompute their activations in backward. Blocks are counted 0, 1, ...
// over all of the model's block stacks in forward order (Flux: the double-stream blocks, then the
// single-stream ones); with `enabled`, block i recomputes when i % every == 0: every block with
// every = 1, every other one with 2, ... (train.activation_checkpointing,
// train.activation_checkpointing_every).
struct BlockCheckpointing {
  bool enabled = false;
  std::int64_t every = 1;
  bool recomputes(std::int64_t block) const { return enabled && every > 0 && block % every == 0; }
};

// ---- the frozen blocks sharded across ranks (train.shard = "fsdp") ---------------------------
//
// Every rank keeps 1/world_size of each block's frozen parameters as flat byte shards in the
// parameters' own dtypes (bf16, fp8 codes, ...), one per gather unit: the weight of every
// nn::Linear in the block is a unit of its own, and the block's other parameters (biases, norms,
// modulation tables) are one more, its block unit. A unit's parameters are laid end to end in
// their order (each at a 64-byte aligned offset), the layout is padded to world_size equal pieces
// and rank r keeps piece r. Between uses a sharded parameter is an empty tensor ([0], its dtype and
// device; the module's tensor object itself, so the module needs no change). gather(block)
// all-gathers the block unit for a run of the block and release() empties it again; each Linear
// gathers its own weight around its GEMM and again for its input gradient in backward (its
// WeightGather), so a block's whole weights are never resident at once: at most the block unit
// plus one Linear weight (the largest such unit is largest_unit_bytes()). Buffers and the
// parameters outside the blocks (embeddings, the final layers) stay whole on every rank; so do
// LoRA adapters added after loading.

// `shard` (uint8 [n]) of every rank into `out` (uint8 [n * world_size]), rank r's at r * n.
using AllGatherFn = std::function<void(const at::Tensor& shard, const at::Tensor& out)>;

class BlockShards : public std::enable_shared_from_this<BlockShards> {
 public:
  // Block swap (model.block_swap) is the same machinery on one rank: the "shards" are the whole
  // Linear weights kept in host memory, "gathering" copies one to the compute device.
  struct Options {
    // false: only the Linear weights are units; a block's other parameters stay as they are
    // (whole, wherever the model puts them), and gather(block) / release(block) do nothing.
    bool block_unit = true;
    // Where whole weights are materialised; unset: where the shards are.
    std::optional<at::Device> device;
    // The shards in page-locked host memory (asynchronous copies to a CUDA device).
    bool pin = false;
  };
  // blocks[i]: block i's module and its path in the model ("blocks.3"); with sharding, block i is
  // run_block's index i. Held by a std::shared_ptr (the Linears find their units through it).
  BlockShards(int rank, int world_size, AllGatherFn all_gather,
              std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> blocks);
  BlockShards(int rank, int world_size, AllGatherFn all_gather,
              std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> blocks, Options options);
  std::int64_t size() const { return static_cast<std::int64_t>(blocks_.size()); }
  int rank() const { return rank_; }
  int world_size() const { return world_; }

  // `names` (model paths) now hold their checkpoint values: every block all of whose parameters
  // have been loaded is sharded (this rank's pieces copied out, the whole tensors dropped).
  void loaded(const std::vector<std::string>& names);
  bool sharded(std::int64_t block) const;
  // The first block not sharded yet and the path of a parameter it still waits for; "" when
  // every block is sharded.
  std::string first_unsharded() const;
  // A sharded block's unit of parameters outside its Linears for its next run (a collective:
  // every rank calls it in the same order); nested calls count. release() drops them when the
  // outermost use ends. `recompute`: the run is backward's recomputation.
  void gather(std::int64_t block, bool recompute = false);
  void release(std::int64_t block);
  // Bytes of this rank's pieces, of the whole sharded blocks, and of the largest unit whole.
  std::int64_t shard_bytes() const;
  std::int64_t full_bytes() const;
  std::int64_t largest_unit_bytes() const;
  // Gather units of a sharded block (its block unit and one per Linear weight).
  std::int64_t units(std::int64_t block) const;
  // Gathers whose whole weights a prefetch had already brought (see below).
  std::int64_t prefetched() const { return prefetched_; }

  // Prefetch: within a run of a block (between its block unit's gather and release) the units
  // are gathered in the same order every time, on every rank (the same code runs). Each gather
  // records which gather followed the previous one (by block, unit and use: inference / forward
  // with grad / backward) and, when it has seen what follows this one, starts that unit's
  // all-gather on a thread of its own while the caller computes; the next gather waits for it and
  // takes its buffer when it is the unit asked for (else drops it and gathers as usual). Every
  // gather first waits for the one in flight, and the block unit's release ends the chain (waits,
  // forgets the previous gather), so the collectives keep one order on every rank and none is in
  // flight outside a block's run (where the host runs its own all-reduces). The values gathered
  // are the same bytes either way; at most two units are whole at once.
  void set_prefetch(bool on) { prefetch_ = on; }

 private:
  struct Entry {
    std::string name;  // in the block
    at::Tensor tensor;  // the module's own parameter
    at::ScalarType dtype;
    std::vector<std::int64_t> sizes;
    std::int64_t offset = 0;  // bytes into the unit's layout
    std::int64_t bytes = 0;
  };
  struct Unit {
    std::vector<Entry> entries;
    at::Tensor shard;  // uint8 [piece]
    std::int64_t piece = 0;
    std::int64_t bytes = 0;  // the layout's end, unpadded
    int uses = 0;
  };
  struct Block {
    std::string path;
    std::shared_ptr<torch::nn::Module> module;
    std::vector<std::string> waiting;  // parameters not loaded yet (paths in the model)
    std::vector<Unit> units;           // [0]: the block unit; then one per Linear weight
    bool sharded = false;
  };
  void shard(Block& b, std::int64_t index);
  Block& block_at(std::int64_t block, const char* what);
  void gather_unit(std::int64_t block, std::size_t unit, int use);
  void release_unit(Unit& u);
  void end_chain();
  at::Tensor whole_buffer(const Unit& u, std::size_t unit);
  at::Device whole_device(const Unit& u) const { return options_.device ? *options_.device : u.shard.device(); }

  int rank_;
  int world_;
  AllGatherFn all_gather_;
  Options options_;
  std::vector<Block> blocks_;
  bool prefetch_ = true;
  std::map<std::int64_t, std::int64_t> next_;  // gather key -> the key that followed it last time
  std::int64_t last_ = -1;                     // the previous gather's key in this chain
  std::int64_t in_flight_key_ = -1;
  std::future<at::Tensor> in_flight_;
  std::int64_t prefetched_ = 0;
  std::vector<at::Tensor> pool_;  // reusable buffers for whole Linear weights
};

// The block modules of a model, in run_block's numbering: the elements of every torch::nn::
// ModuleList that is a direct child of the model, list by list in registration order (Flux: the
// double-stream blocks, then the single-stream ones), each with its path ("transformer_blocks.0").
std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> block_modules(torch::nn::Module& model);

// A model whose transformer blocks honour a BlockCheckpointing: a family's denoiser derives from
// it next to torch::nn::Module and runs each block through run_block; the family kit sets
// activation_checkpointing on every denoiser from the run's configuration at prepare, and, with
// train.shard = "fsdp", `sharding` while its weights load (block_modules gives the blocks).
class CheckpointedBlocks {
 public:
  virtual ~CheckpointedBlocks() = default;
  BlockCheckpointing activation_checkpointing;
  // Set: every block is sharded and runs as gather, fn, release; with grad mode on it always
  // recomputes in backward (gathering again), whatever activation_checkpointing says.
  std::shared_ptr<BlockShards> sharding;
  // Set (model.block_swap): some blocks' Linear weights live in host memory and each is copied
  // to the compute device for its GEMM and again for its input gradient (their Linears do it);
  // run_block is unchanged, activation_checkpointing applies as it is.
  std::shared_ptr<BlockShards> block_swap;

 protected:
  // fn(inputs) for the block numbered `index`: through checkpoint() when
  // activation_checkpointing.recomputes(index) and grad mode is on, else called directly. Every
  // tensor that may require grad (the hidden states, the text stream, the timestep embedding)
  // must be among `inputs`; constants (rotary tables, masks) may be captured by fn.
  std::vector<at::Tensor> run_block(std::int64_t index, const CheckpointFn& fn,
                                    const std::vector<at::Tensor>& inputs) const;
};

}  // namespace yeto::nn
