#include "yeto/nn/checkpoint.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/nn/modules/container/modulelist.h>

#include "yeto/nn/linear.hpp"

namespace yeto::nn {

namespace {

// The default generators' states: the CPU one and one per accelerator device the inputs live
// on (looked up through the context, so no CUDA header is needed and CPU-only builds compile).
struct RngStates {
  std::vector<std::pair<at::Generator, at::Tensor>> states;

  static RngStates capture(const std::vector<at::Tensor>& inputs) {
    RngStates r;
    std::vector<at::Device> devices{at::Device(at::kCPU)};
    for (const auto& t : inputs) {
      if (t.defined() && !t.is_cpu() &&
          std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
        devices.push_back(t.device());
      }
    }
    for (const auto& d : devices) {
      auto gen = d.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      r.states.emplace_back(gen, gen.get_state());
    }
    return r;
  }

  void restore() const {
    for (const auto& [gen, state] : states) {
      auto g = gen;
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(state);
    }
  }

  // The current states of the same generators (to put back after a recomputation).
  RngStates now() const {
    RngStates r;
    for (const auto& [gen, state] : states) {
      auto g = gen;
      std::lock_guard<std::mutex> lock(g.mutex());
      r.states.emplace_back(g, g.get_state());
    }
    return r;
  }
};

// enter() now, exit() when it goes (also on an exception); nothing for no scope.
class ScopeGuard {
 public:
  ScopeGuard(const CheckpointScope* scope, bool recompute) : scope_(scope) {
    if (scope_ && scope_->enter) scope_->enter(recompute);
  }
  ~ScopeGuard() {
    if (scope_ && scope_->exit) scope_->exit();
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  const CheckpointScope* scope_;
};

// The autograd node that stands for the whole checkpointed block.
class CheckpointNode : public torch::autograd::Node {
 public:
  CheckpointNode(CheckpointFn fn, std::vector<at::Tensor> saved, std::vector<bool> needs_grad, RngStates rng,
                 std::shared_ptr<const CheckpointScope> scope)
      : fn_(std::move(fn)),
        saved_(std::move(saved)),
        needs_grad_(std::move(needs_grad)),
        rng_(std::move(rng)),
        scope_(std::move(scope)) {}

  std::string name() const override { return "yeto::nn::CheckpointBackward"; }

  // The gradient slot of each output of fn: outputs that are undefined or not floating point
  // carry no history, so the slots of the others are counted without them (-1: none).
  void set_slots(std::vector<int> slots) { slots_ = std::move(slots); }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved_.size());
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      auto t = saved_[i].defined() ? saved_[i].detach() : saved_[i];
      if (t.defined() && needs_grad_[i]) t.requires_grad_(true);
      inputs.push_back(t);
    }
    // The scope (a sharded block's gathered weights) lasts until the recomputed graph's backward
    // is done with them.
    ScopeGuard guard(scope_.get(), /*recompute=*/true);
    std::vector<at::Tensor> outputs;
    {
      // Recompute with the RNG as it was for the original forward, then put the RNG back.
      const auto now = rng_.now();
      rng_.restore();
      at::AutoGradMode enable(true);
      outputs = fn_(inputs);
      now.restore();
    }
    std::vector<at::Tensor> roots, root_grads;
    for (std::size_t j = 0; j < outputs.size() && j < slots_.size(); ++j) {
      const auto slot = slots_[j];
      if (slot < 0 || static_cast<std::size_t>(slot) >= grads.size()) continue;
      if (outputs[j].defined() && outputs[j].requires_grad() && grads[slot].defined()) {
        roots.push_back(outputs[j]);
        root_grads.push_back(grads[slot]);
      }
    }
    if (!roots.empty()) {
      // Accumulates into the parameters fn captured and into the detached input copies.
      torch::autograd::backward(roots, root_grads);
    }
    torch::autograd::variable_list result;
    result.reserve(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      result.push_back(needs_grad_[i] && inputs[i].defined() ? inputs[i].grad() : at::Tensor());
    }
    saved_.clear();
    outputs.clear();
    roots.clear();
    return result;
  }

