// Diffusers' FeedForward with its parameter names: net.0.proj (the input projection inside the
// activation module), net.1 (the parameterless dropout slot, p = 0, kept so indices match) and
// net.2 (the output projection). Both projections are LoRA-capable yeto::nn::Linear layers, so
// LoRA targets "ff.net.0.proj" / "ff.net.2" match as they do in PEFT.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/activations.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::nn {

class FeedForwardImpl : public torch::nn::Module {
 public:
  // activation_fn "gelu-approximate" (tanh GELU) by default, as the DiT families configure it;
  // hidden_dim 0 means 4 x dim, dim_out 0 means dim.
  explicit FeedForwardImpl(std::int64_t dim, std::int64_t hidden_dim = 0, std::int64_t dim_out = 0,
                           Activation act = Activation::gelu_tanh, bool bias = true);
  // x [..., dim] -> [..., dim_out]: net.2(act(net.0.proj(x))).
  at::Tensor forward(const at::Tensor& x);
  Linear proj{nullptr};  // net.0.proj
  Linear out{nullptr};   // net.2
  Activation act;
};
TORCH_MODULE(FeedForward);

}  // namespace yeto::nn
