// Activation checkpointing: run a block without keeping its intermediate activations and
// recompute them during backward. Trades one extra forward of the block for memory.
//
// LibTorch has no torch.utils.checkpoint in C++; this implements the non-reentrant semantics
// that matter here: gradients reach the block's parameters even when no input requires grad
// (e.g. the first block of a frozen model with LoRA adapters inside), and the default RNG
// states (CPU, and each accelerator device the inputs are on) are restored for the
// recomputation so dropout draws the same mask.
#pragma once

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

}  // namespace yeto::nn