 private:
  CheckpointFn fn_;
  std::vector<at::Tensor> saved_;
  std::vector<bool> needs_grad_;
  RngStates rng_;
  std::shared_ptr<const CheckpointScope> scope_;
  std::vector<int> slots_;
};

}  // namespace

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   std::shared_ptr<const CheckpointScope> scope) {
  if (!at::GradMode::is_enabled()) {
    ScopeGuard guard(scope.get(), false);
    return fn(inputs);
  }
  auto rng = RngStates::capture(inputs);
  std::vector<at::Tensor> outputs;
  {
    ScopeGuard guard(scope.get(), false);
    at::NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  std::vector<at::Tensor> saved;
  std::vector<bool> needs;
  for (const auto& t : inputs) {
    saved.push_back(t.defined() ? t.detach() : t);
    needs.push_back(t.defined() && t.requires_grad());
  }
  auto node = std::shared_ptr<CheckpointNode>(
      new CheckpointNode(fn, std::move(saved), std::move(needs), rng, std::move(scope)), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  std::vector<int> slots;
  int next_slot = 0;
  for (auto& out : outputs) {
    if (!out.defined() || !at::isFloatingType(out.scalar_type())) {
      slots.push_back(-1);
      continue;
    }
    // A fresh tensor: views or aliases of the inputs cannot take a new grad_fn.
    if (out.is_view() || !out.is_leaf()) out = out.clone();
    for (const auto& in : inputs) {
      if (in.defined() && out.is_same(in)) out = out.clone();
    }
    torch::autograd::set_history(out, node);
    slots.push_back(next_slot++);
  }
  node->set_slots(std::move(slots));
  return outputs;
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input) {
  auto outs = checkpoint([fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in[0])}; },
                         std::vector<at::Tensor>{input});
  return outs[0];
}

std::vector<at::Tensor> CheckpointedBlocks::run_block(std::int64_t index, const CheckpointFn& fn,
                                                      const std::vector<at::Tensor>& inputs) const {
  if (sharding) {
    // Gather, run, release; in training the block always recomputes, so its backward gathers
    // again instead of keeping the whole weights alive between forward and backward.
    auto scope = std::make_shared<CheckpointScope>();
    scope->enter = [s = sharding, index](bool recompute) { s->gather(index, recompute); };
    scope->exit = [s = sharding, index] { s->release(index); };
    return checkpoint(fn, inputs, std::move(scope));
  }
  if (activation_checkpointing.recomputes(index) && at::GradMode::is_enabled()) return checkpoint(fn, inputs);
  return fn(inputs);
}

// ---- BlockShards ----------------------------------------------------------------------------

namespace {

constexpr std::int64_t kAlign = 64;

std::int64_t aligned(std::int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The bytes of a contiguous tensor as a uint8 tensor over the same storage.
at::Tensor bytes_of(const at::Tensor& t) {
  const std::int64_t n = t.numel() * static_cast<std::int64_t>(t.element_size());
  return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(t.device()))
      .set_(t.storage(), t.storage_offset() * static_cast<std::int64_t>(t.element_size()), {n}, {1});
}

at::Tensor empty_like_kind(const at::Tensor& t) {
  return at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(t.device()));
}

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> block_modules(torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  for (const auto& child : model.named_children()) {
    auto list = std::dynamic_pointer_cast<torch::nn::ModuleListImpl>(child.value());
    if (!list) continue;
    for (std::size_t i = 0; i < list->size(); ++i)
      out.emplace_back(child.key() + "." + std::to_string(i), list->ptr(i));
  }
  return out;
}

BlockShards::BlockShards(int rank, int world_size, AllGatherFn all_gather,
                         std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> blocks)
    : BlockShards(rank, world_size, std::move(all_gather), std::move(blocks), Options{}) {}

BlockShards::BlockShards(int rank, int world_size, AllGatherFn all_gather,
                         std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> blocks,
                         Options options)
    : rank_(rank), world_(world_size), all_gather_(std::move(all_gather)), options_(std::move(options)) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("BlockShards: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  for (auto& [path, module] : blocks) {
    Block b;
    b.path = path;
    b.module = module;
    for (const auto& p : module->named_parameters()) b.waiting.push_back(path + "." + p.key());
    blocks_.push_back(std::move(b));
  }
}

void BlockShards::loaded(const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    auto& b = blocks_[i];
    if (b.sharded) continue;
    const std::string prefix = b.path + ".";
    bool touched = false;
    for (const auto& n : names) {
      if (n.compare(0, prefix.size(), prefix) != 0) continue;
      const auto it = std::find(b.waiting.begin(), b.waiting.end(), n);
      if (it != b.waiting.end()) {
        b.waiting.erase(it);
        touched = true;
      }
    }
    if (touched && b.waiting.empty()) shard(b, static_cast<std::int64_t>(i));
  }
}

