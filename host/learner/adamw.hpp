// AdamW over the float32 master trainable tensors, with global-norm gradient clipping.
// Our own implementation of PyTorch's torch.optim.AdamW update (decoupled weight decay,
// bias-corrected moments, eps added after the square root), so the state is plain named
// tensors that a checkpoint saves and restores bit-exactly. Include only where LibTorch is
// already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "learner/settings.hpp"

namespace yeto::learner {

using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

class AdamW {
 public:
  AdamW(NamedParams params, const OptimizerSettings& settings);

  // One update with learning rate `lr` from the parameters' .grad() (parameters without a
  // gradient are left alone, their moments untouched).
  void step(double lr);
  void zero_grad();
  std::int64_t steps() const { return step_; }

  // "exp_avg.<name>" / "exp_avg_sq.<name>" for every parameter, and the step count.
  NamedParams state() const;
  // Restores what state() returned; throws yeto::Error naming the missing or misshapen tensor.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::int64_t steps,
                  const std::string& label);

 private:
  NamedParams params_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  OptimizerSettings s_;
  std::int64_t step_ = 0;
};

// Global 2-norm of the gradients (float32; 0 when none has a gradient). With max_norm > 0,
// scales every gradient by min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
double clip_grad_norm(const NamedParams& params, double max_norm);

}  // namespace yeto::learner
