// HunYuanDiTPlain, the Hunyuan3D-2.1 shape flow-matching DiT, in LibTorch.
//
// Tokens: the timestep embedding (token 0) followed by the embedded shape latents [B, N, C]; `depth`
// blocks of self-attention, cross-attention to the image-conditioning tokens and an MLP (a mixture
// of experts in the last `num_moe_layers` blocks), with U-Net skips (blocks i > depth / 2 fuse the
// output of block depth - 1 - i through skip_linear / skip_norm); the final layer drops token 0.
//
// Conventions of the upstream code (hy3dshape/models/denoisers/hunyuandit.py) kept here:
//   - t is the flow time in [0, 1] (0 noise, 1 data), embedded as [sin(t f), cos(t f)] with
//     f_j = 10000^(-j / (hidden / 2)), without scaling;
//   - the heads are formed from cat([q, k, v]) (cat([k, v]) in cross-attention) viewed as
//     [.., heads, 3 * head_dim] (2 * head_dim) and split, so head h's q/k/v mix slices of
//     to_q / to_k / to_v; q_norm / k_norm (RMSNorm or LayerNorm over head_dim, eps 1e-6) follow;
//   - MoE: softmax gate over the experts, top-k weights NOT renormalised, plus a shared expert; in
//     training mode the gate's auxiliary load-balancing loss
//     alpha * sum_e(mean_tokens(score_e) * n_experts * fraction_routed_e) (alpha 0.01) adds its
//     gradient in backward without being part of the returned output (AddAuxiliaryLoss).
//
// Parameter names are the upstream state-dict names (x_embedder, t_embedder.mlp.{0,2},
// blocks.N.{norm1,attn1,norm2,attn2,norm3,mlp.fc1,mlp.fc2,moe.experts.E.net.{0.proj,2},
// moe.gate.weight, moe.shared_experts.*, skip_linear, skip_norm}, final_layer.{norm_final,linear}),
// so the `model` state dict of a released checkpoint loads by name. Every Linear is LoRA-capable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/feed_forward.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::hunyuan3d {

struct DiTConfig {
  std::int64_t input_size = 4096;  // latent tokens the checkpoint was trained with (informational)
  std::int64_t in_channels = 64;
  std::int64_t hidden_size = 2048;
  std::int64_t context_dim = 1024;
  std::int64_t depth = 21;
  std::int64_t num_heads = 16;
  bool qk_norm = true;
  std::string qk_norm_type = "rms";  // "rms" or "layer"
  std::string norm_type = "layer";   // "layer" or "rms"
  bool qkv_bias = false;
  std::int64_t text_len = 1370;      // conditioning tokens (informational)
  std::int64_t num_moe_layers = 6;
  std::int64_t num_experts = 8;
  std::int64_t moe_top_k = 2;
  std::int64_t guidance_cond_proj_dim = 0;  // 0: none
  double moe_aux_loss_alpha = 0.01;

  std::int64_t head_dim() const { return hidden_size / num_heads; }
  bool moe_block(std::int64_t i) const { return depth - i <= num_moe_layers; }
  bool skip_block(std::int64_t i) const { return i > depth / 2; }

  // Reads the upstream config (the `params` of the denoiser in the release's config.yaml, or a
  // config.json of the same keys; `_`-prefixed keys and unknown keys are ignored). Options this
  // implementation does not have (use_pos_emb, use_attention_pooling, with_decoupled_ca) are
  // refused. Throws std::invalid_argument naming the key.
  static DiTConfig from_json(const nlohmann::json& j);
};

// A LayerNorm or RMSNorm over the last axis, by the config's name, with weight (and bias for
// LayerNorm), eps 1e-6.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(std::int64_t dim, const std::string& type, double eps = 1e-6);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;
  bool rms;
  double eps;
};
TORCH_MODULE(Norm);

// attn1 (self) and attn2 (cross) with the interleaved head split.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(std::int64_t dim, std::int64_t kv_dim, std::int64_t heads, bool qkv_bias, bool qk_norm,
                const std::string& qk_norm_type, bool cross);
  // x [B, N, dim]; context [B, M, kv_dim] for cross-attention (undefined for self-attention).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {});
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, out_proj{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};  // null without qk_norm
  std::int64_t heads, head_dim;
  bool cross;
};
TORCH_MODULE(Attention);

// Upstream MLP: fc1 -> GELU (erf) -> fc2, inner 4 x width.
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(std::int64_t width);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

// MoEBlock: `gate` (weight [experts, dim], no bias), `experts` (Diffusers FeedForward with exact
// GELU, inner 4 x dim) and `shared_experts`.
class MoEBlockImpl : public torch::nn::Module {
 public:
  MoEBlockImpl(std::int64_t dim, std::int64_t experts, std::int64_t top_k, double aux_loss_alpha);
  // x [B, N, dim]. In training mode with gradients the gate's auxiliary loss is attached to the
  // output (backward adds its gradient) and kept in last_aux_loss; otherwise last_aux_loss is
  // undefined.
  at::Tensor forward(const at::Tensor& x);
  std::shared_ptr<torch::nn::Module> gate;
  at::Tensor gate_weight;  // gate.weight
  torch::nn::ModuleList experts{nullptr};
  nn::FeedForward shared_experts{nullptr};
  std::int64_t top_k;
  double alpha;
  at::Tensor last_aux_loss;
};
TORCH_MODULE(MoEBlock);

class DiTBlockImpl : public torch::nn::Module {
 public:
  DiTBlockImpl(const DiTConfig& c, std::int64_t index);
  // x [B, 1 + N, hidden]; context [B, M, context_dim]; skip: the stacked earlier block's output
  // (defined exactly for skip blocks).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& skip);
  Norm norm1{nullptr}, norm2{nullptr}, norm3{nullptr}, skip_norm{nullptr};
  Attention attn1{nullptr}, attn2{nullptr};
  nn::Linear skip_linear{nullptr};
  Mlp mlp{nullptr};
  MoEBlock moe{nullptr};
};
TORCH_MODULE(DiTBlock);

class HunYuanDiTPlainImpl : public torch::nn::Module {
 public:
  explicit HunYuanDiTPlainImpl(const DiTConfig& config);

  // x [B, N, in_channels] latent tokens; t [B] (or one value) flow time in [0, 1]; context
  // [B, M, context_dim] image tokens. Returns the velocity [B, N, in_channels], computed in the
  // model's compute dtype (inputs are converted to it). Throws std::invalid_argument for wrong shapes.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& context);

  // The auxiliary losses of the MoE gates of the last forward in training mode, by gate path
  // ("blocks.19.moe.gate"); empty after an eval-mode forward.
  std::vector<std::pair<std::string, at::Tensor>> moe_aux_losses() const;

  const DiTConfig& config() const { return config_; }

  nn::Linear x_embedder{nullptr};
  std::shared_ptr<torch::nn::Module> t_embedder;
  nn::Linear t_mlp0{nullptr}, t_mlp2{nullptr};  // t_embedder.mlp.0 / .2
  at::Tensor t_cond_proj;                       // t_embedder.cond_proj.weight (guidance_cond_proj_dim > 0)
  torch::nn::ModuleList blocks{nullptr};
  std::shared_ptr<torch::nn::Module> final_layer;
  Norm norm_final{nullptr};                    // final_layer.norm_final (LayerNorm, eps 1e-6)
  nn::Linear final_linear{nullptr};            // final_layer.linear

 private:
  DiTConfig config_;
};
TORCH_MODULE(HunYuanDiTPlain);

}  // namespace yeto::hunyuan3d
