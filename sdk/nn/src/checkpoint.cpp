#include "yeto/nn/checkpoint.hpp"

#include <algorithm>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

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

// The autograd node that stands for the whole checkpointed block.
class CheckpointNode : public torch::autograd::Node {
 public:
  CheckpointNode(CheckpointFn fn, std::vector<at::Tensor> saved, std::vector<bool> needs_grad, RngStates rng)
      : fn_(std::move(fn)), saved_(std::move(saved)), needs_grad_(std::move(needs_grad)), rng_(std::move(rng)) {}

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
    return result;
  }

 private:
  CheckpointFn fn_;
  std::vector<at::Tensor> saved_;
  std::vector<bool> needs_grad_;
  RngStates rng_;
  std::vector<int> slots_;
};

}  // namespace

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs) {
  if (!at::GradMode::is_enabled()) {
    return fn(inputs);
  }
  auto rng = RngStates::capture(inputs);
  std::vector<at::Tensor> outputs;
  {
    at::NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  std::vector<at::Tensor> saved;
  std::vector<bool> needs;
  for (const auto& t : inputs) {
    saved.push_back(t.defined() ? t.detach() : t);
    needs.push_back(t.defined() && t.requires_grad());
  }
  auto node = std::shared_ptr<CheckpointNode>(new CheckpointNode(fn, std::move(saved), std::move(needs), rng),
                                              torch::autograd::deleteNode);
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
  if (activation_checkpointing.recomputes(index) && at::GradMode::is_enabled()) return checkpoint(fn, inputs);
  return fn(inputs);
}

}  // namespace yeto::nn
