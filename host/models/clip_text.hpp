// transformers' CLIPTextModel and CLIPTextModelWithProjection: token + position embeddings,
// pre-LN causal transformer (quick_gelu or gelu), final layer norm, pooling at the end token,
// optional text projection. Parameter names are transformers' (`text_model.encoder.layers.0.
// self_attn.q_proj.weight`, `text_projection.weight`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/activations.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::models {

struct CLIPTextConfig {
  std::int64_t vocab_size = 49408;
  std::int64_t hidden_size = 512;
  std::int64_t intermediate_size = 2048;
  std::int64_t projection_dim = 512;
  std::int64_t num_hidden_layers = 12;
  std::int64_t num_attention_heads = 8;
  std::int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";
  double layer_norm_eps = 1e-5;
  std::int64_t eos_token_id = 2;

  // Reads a transformers config.json (CLIPTextConfig keys, or a CLIPConfig with `text_config`).
  static CLIPTextConfig from_json(const nlohmann::json& j, const std::string& where = "config.json");
};

struct CLIPTextOutput {
  at::Tensor last_hidden_state;           // final_layer_norm(last layer output) [B, L, D]
  at::Tensor pooler_output;               // last_hidden_state at the end token [B, D]
  at::Tensor text_embeds;                 // text_projection(pooler_output) [B, P] (with projection)
  std::vector<at::Tensor> hidden_states;  // embeddings, then each layer's output (no final norm)
  // hidden_states[-2]: what SDXL / SD3 take ("penultimate"); needs output_hidden_states.
  at::Tensor penultimate() const { return hidden_states.at(hidden_states.size() - 2); }
};

class CLIPAttentionImpl : public torch::nn::Module {
 public:
  CLIPAttentionImpl(std::int64_t hidden, std::int64_t heads);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask);
  nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
  std::int64_t heads;
};
TORCH_MODULE(CLIPAttention);

class CLIPMLPImpl : public torch::nn::Module {
 public:
  CLIPMLPImpl(std::int64_t hidden, std::int64_t intermediate, nn::Activation act);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::Activation act;
};
TORCH_MODULE(CLIPMLP);

class CLIPEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit CLIPEncoderLayerImpl(const CLIPTextConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask);
  CLIPAttention self_attn{nullptr};
  nn::LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
  CLIPMLP mlp{nullptr};
};
TORCH_MODULE(CLIPEncoderLayer);

class CLIPTextEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit CLIPTextEmbeddingsImpl(const CLIPTextConfig& c);
  at::Tensor forward(const at::Tensor& input_ids);
  torch::nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};
};
TORCH_MODULE(CLIPTextEmbeddings);

class CLIPEncoderImpl : public torch::nn::Module {
 public:
  explicit CLIPEncoderImpl(const CLIPTextConfig& c);
  torch::nn::ModuleList layers{nullptr};
};
TORCH_MODULE(CLIPEncoder);

// `text_model`: embeddings, encoder.layers, final_layer_norm.
class CLIPTextTransformerImpl : public torch::nn::Module {
 public:
  explicit CLIPTextTransformerImpl(const CLIPTextConfig& c);
  // attention_mask [B, L] (1 = keep) is optional; the causal mask always applies.
  CLIPTextOutput forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                         bool output_hidden_states = false);
  CLIPTextEmbeddings embeddings{nullptr};
  CLIPEncoder encoder{nullptr};
  nn::LayerNorm final_layer_norm{nullptr};
  CLIPTextConfig config;
};
TORCH_MODULE(CLIPTextTransformer);

// transformers' CLIPTextModel (with_projection = false) and CLIPTextModelWithProjection
// (text_projection, bias-free, hidden -> projection_dim).
class CLIPTextModelImpl : public torch::nn::Module {
 public:
  CLIPTextModelImpl(const CLIPTextConfig& config, bool with_projection);
  CLIPTextOutput forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                         bool output_hidden_states = false);
  bool with_projection() const { return static_cast<bool>(text_projection); }
  // Checkpoint names to ignore when loading (buffers and, for the plain model, the projection).
  std::vector<std::string> ignored_checkpoint_names() const;
  CLIPTextTransformer text_model{nullptr};
  nn::Linear text_projection{nullptr};
};
TORCH_MODULE(CLIPTextModel);

// Position of the pooled token per row: argmax(input_ids) when eos_token_id == 2 (transformers'
// legacy rule for configs predating the real eos id), otherwise the first eos_token_id (position
// 0 when a row has none, as transformers' argmax over the match mask gives).
at::Tensor clip_pooling_index(const at::Tensor& input_ids, std::int64_t eos_token_id);

}  // namespace yeto::models