void BlockShards::shard(Block& b, std::int64_t index) {
  at::NoGradGuard no_grad;
  const std::weak_ptr<BlockShards> self = weak_from_this();
  if (self.expired()) throw std::logic_error("BlockShards: must be held by a std::shared_ptr");
  // The Linears of the block, by their weight's tensor: each weight is a unit of its own.
  std::vector<std::pair<const c10::TensorImpl*, std::shared_ptr<LinearImpl>>> linears;
  for (const auto& m : b.module->modules(/*include_self=*/true))
    if (auto l = std::dynamic_pointer_cast<LinearImpl>(m); l && l->weight.defined())
      linears.emplace_back(l->weight.unsafeGetTensorImpl(), l);
  b.units.assign(1, Unit{});
  std::vector<std::shared_ptr<LinearImpl>> unit_layer{nullptr};
  for (const auto& p : b.module->named_parameters()) {
    Entry e;
    e.name = p.key();
    e.tensor = p.value();
    e.dtype = e.tensor.scalar_type();
    e.sizes = e.tensor.sizes().vec();
    e.bytes = e.tensor.numel() * static_cast<std::int64_t>(e.tensor.element_size());
    std::size_t u = 0;
    for (const auto& [impl, layer] : linears) {
      if (impl != e.tensor.unsafeGetTensorImpl()) continue;
      u = b.units.size();
      b.units.emplace_back();
      unit_layer.push_back(layer);
    }
    auto& unit = b.units[u];
    e.offset = aligned(unit.bytes);
    unit.bytes = e.offset + e.bytes;
    unit.entries.push_back(std::move(e));
  }
  const std::int64_t rank = rank_;
  for (std::size_t k = 0; k < b.units.size(); ++k) {
    auto& u = b.units[k];
    if (k == 0 && !options_.block_unit) continue;  // the block's other parameters stay as they are
    u.piece = aligned((u.bytes + world_ - 1) / world_);
    const at::Device device = u.entries.empty() ? at::Device(at::kCPU) : u.entries.front().tensor.device();
    u.shard = at::zeros({u.piece}, at::TensorOptions().dtype(at::kByte).device(device));
    const std::int64_t lo = rank * u.piece, hi = lo + u.piece;
    for (auto& e : u.entries) {
      const std::int64_t from = std::max(lo, e.offset), to = std::min(hi, e.offset + e.bytes);
      if (from < to) {
        const at::Tensor src = bytes_of(e.tensor.contiguous());
        u.shard.narrow(0, from - lo, to - from).copy_(src.narrow(0, from - e.offset, to - from));
      }
      e.tensor.set_(empty_like_kind(e.tensor));
    }
    if (options_.pin) u.shard = u.shard.pin_memory();
    if (k == 0) continue;
    // The layer gathers its weight unit itself (the block's index and the unit's stay valid: the
    // blocks and their units never change once sharded).
    auto g = std::make_shared<WeightGather>();
    g->gather = [self, index, k](int use) {
      const auto s = self.lock();
      if (!s) throw std::logic_error("BlockShards: a sharded Linear outlived its sharding");
      s->gather_unit(index, k, use);
    };
    g->release = [self, index, k] {
      if (const auto s = self.lock()) s->release_unit(s->blocks_[static_cast<std::size_t>(index)].units[k]);
    };
    unit_layer[k]->set_weight_gather(std::move(g));
  }
  b.sharded = true;
}

bool BlockShards::sharded(std::int64_t block) const {
  return block >= 0 && block < size() && blocks_[static_cast<std::size_t>(block)].sharded;
}

std::string BlockShards::first_unsharded() const {
  for (const auto& b : blocks_)
    if (!b.sharded) return b.path + (b.waiting.empty() ? std::string() : " (waits for " + b.waiting.front() + ")");
  return "";
}

BlockShards::Block& BlockShards::block_at(std::int64_t block, const char* what) {
  if (block < 0 || block >= size())
    throw std::out_of_range(std::string("BlockShards::") + what + ": block " + std::to_string(block) +
                            " of a model with " + std::to_string(size()) + " blocks (its ModuleLists)");
  auto& b = blocks_[static_cast<std::size_t>(block)];
  if (!b.sharded)
    throw std::logic_error(std::string("BlockShards::") + what + ": block " + b.path +
                           " was never sharded: its weights did not all load");
  return b;
}

namespace {
// A gather's identity for the prefetch order: block, unit, use (WeightGather::Use; 3: the
// block unit of a recomputation).
std::int64_t gather_key(std::int64_t block, std::size_t unit, int use) {
  return (block << 32) | (static_cast<std::int64_t>(unit) << 2) | use;
}
std::int64_t key_block(std::int64_t key) { return key >> 32; }
std::size_t key_unit(std::int64_t key) { return static_cast<std::size_t>((key & 0xffffffff) >> 2); }
}  // namespace

