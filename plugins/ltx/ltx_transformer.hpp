// LTXVideoTransformer3DModel (LTX-Video 0.9.x) in LibTorch, built from the SDK's nn blocks.
//
// Parameter names are the Diffusers v0.33.1 state-dict names (proj_in, time_embed.*,
// caption_projection.*, transformer_blocks.N.{norm1,attn1,attn2,ff,scale_shift_table},
// scale_shift_table, proj_out), so a Diffusers checkpoint loads by name; every Linear is
// LoRA-capable with PEFT names.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/feed_forward.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::ltx {

struct LtxTransformerConfig {
  std::int64_t in_channels = 128;
  std::int64_t out_channels = 128;
  std::int64_t patch_size = 1;
  std::int64_t patch_size_t = 1;
  std::int64_t num_attention_heads = 32;
  std::int64_t attention_head_dim = 64;
  std::int64_t cross_attention_dim = 2048;
  std::int64_t num_layers = 28;
  std::string activation_fn = "gelu-approximate";
  std::string qk_norm = "rms_norm_across_heads";
  bool norm_elementwise_affine = false;
  double norm_eps = 1e-6;
  std::int64_t caption_channels = 4096;
  bool attention_bias = true;
  bool attention_out_bias = true;

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }

  // Reads a Diffusers config.json object. Throws std::invalid_argument naming the key for a wrong
  // type, a non-positive size or a setting this implementation does not have (qk_norm other than
  // rms_norm_across_heads, an activation other than gelu-approximate).
  static LtxTransformerConfig from_json(const nlohmann::json& j);
};

// The 3-D rotary table of LTXVideoRotaryPosEmbed: cos/sin [F*H*W, inner_dim] for a latent grid of
// num_frames x height x width tokens (frame-major), coordinates scaled by the pipeline's
// rope_interpolation_scale (temporal, spatial, spatial) and the patch sizes, then divided by the
// base grid (20 frames, 2048 x 2048 pixels). Computed in float32 as upstream.
nn::RopeTables ltx_rope(std::int64_t dim, std::int64_t num_frames, std::int64_t height, std::int64_t width,
                        const std::array<double, 3>& rope_interpolation_scale, std::int64_t patch_size,
                        std::int64_t patch_size_t);

// Diffusers `Attention` with qk_norm "rms_norm_across_heads" and the LTX processor: RMS norm
// over the whole inner dimension (eps 1e-5, learnt weight), rotary embedding on q and k before
// the split into heads, additive mask on the scores.
class LtxAttentionImpl : public torch::nn::Module {
 public:
  LtxAttentionImpl(std::int64_t query_dim, std::int64_t context_dim, std::int64_t heads, std::int64_t head_dim,
                   bool bias, bool out_bias);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {}, const at::Tensor& mask = {},
                     const nn::RopeTables* rope = nullptr);
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
  std::int64_t heads;
};
TORCH_MODULE(LtxAttention);

class LtxTransformerBlockImpl : public torch::nn::Module {
 public:
  explicit LtxTransformerBlockImpl(const LtxTransformerConfig& c);
  // temb [B, 1, 6 * dim]; mask: additive [B, 1, T] bias for the caption cross-attention (or undefined).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& temb,
                     const nn::RopeTables& rope, const at::Tensor& mask);
  nn::RMSNorm norm1{nullptr}, norm2{nullptr};
  LtxAttention attn1{nullptr}, attn2{nullptr};
  nn::FeedForward ff{nullptr};
  at::Tensor scale_shift_table;  // [6, dim]
};
TORCH_MODULE(LtxTransformerBlock);

// PixArtAlphaCombinedTimestepSizeEmbeddings without size conditions (size_emb_dim 0):
// Timesteps(256, flip_sin_to_cos, shift 0) -> timestep_embedder (linear_1, silu, linear_2). Used by
// the transformer's AdaLayerNormSingle (`time_embed.emb`) and the VAE decoder's timestep blocks.
class LtxTimestepEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit LtxTimestepEmbeddingsImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& timestep, at::ScalarType dtype);
  nn::Timesteps time_proj{nullptr};
  nn::TimestepEmbedding timestep_embedder{nullptr};
};
TORCH_MODULE(LtxTimestepEmbeddings);

// AdaLayerNormSingle(dim, use_additional_conditions=False): emb, then linear(silu(emb)) -> 6 x dim.
class LtxAdaLayerNormSingleImpl : public torch::nn::Module {
 public:
  explicit LtxAdaLayerNormSingleImpl(std::int64_t dim);
  // Returns (linear output [N, 6 dim], embedded timestep [N, dim]).
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& timestep, at::ScalarType dtype);
  LtxTimestepEmbeddings emb{nullptr};
  nn::Linear linear{nullptr};
};
TORCH_MODULE(LtxAdaLayerNormSingle);

// Its blocks recompute in backward as activation_checkpointing says.
class LtxVideoTransformer3DModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit LtxVideoTransformer3DModelImpl(const LtxTransformerConfig& config);

  // hidden_states [B, F*H*W, in_channels] (packed latents), encoder_hidden_states [B, T,
  // caption_channels], timestep [B] on the 0..1000 scale, encoder_attention_mask [B, T] (1 keep,
  // 0 padding; any dtype; undefined: no mask). Returns [B, F*H*W, out_channels].
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep, const at::Tensor& encoder_attention_mask, std::int64_t num_frames,
                     std::int64_t height, std::int64_t width, const std::array<double, 3>& rope_interpolation_scale);

  const LtxTransformerConfig& config() const { return config_; }

  nn::Linear proj_in{nullptr}, proj_out{nullptr};
  LtxAdaLayerNormSingle time_embed{nullptr};
  nn::TextProjection caption_projection{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  at::Tensor scale_shift_table;  // [2, dim]

 private:
  LtxTransformerConfig config_;
};
TORCH_MODULE(LtxVideoTransformer3DModel);

}  // namespace yeto::ltx
