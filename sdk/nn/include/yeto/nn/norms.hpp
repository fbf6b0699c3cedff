// Normalisation layers with Diffusers' parameter names and numerics.
//
//   RMSNorm            weight [dim] (optional bias); variance in float32 (Diffusers / T5 style).
//   LayerNorm          weight/bias optional (elementwise_affine, bias), like torch.nn.LayerNorm.
//   AdaLayerNormZero   linear(silu(emb)) -> 6 x dim: shift/scale/gate for attention and MLP
//                      (Flux, SD3 joint blocks); children `linear`, `norm`.
//   AdaLayerNormZeroSingle     linear -> 3 x dim (Flux single-stream blocks).
//   AdaLayerNormContinuous     linear(silu(cond)) -> scale, shift (in that order), final norms.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/linear.hpp"

namespace yeto::nn {

// x * rsqrt(mean(x^2) + eps) computed in float32, then multiplied by `weight` (when defined)
// in the weight's dtype as Diffusers' RMSNorm does; returned in x's dtype without a weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// at::group_norm, with a bf16 / half input on the CPU computed in float32 and rounded once at
// the end (the float32 math the reduced-precision kernels are meant to do). LibTorch 1.13's
// reduced-precision CPU kernel for a channels-last input (what a spatial attention's
// transpose + reshape hands back) accumulates the group statistics in the input's precision:
// a VAE mid block's norms came out 8-12 % off float32 on bf16, against under 0.5 % for the same
// values contiguous. Other devices and float32 keep the native kernel.
at::Tensor group_norm(const at::Tensor& x, std::int64_t groups, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);
// The same through a torch::nn::GroupNorm module's parameters and options (its state-dict names
// stay the module's).
at::Tensor group_norm(const torch::nn::GroupNorm& norm, const at::Tensor& x);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps = 1e-6, bool elementwise_affine = true, bool bias = false);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // undefined without elementwise_affine
  at::Tensor bias;
  double eps;
};
TORCH_MODULE(RMSNorm);

class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(std::int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  at::Tensor bias;
  std::int64_t dim;
  double eps;
};
TORCH_MODULE(LayerNorm);

// Modulation helper: norm(x) * (1 + scale[:, None]) + shift[:, None].
at::Tensor modulate(const at::Tensor& normed, const at::Tensor& shift, const at::Tensor& scale);

struct AdaZeroOut {
  at::Tensor x;  // modulated normed input for attention
  at::Tensor gate_msa, shift_mlp, scale_mlp, gate_mlp;
};

class AdaLayerNormZeroImpl : public torch::nn::Module {
 public:
  // norm_type "layer_norm" (eps 1e-6, no affine) as Flux / SD3 use it.
  AdaLayerNormZeroImpl(std::int64_t embedding_dim, bool bias = true);
  AdaZeroOut forward(const at::Tensor& x, const at::Tensor& emb);
  Linear linear{nullptr};
  LayerNorm norm{nullptr};
};
TORCH_MODULE(AdaLayerNormZero);

class AdaLayerNormZeroSingleImpl : public torch::nn::Module {
 public:
  AdaLayerNormZeroSingleImpl(std::int64_t embedding_dim, bool bias = true);
  // (modulated x, gate_msa)
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& emb);
  Linear linear{nullptr};
  LayerNorm norm{nullptr};
};
TORCH_MODULE(AdaLayerNormZeroSingle);

class AdaLayerNormContinuousImpl : public torch::nn::Module {
 public:
  // norm_type "layer_norm" or "rms_norm".
  AdaLayerNormContinuousImpl(std::int64_t embedding_dim, std::int64_t conditioning_embedding_dim,
                             bool elementwise_affine = false, double eps = 1e-6, bool bias = true,
                             const std::string& norm_type = "layer_norm");
  at::Tensor forward(const at::Tensor& x, const at::Tensor& conditioning);
  Linear linear{nullptr};
  std::shared_ptr<torch::nn::Module> norm;  // LayerNormImpl or RMSNormImpl
};
TORCH_MODULE(AdaLayerNormContinuous);

}  // namespace yeto::nn
