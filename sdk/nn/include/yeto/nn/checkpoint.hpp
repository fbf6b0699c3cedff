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
#include <vector>

#include <ATen/core/Tensor.h>

namespace yeto::nn {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Calls fn(inputs). With grad mode enabled, the outputs are attached to one autograd node that
// re-runs fn in backward; with grad mode disabled (inference) fn simply runs. fn must be a pure
// function of its inputs and the module parameters it captures; inputs must not be modified in
// place before backward.
std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs);

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

// A model whose transformer blocks honour a BlockCheckpointing: a family's denoiser derives from
// it next to torch::nn::Module and runs each block through run_block; the family kit sets
// activation_checkpointing on every denoiser from the run's configuration at prepare.
class CheckpointedBlocks {
 public:
  virtual ~CheckpointedBlocks() = default;
  BlockCheckpointing activation_checkpointing;

 protected:
  // fn(inputs) for the block numbered `index`: through checkpoint() when
  // activation_checkpointing.recomputes(index) and grad mode is on, else called directly. Every
  // tensor that may require grad (the hidden states, the text stream, the timestep embedding)
  // must be among `inputs`; constants (rotary tables, masks) may be captured by fn.
  std::vector<at::Tensor> run_block(std::int64_t index, const CheckpointFn& fn,
                                    const std::vector<at::Tensor>& inputs) const;
};

}  // namespace yeto::nn
