// SD3Transformer2DModel (Stable Diffusion 3 / 3.5) in LibTorch, built from the SDK's nn blocks.
//
// Parameter names are exactly the Diffusers state-dict names (pos_embed.proj, pos_embed.pos_embed,
// time_text_embed.*, context_embedder, transformer_blocks.N.{norm1, norm1_context, attn, attn2,
// ff, ff_context}, norm_out.linear, proj_out), so a Diffusers checkpoint loads by name, and every
// Linear is LoRA-capable with PEFT names. Covers SD3.5's additions: RMS (or layer) q/k norm,
// MMDiT-X dual attention in the blocks `dual_attention_layers` lists (a second self-attention
// on the image stream, modulated by SD35AdaLayerNormZeroX), and the cropped position table of
// `pos_embed_max_size`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/attention.hpp"
#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::sd35 {

struct SD3TransformerConfig {
  std::int64_t sample_size = 128;
  std::int64_t patch_size = 2;
  std::int64_t in_channels = 16;
  std::int64_t out_channels = 16;  // config null: in_channels
  std::int64_t num_layers = 18;
  std::int64_t attention_head_dim = 64;
  std::int64_t num_attention_heads = 18;
  std::int64_t joint_attention_dim = 4096;
  std::int64_t caption_projection_dim = 1152;
  std::int64_t pooled_projection_dim = 2048;
  std::int64_t pos_embed_max_size = 96;  // 0 (config null): a table of sample_size / patch_size
  std::vector<std::int64_t> dual_attention_layers;
  std::string qk_norm;  // "" (null), "rms_norm" or "layer_norm"

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  bool dual_attention(std::int64_t block) const;

  // Reads a Diffusers config.json object with Diffusers' defaults for absent keys. Throws
  // std::invalid_argument naming the key for a wrong type, a non-positive size, an unknown
  // qk_norm, a dual-attention index outside the blocks, or caption_projection_dim differing
  // from the inner dimension (the joint blocks need both streams at one width).
  static SD3TransformerConfig from_json(const nlohmann::json& j);
};

// get_2d_sincos_pos_embed(embed_dim, (grid_h, grid_w), base_size, interpolation_scale) as
// Diffusers computes it (float32 grid, float64 frequencies, [sin, cos] of the column
// coordinate, then of the row coordinate), returned as float32 [grid_h * grid_w, embed_dim].
at::Tensor sincos_pos_embed_2d(std::int64_t embed_dim, std::int64_t grid_h, std::int64_t grid_w, double base_size,
                               double interpolation_scale = 1.0);

// Diffusers PatchEmbed as SD3 uses it: a patch_size-strided conv to tokens, plus the sin-cos
// position table. With pos_embed_max_size the table covers a max x max grid and is stored in
// checkpoints (buffer `pos_embed`); the centre crop of the latent's patch grid is added.
// Without it the table is not stored: the sample_size grid is precomputed and other grids
// computed on the fly, as upstream.
class PatchEmbedImpl : public torch::nn::Module {
 public:
  PatchEmbedImpl(std::int64_t sample_size, std::int64_t patch_size, std::int64_t in_channels, std::int64_t embed_dim,
                 std::int64_t pos_embed_max_size);
  at::Tensor forward(const at::Tensor& latent);
  // The position rows for an h x w patch grid: [1, h*w, embed_dim].
  at::Tensor positions(std::int64_t h, std::int64_t w);
  torch::nn::Conv2d proj{nullptr};
  at::Tensor pos_embed;  // [1, N, embed_dim]

 private:
  std::int64_t patch_size_, embed_dim_, max_size_, base_size_, grid_;
};
TORCH_MODULE(PatchEmbed);

// SD35AdaLayerNormZeroX: linear(silu(emb)) -> 9 x dim: shift/scale/gate for attention, MLP and
// the second (dual) attention; both attention inputs are modulations of one layer norm.
struct AdaZeroXOut {
  at::Tensor x, gate_msa, shift_mlp, scale_mlp, gate_mlp, x2, gate_msa2;
};
class AdaLayerNormZeroXImpl : public torch::nn::Module {
 public:
  explicit AdaLayerNormZeroXImpl(std::int64_t dim);
  AdaZeroXOut forward(const at::Tensor& x, const at::Tensor& emb);
  nn::Linear linear{nullptr};
  nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(AdaLayerNormZeroX);

// Diffusers FeedForward(dim, dim_out=dim, activation_fn="gelu-approximate"): net.0.proj, tanh
// GELU, net.2 (net.1 is the parameterless dropout slot).
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear proj{nullptr}, out{nullptr};
};
TORCH_MODULE(FeedForward);

// JointTransformerBlock: image and text streams with their own weights attend jointly over
// [image, text]; optionally a second self-attention over the image stream (dual attention);
// the last block (context_pre_only) only reads the text stream.
class JointTransformerBlockImpl : public torch::nn::Module {
 public:
  JointTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, bool context_pre_only,
                            const std::string& qk_norm, bool dual_attention);
  // Returns (encoder_hidden_states, hidden_states); the first is undefined after a
  // context_pre_only block.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                            const at::Tensor& temb);
  bool context_pre_only, dual_attention;
  nn::AdaLayerNormZero norm1{nullptr};                // single attention
  AdaLayerNormZeroX norm1_x{nullptr};                 // dual attention (also named norm1)
  nn::AdaLayerNormZero norm1_context{nullptr};        // text stream continues
  nn::AdaLayerNormContinuous norm1_context_pre{nullptr};  // context_pre_only (also named norm1_context)
  nn::Attention attn{nullptr}, attn2{nullptr};
  nn::LayerNorm norm2{nullptr}, norm2_context{nullptr};
  FeedForward ff{nullptr}, ff_context{nullptr};
};
TORCH_MODULE(JointTransformerBlock);

// Its joint blocks recompute in backward as activation_checkpointing says.
class SD3Transformer2DModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit SD3Transformer2DModelImpl(const SD3TransformerConfig& config);

  // hidden_states [B, in_channels, H, W] (H, W multiples of patch_size), encoder_hidden_states
  // [B, T, joint_attention_dim], pooled_projections [B, pooled_projection_dim], timestep [B] on
  // the 0..1000 scale (used as given, as SD3 pipelines pass it). Returns [B, out_channels, H, W].
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& pooled_projections, const at::Tensor& timestep);

  const SD3TransformerConfig& config() const { return config_; }

  PatchEmbed pos_embed{nullptr};
  nn::CombinedTimestepEmbeddings time_text_embed{nullptr};
  nn::Linear context_embedder{nullptr}, proj_out{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  nn::AdaLayerNormContinuous norm_out{nullptr};

 private:
  SD3TransformerConfig config_;
};
TORCH_MODULE(SD3Transformer2DModel);

}  // namespace yeto::sd35
