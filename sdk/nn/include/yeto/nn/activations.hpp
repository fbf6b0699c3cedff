// Activation functions under the names Diffusers and transformers configs use.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace yeto::nn {

enum class Activation {
  identity,
  relu,
  silu,        // "silu", "swish"
  gelu,        // exact (erf) GELU
  gelu_tanh,   // tanh approximation: "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu-approximate"
  quick_gelu,  // x * sigmoid(1.702 x), CLIP
  mish,
};

// Parses a config name ("gelu", "gelu_new", "quick_gelu", "silu", "relu", ...). Throws
// std::invalid_argument naming the value and the accepted names.
Activation parse_activation(const std::string& name);
std::string activation_name(Activation a);

at::Tensor apply_activation(Activation a, const at::Tensor& x);

at::Tensor quick_gelu(const at::Tensor& x);
at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace yeto::nn
