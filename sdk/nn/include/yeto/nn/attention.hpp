// Multi-head attention with Diffusers' `Attention` parameter names (to_q, to_k, to_v,
// to_out.0, norm_q, norm_k, group_norm, add_q_proj, add_k_proj, add_v_proj, to_add_out,
// norm_added_q, norm_added_k), computed with yeto::compat::scaled_dot_product_attention: the fused
// kernel on LibTorch >= 2.0, the explicit float32 softmax(QK^T*scale + mask)V on 1.13.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/linear.hpp"

namespace yeto::nn {

// q, k, v: [B, H, L, D]; mask broadcastable to [B, H, Lq, Lk] (additive float, or bool where
// true = attend). scale <= 0 means 1/sqrt(D). Thin wrapper over the compat layer so plugins
// have one call to make.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask = {},
                     bool is_causal = false, double scale = 0.0);

// [B, L, H*D] -> [B, H, L, D] and back.
at::Tensor split_heads(const at::Tensor& x, std::int64_t heads);
at::Tensor merge_heads(const at::Tensor& x);

struct AttentionOptions {
  std::int64_t query_dim = 0;
  std::int64_t cross_attention_dim = 0;  // 0: same as query_dim
  std::int64_t heads = 8;
  std::int64_t dim_head = 64;
  std::int64_t out_dim = 0;              // 0: query_dim (then inner dim = heads * dim_head)
  bool bias = false;                     // q/k/v projections
  bool out_bias = true;
  std::string qk_norm;                   // "", "rms_norm", "layer_norm"
  double eps = 1e-5;
  std::int64_t norm_num_groups = 0;      // > 0: GroupNorm on the input (VAE mid-block attention)
  bool residual_connection = false;
  double rescale_output_factor = 1.0;
  std::int64_t added_kv_proj_dim = 0;    // > 0: joint (MM-DiT) attention with add_*_proj
  bool added_proj_bias = true;
  bool context_pre_only = false;         // no to_add_out
  bool pre_only = false;                 // no to_out (Flux single-stream blocks)
  bool context_first = true;             // joint order: [context, x] (Flux) or [x, context] (SD3)
  double scale = 0.0;                    // 0: 1/sqrt(dim_head)

  // A DiT block's attention as Diffusers builds it for Flux, SD3 and their kin: width `dim` in
  // and out, `heads` x `head_dim`, biased q/k/v, q/k normalised by `qk_norm` (eps 1e-6).
  static AttentionOptions dit(std::int64_t dim, std::int64_t heads, std::int64_t head_dim,
                              const std::string& qk_norm = "rms_norm") {
    AttentionOptions o;
    o.query_dim = dim;
    o.heads = heads;
    o.dim_head = head_dim;
    o.out_dim = dim;
    o.bias = true;
    o.qk_norm = qk_norm;
    o.eps = 1e-6;
    return o;
  }
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);

  // Self attention (context undefined) or cross attention. x: [B, L, C], or [B, C, H, W] with
  // group_norm (treated as H*W tokens). rope_cos / rope_sin ([L, D]) rotate q and k when given.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {}, const at::Tensor& mask = {},
                     const at::Tensor& rope_cos = {}, const at::Tensor& rope_sin = {});

  // Joint attention over [context, x] (or [x, context]); returns (x_out, context_out). The
  // rotary tables cover the concatenated sequence in that order.
  std::pair<at::Tensor, at::Tensor> forward_joint(const at::Tensor& x, const at::Tensor& context,
                                                  const at::Tensor& mask = {}, const at::Tensor& rope_cos = {},
                                                  const at::Tensor& rope_sin = {});

  const AttentionOptions& options() const { return opt_; }

  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};
  torch::nn::GroupNorm group_norm{nullptr};
  std::shared_ptr<torch::nn::Module> norm_q, norm_k, norm_added_q, norm_added_k;
  Linear add_q_proj{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr}, to_add_out{nullptr};

 private:
  at::Tensor qk_normed(const std::shared_ptr<torch::nn::Module>& norm, const at::Tensor& t) const;
  at::Tensor project_out(const at::Tensor& t);
  AttentionOptions opt_;
  std::int64_t inner_dim_ = 0;
};
TORCH_MODULE(Attention);

}  // namespace yeto::nn