void BlockShards::gather_unit(std::int64_t block, std::size_t unit, int use) {
  auto& b = block_at(block, "gather");
  auto& u = b.units.at(unit);
  const std::int64_t key = gather_key(block, unit, use);
  at::Tensor full;
  if (in_flight_.valid()) {
    // Always wait for the gather in flight first: the collectives keep one order on every rank.
    const std::int64_t pkey = in_flight_key_;
    in_flight_key_ = -1;
    at::Tensor buffer = in_flight_.get();  // a failed gather fails here, with its message
    if (key_block(pkey) == block && key_unit(pkey) == unit && u.uses == 0) {
      full = std::move(buffer);
      ++prefetched_;
    }
  }
  if (last_ >= 0) next_[last_] = key;
  last_ = key;
  if (u.uses++ == 0) {
    at::NoGradGuard no_grad;
    if (!full.defined()) {
      full = whole_buffer(u, unit);
      try {
        all_gather_(u.shard, full);
      } catch (...) {
        --u.uses;
        throw;
      }
    }
    for (auto& e : u.entries) {
      if (e.tensor.scalar_type() != e.dtype)
        throw std::logic_error("BlockShards: " + b.path + "." + e.name + " changed dtype after it was sharded");
      const auto esize = static_cast<std::int64_t>(e.tensor.element_size());
      std::vector<std::int64_t> strides(e.sizes.size(), 1);
      for (std::size_t d = e.sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * e.sizes[d];
      e.tensor.set_(full.storage(), e.offset / esize, e.sizes, strides);
    }
  }
  if (!prefetch_) return;
  const auto it = next_.find(key);
  if (it == next_.end()) return;
  const auto& next_unit = blocks_.at(static_cast<std::size_t>(key_block(it->second))).units.at(key_unit(it->second));
  in_flight_key_ = it->second;
  // The buffer is taken here, on the caller's thread (the pool is the caller's alone).
  at::Tensor out = whole_buffer(next_unit, key_unit(it->second));
  in_flight_ = std::async(std::launch::async, [gather = all_gather_, shard = next_unit.shard, out]() mutable {
    gather(shard, out);
    return out;
  });
}

at::Tensor BlockShards::whole_buffer(const Unit& u, std::size_t unit) {
  const std::int64_t n = u.piece * world_;
  const at::Device device = whole_device(u);
  const auto options = u.shard.options().device(device);
  if (unit == 0) return at::empty({n}, options);  // a block unit: small, and whole for a block's run
  // Linear weights: at most two buffers of the largest Linear unit, reused while nothing else
  // holds them (the parameters of a released unit are empty again, so the pool's own reference
  // is the storage's only one). Without them, buffers of many sizes allocated and freed in turn
  // (one in use, the next prefetched) left the allocator holding more than two.
  for (const auto& b : pool_)
    if (b.device() == device && b.numel() >= n && b.storage().use_count() == 1) return b.narrow(0, 0, n);
  if (pool_.size() < 2) {
    std::int64_t largest = n;
    for (const auto& blk : blocks_)
      for (std::size_t k = 1; k < blk.units.size(); ++k) largest = std::max(largest, blk.units[k].piece * world_);
    pool_.push_back(at::empty({largest}, options));
    return pool_.back().narrow(0, 0, n);
  }
  return at::empty({n}, options);
}

void BlockShards::release_unit(Unit& u) {
  if (u.uses == 0 || --u.uses > 0) return;
  at::NoGradGuard no_grad;
  for (auto& e : u.entries) e.tensor.set_(empty_like_kind(e.tensor));
}

void BlockShards::end_chain() {
  last_ = -1;
  in_flight_key_ = -1;
  if (!in_flight_.valid()) return;
  // Called on the way out of a block's run, also while an exception unwinds: a failed prefetch
  // is dropped here (the island's next collective reports the dead rank).
  try {
    in_flight_.get();
  } catch (...) {
  }
}

void BlockShards::gather(std::int64_t block, bool recompute) {
  if (!options_.block_unit) return;
  gather_unit(block, 0, recompute ? 3 : at::GradMode::is_enabled() ? WeightGather::kForward : WeightGather::kInference);
}

void BlockShards::release(std::int64_t block) {
  if (!options_.block_unit) return;
  auto& b = block_at(block, "release");
  auto& u = b.units[0];
  release_unit(u);
  if (u.uses == 0) end_chain();
}

std::int64_t BlockShards::shard_bytes() const {
  std::int64_t n = 0;
  for (const auto& b : blocks_)
    for (const auto& u : b.units) n += u.piece;
  return n;
}

std::int64_t BlockShards::full_bytes() const {
  std::int64_t n = 0;
  for (const auto& b : blocks_)
    for (std::size_t k = options_.block_unit ? 0 : 1; k < b.units.size(); ++k)
      for (const auto& e : b.units[k].entries) n += e.bytes;
  return n;
}

std::int64_t BlockShards::largest_unit_bytes() const {
  std::int64_t n = 0;
  for (const auto& b : blocks_)
    for (std::size_t k = options_.block_unit ? 0 : 1; k < b.units.size(); ++k) n = std::max(n, b.units[k].bytes);
  return n;
}

std::int64_t BlockShards::units(std::int64_t block) const {
  return sharded(block) ? static_cast<std::int64_t>(blocks_[static_cast<std::size_t>(block)].units.size()) : 0;
}

}  // namespace yeto::nn
