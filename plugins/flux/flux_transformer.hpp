// FluxTransformer2DModel (FLUX.1 dev / schnell) in LibTorch, built from the SDK's nn blocks.
//
// Parameter names are exactly the Diffusers state-dict names (x_embedder, time_text_embed.*,
// context_embedder, transformer_blocks.N.*, single_transformer_blocks.N.*, norm_out.linear,
// proj_out), so a Diffusers checkpoint loads by name, and every Linear is LoRA-capable with
// PEFT names (`...attn.to_q.lora_A.default.weight`).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/attention.hpp"
#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/feed_forward.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::flux {

struct FluxTransformerConfig {
  std::int64_t patch_size = 1;
  std::int64_t in_channels = 64;
  std::int64_t out_channels = 0;  // 0 (config null): in_channels
  std::int64_t num_layers = 19;
  std::int64_t num_single_layers = 38;
  std::int64_t attention_head_dim = 128;
  std::int64_t num_attention_heads = 24;
  std::int64_t joint_attention_dim = 4096;
  std::int64_t pooled_projection_dim = 768;
  bool guidance_embeds = false;
  std::vector<std::int64_t> axes_dims_rope = {16, 56, 56};

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  std::int64_t output_channels() const { return out_channels > 0 ? out_channels : in_channels; }

  // Reads a Diffusers config.json object. Throws std::invalid_argument naming the key for a
  // wrong type or an inconsistent shape (axes_dims_rope must sum to attention_head_dim).
  static FluxTransformerConfig from_json(const nlohmann::json& j);
};

// Double-stream (MM-DiT) block: image and text tokens keep their own weights and attend jointly.
class FluxTransformerBlockImpl : public torch::nn::Module {
 public:
  FluxTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim);
  // Returns (encoder_hidden_states, hidden_states) as Diffusers does.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                            const at::Tensor& temb, const nn::RopeTables& rope);
  nn::AdaLayerNormZero norm1{nullptr}, norm1_context{nullptr};
  nn::Attention attn{nullptr};
  nn::LayerNorm norm2{nullptr}, norm2_context{nullptr};
  nn::FeedForward ff{nullptr}, ff_context{nullptr};
};
TORCH_MODULE(FluxTransformerBlock);

// Single-stream block over the concatenated [text, image] sequence: parallel attention and MLP.
class FluxSingleTransformerBlockImpl : public torch::nn::Module {
 public:
  FluxSingleTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, double mlp_ratio = 4.0);
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& temb, const nn::RopeTables& rope);
  nn::AdaLayerNormZeroSingle norm{nullptr};
  nn::Linear proj_mlp{nullptr}, proj_out{nullptr};
  nn::Attention attn{nullptr};
};
TORCH_MODULE(FluxSingleTransformerBlock);

// Its blocks recompute in backward as activation_checkpointing says (double-stream blocks
// numbered first, then the single-stream ones).
class FluxTransformer2DModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit FluxTransformer2DModelImpl(const FluxTransformerConfig& config);

  // hidden_states [B, N, in_channels] (packed latents), encoder_hidden_states [B, T, joint_dim],
  // pooled_projections [B, pooled_dim], timestep [B] (sigma in [0, 1]; scaled by 1000 here),
  // img_ids [N, 3], txt_ids [T, 3] (a leading batch dimension is accepted and dropped, as
  // Diffusers does), guidance [B] for guidance-distilled checkpoints (also scaled by 1000).
  // Returns [B, N, patch^2 * out_channels].
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& pooled_projections, const at::Tensor& timestep, const at::Tensor& img_ids,
                     const at::Tensor& txt_ids, const at::Tensor& guidance = {});

  const FluxTransformerConfig& config() const { return config_; }

  nn::Linear x_embedder{nullptr}, context_embedder{nullptr}, proj_out{nullptr};
  nn::CombinedTimestepEmbeddings time_text_embed{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr}, single_transformer_blocks{nullptr};
  nn::AdaLayerNormContinuous norm_out{nullptr};

 private:
  FluxTransformerConfig config_;
};
TORCH_MODULE(FluxTransformer2DModel);

}  // namespace yeto::flux
