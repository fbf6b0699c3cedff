// TemplateTransformer2DModel: a small but complete diffusion transformer, built from the SDK's
// nn blocks (yeto/nn/*.hpp) with Diffusers-style parameter names, so its checkpoints are plain
// safetensors files that any tool reads.
//
//   latents [B, C, H, W] --patchify (p x p)--> x_embedder --+
//   text [B, L, joint_attention_dim] --context_embedder-----+--> [text; image] tokens
//   timestep [B] (0..1000) + pooled text --time_text_embed--> temb
//   num_layers x TemplateBlock over the joint sequence (adaLN-zero modulation from temb,
//     self-attention with RMS q/k norm and 2-D rotary positions on the image tokens, FeedForward)
//   image tokens --norm_out (adaLN continuous)--> proj_out --unpatchify--> [B, C_out, H, W]
//
// Replace this file with your family's network; keep the parameter names of the checkpoints
// your users have.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <nlohmann/json.hpp>

#include <yeto/nn/attention.hpp>
#include <yeto/nn/checkpoint.hpp>
#include <yeto/nn/embeddings.hpp>
#include <yeto/nn/feed_forward.hpp>
#include <yeto/nn/linear.hpp>
#include <yeto/nn/norms.hpp>

namespace yeto_template {

// transformer/config.json. from_json throws std::invalid_argument naming the key.
struct TransformerConfig {
  std::int64_t in_channels = 4;
  std::int64_t out_channels = 0;  // 0 / null: in_channels
  std::int64_t patch_size = 2;
  std::int64_t num_layers = 2;
  std::int64_t num_attention_heads = 2;
  std::int64_t attention_head_dim = 16;
  std::int64_t joint_attention_dim = 32;
  std::int64_t pooled_projection_dim = 32;
  std::vector<std::int64_t> axes_dims_rope = {8, 8};  // (row, column); sums to attention_head_dim
  std::int64_t sample_size = 16;                       // latent size the model was trained at

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  std::int64_t output_channels() const { return out_channels > 0 ? out_channels : in_channels; }
  static TransformerConfig from_json(const nlohmann::json& j);
};

// One block over the joint [text; image] sequence.
class TemplateBlockImpl : public torch::nn::Module {
 public:
  TemplateBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim);
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& temb, const yeto::nn::RopeTables& rope);
  yeto::nn::AdaLayerNormZero norm1{nullptr};
  yeto::nn::Attention attn{nullptr};
  yeto::nn::LayerNorm norm2{nullptr};
  yeto::nn::FeedForward ff{nullptr};
};
TORCH_MODULE(TemplateBlock);

// Its blocks go through run_block, so train.activation_checkpointing recomputes them in backward
// (the family kit sets activation_checkpointing at prepare).
class TemplateTransformer2DModelImpl : public torch::nn::Module, public yeto::nn::CheckpointedBlocks {
 public:
  explicit TemplateTransformer2DModelImpl(const TransformerConfig& config);
  // hidden_states [B, C, H, W] (H, W multiples of patch_size), encoder_hidden_states [B, L, joint],
  // pooled_projections [B, pooled], timestep [B] on the 0..1000 scale -> [B, C_out, H, W]. Inputs
  // are converted to the model's device and dtype; the output is in the model's dtype. Throws
  // std::invalid_argument naming the input for a wrong shape.
  at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& pooled_projections, const at::Tensor& timestep);
  const TransformerConfig& config() const { return config_; }

  yeto::nn::Linear x_embedder{nullptr};
  yeto::nn::Linear context_embedder{nullptr};
  yeto::nn::CombinedTimestepEmbeddings time_text_embed{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  yeto::nn::AdaLayerNormContinuous norm_out{nullptr};
  yeto::nn::Linear proj_out{nullptr};

 private:
  TransformerConfig config_;
};
TORCH_MODULE(TemplateTransformer2DModel);

}  // namespace yeto_template
