// WanTransformer3DModel (Wan 2.1 / 2.2 text-to-video) in LibTorch, built from the SDK's nn blocks.
//
// Parameter names are the Diffusers state-dict names (patch_embedding, condition_embedder.*,
// blocks.N.{attn1,attn2,ffn,norm2,scale_shift_table}, scale_shift_table, proj_out), so Diffusers
// checkpoints (v0.33 .. v0.40 layouts) load by name. Every projection is an nn::Linear and can
// carry PEFT-named LoRA adapters. Numerics follow Diffusers v0.33.1: the 3-axis rotary
// embedding is applied in float64 as upstream's complex multiply, the norms and the
// modulation run in float32.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/feed_forward.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::wan {

struct WanTransformerConfig {
  std::vector<std::int64_t> patch_size = {1, 2, 2};
  std::int64_t num_attention_heads = 40;
  std::int64_t attention_head_dim = 128;
  std::int64_t in_channels = 16;
  std::int64_t out_channels = 16;
  std::int64_t text_dim = 4096;
  std::int64_t freq_dim = 256;
  std::int64_t ffn_dim = 13824;
  std::int64_t num_layers = 40;
  bool cross_attn_norm = true;
  double eps = 1e-6;
  std::int64_t rope_max_seq_len = 1024;

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  // Reads a Diffusers config.json object. Throws std::invalid_argument naming the key for a
  // wrong type, a bad value, or an option this implementation does not serve (image_dim /
  // added_kv_proj_dim: the image-to-video variants; qk_norm other than rms_norm_across_heads).
  static WanTransformerConfig from_json(const nlohmann::json& j);
};

// Wan attention: biased q/k/v/out projections, RMSNorm over all heads on q and k, rotary on
// self attention only.
class WanAttentionImpl : public torch::nn::Module {
 public:
  WanAttentionImpl(std::int64_t dim, std::int64_t heads, double eps);
  // x [B, L, dim]; context [B, T, dim] for cross attention (undefined: self attention);
  // rope_cos / rope_sin [L, head_dim] float64 (self attention).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& rope_cos,
                     const at::Tensor& rope_sin);
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
  std::int64_t heads;
};
TORCH_MODULE(WanAttention);

class WanTransformerBlockImpl : public torch::nn::Module {
 public:
  WanTransformerBlockImpl(std::int64_t dim, std::int64_t ffn_dim, std::int64_t heads, bool cross_attn_norm,
                          double eps);
  // temb: [B, 6, dim] time projection.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& temb,
                     const at::Tensor& rope_cos, const at::Tensor& rope_sin);
  WanAttention attn1{nullptr}, attn2{nullptr};
  nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  nn::FeedForward ffn{nullptr};
  at::Tensor scale_shift_table;  // [1, 6, dim]
  bool cross_attn_norm;
};
TORCH_MODULE(WanTransformerBlock);

// Diffusers WanTimeTextImageEmbedding without the image branch.
class WanConditionEmbedderImpl : public torch::nn::Module {
 public:
  WanConditionEmbedderImpl(std::int64_t dim, std::int64_t freq_dim, std::int64_t text_dim);
  nn::Timesteps timesteps_proj{nullptr};
  nn::TimestepEmbedding time_embedder{nullptr};
  nn::Linear time_proj{nullptr};
  nn::TextProjection text_embedder{nullptr};
};
TORCH_MODULE(WanConditionEmbedder);

// Its blocks recompute in backward as activation_checkpointing says.
class WanTransformer3DModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit WanTransformer3DModelImpl(const WanTransformerConfig& config);

  // hidden_states [B, in_channels, F, H, W] (F, H, W divisible by the patch size), timestep [B]
  // on the 0..1000 scale (int64 or float), or [B, F' H' W'] with one value per token (Wan 2.2
  // TI2V: the time embedding and every adaLN modulation per token), encoder_hidden_states
  // [B, T, text_dim].
  // Returns [B, out_channels, F, H, W].
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& timestep,
                     const at::Tensor& encoder_hidden_states);

  const WanTransformerConfig& config() const { return config_; }

  torch::nn::Conv3d patch_embedding{nullptr};
  WanConditionEmbedder condition_embedder{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  nn::LayerNorm norm_out{nullptr};
  nn::Linear proj_out{nullptr};
  at::Tensor scale_shift_table;  // [1, 2, dim]

 private:
  WanTransformerConfig config_;
};
TORCH_MODULE(WanTransformer3DModel);

// The 3-axis rotary tables of a (frames, height, width) token grid, float64 [F*H*W, head_dim],
// each frequency repeated for its (real, imaginary) pair as upstream's complex table.
std::pair<at::Tensor, at::Tensor> wan_rope_tables(std::int64_t head_dim, std::int64_t frames, std::int64_t height,
                                                  std::int64_t width, std::int64_t max_seq_len, double theta = 10000.0);

}  // namespace yeto::wan
