// PixArtTransformer2DModel (PixArt-Alpha / PixArt-Sigma) in LibTorch, built from the SDK's nn blocks.
//
// A DiT over 2x2 (patch_size) latent patches with a fixed 2-D sin-cos position table, one shared
// adaptive-norm projection of the timestep (adaLN-single: `adaln_single`, 6 x inner per sample,
// offset per block by a learned `scale_shift_table`), self-attention, cross-attention to the
// projected T5 caption tokens (`caption_projection`) with a padding mask, and a tanh-GELU MLP.
// With `use_additional_conditions` (the 1024 px checkpoints) the timestep embedding also gets the
// image resolution and aspect ratio ("micro-conditions"). The output has `out_channels` channels:
// 2 x in_channels for the learned-sigma checkpoints (noise prediction, then variance).
//
// Parameter names are exactly the Diffusers state-dict names (pos_embed.proj, adaln_single.*,
// caption_projection.*, transformer_blocks.N.{attn1,attn2,ff,scale_shift_table}, scale_shift_table,
// proj_out), so a Diffusers checkpoint loads by name; every Linear is LoRA-capable.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/activations.hpp"
#include "yeto/nn/attention.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/feed_forward.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::pixart {

struct PixArtTransformerConfig {
  std::int64_t num_attention_heads = 16;
  std::int64_t attention_head_dim = 72;
  std::int64_t in_channels = 4;
  std::int64_t out_channels = 8;
  std::int64_t num_layers = 28;
  std::int64_t cross_attention_dim = 1152;
  bool attention_bias = true;
  std::int64_t sample_size = 128;
  std::int64_t patch_size = 2;
  nn::Activation activation = nn::Activation::gelu_tanh;  // "gelu-approximate"
  bool norm_elementwise_affine = false;
  double norm_eps = 1e-6;
  double interpolation_scale = 2.0;       // resolved: config value, else max(sample_size // 64, 1)
  bool use_additional_conditions = true;  // resolved: config value, else sample_size == 128
  std::int64_t caption_channels = 4096;

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  // The timestep embedding's resolution / aspect-ratio parts each get inner_dim // 3 channels.
  std::int64_t size_emb_dim() const { return inner_dim() / 3; }
  // True when the output carries a variance half (out_channels = 2 x in_channels).
  bool learned_sigma() const { return out_channels == 2 * in_channels; }

  // Reads a Diffusers config.json object (PixArtTransformer2DModel, or the legacy Transformer2DModel
  // key set of the PixArt-XL-2 snapshots). Unknown keys are ignored as from_config does; options this
  // implementation does not have (another norm_type or attention_type, only_cross_attention,
  // GEGLU feed-forwards, no caption projection) are refused. Throws std::invalid_argument naming
  // the key.
  static PixArtTransformerConfig from_json(const nlohmann::json& j);
};

// BasicTransformerBlock with norm_type "ada_norm_single".
class PixArtBlockImpl : public torch::nn::Module {
 public:
  explicit PixArtBlockImpl(const PixArtTransformerConfig& c);
  // x [B, N, D]; context [B, T, D] (projected captions); context_bias [B, 1, 1, T] additive or
  // undefined; timestep [B, 6 * D] (adaln_single's output).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& context_bias,
                     const at::Tensor& timestep);
  nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  nn::Attention attn1{nullptr}, attn2{nullptr};
  nn::FeedForward ff{nullptr};
  at::Tensor scale_shift_table;  // [6, D]
};
TORCH_MODULE(PixArtBlock);

// PatchEmbed: conv patchify (`proj`) plus the 2-D sin-cos table, which is not stored in
// checkpoints (computed for the input's patch grid, as Diffusers does when the size changes).
class PixArtPatchEmbedImpl : public torch::nn::Module {
 public:
  PixArtPatchEmbedImpl(std::int64_t in_channels, std::int64_t dim, std::int64_t patch_size, std::int64_t base_size,
                       double interpolation_scale);
  at::Tensor forward(const at::Tensor& latents);
  torch::nn::Conv2d proj{nullptr};
  std::int64_t dim, patch_size, base_size;
  double interpolation_scale;
};
TORCH_MODULE(PixArtPatchEmbed);

// get_2d_sincos_pos_embed(dim, (h, w), base_size, interpolation_scale) as Diffusers v0.33.1
// computes it: [h * w, dim] float32, first half from the column coordinate, second from the row.
at::Tensor sincos_pos_embed_2d(std::int64_t dim, std::int64_t h, std::int64_t w, std::int64_t base_size,
                               double interpolation_scale);

// PixArtAlphaCombinedTimestepSizeEmbeddings + the adaLN-single projection.
class AdaLayerNormSingleImpl : public torch::nn::Module {
 public:
  AdaLayerNormSingleImpl(std::int64_t dim, bool use_additional_conditions);
  // Returns (linear(silu(emb)) [B, 6 * dim], emb [B, dim]). resolution [B, 2] and aspect_ratio
  // [B, 1] are needed with additional conditions.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& timestep, const at::Tensor& resolution,
                                            const at::Tensor& aspect_ratio, std::int64_t batch, at::ScalarType dtype);
  std::shared_ptr<torch::nn::Module> emb;
  nn::Timesteps time_proj{nullptr};
  nn::TimestepEmbedding timestep_embedder{nullptr}, resolution_embedder{nullptr}, aspect_ratio_embedder{nullptr};
  nn::Linear linear{nullptr};
  bool use_additional_conditions;
};
TORCH_MODULE(AdaLayerNormSingle);

// Its blocks recompute in backward as activation_checkpointing says.
class PixArtTransformer2DModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit PixArtTransformer2DModelImpl(const PixArtTransformerConfig& config);

  // hidden_states [B, in_channels, H, W] (H, W multiples of patch_size); encoder_hidden_states
  // [B, T, caption_channels]; timestep [B] (or one value for all), the DDPM/DPM-Solver integer
  // scale; encoder_attention_mask [B, T] 1 = keep / 0 = padding (turned into the additive bias
  // (1 - mask) * -10000, as Diffusers does), or a [B, 1, T] bias, or undefined; resolution [B, 2]
  // (height, width in pixels) and aspect_ratio [B, 1] with additional conditions.
  // Returns [B, out_channels, H, W].
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& timestep, const at::Tensor& encoder_attention_mask = {},
                     const at::Tensor& resolution = {}, const at::Tensor& aspect_ratio = {});

  const PixArtTransformerConfig& config() const { return config_; }

  PixArtPatchEmbed pos_embed{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  nn::LayerNorm norm_out{nullptr};
  at::Tensor scale_shift_table;  // [2, D]
  nn::Linear proj_out{nullptr};
  AdaLayerNormSingle adaln_single{nullptr};
  nn::TextProjection caption_projection{nullptr};

 private:
  PixArtTransformerConfig config_;
};
TORCH_MODULE(PixArtTransformer2DModel);

}  // namespace yeto::pixart
