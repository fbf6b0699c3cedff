#include "models/clip_text.hpp"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "models/config_json.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::models {

CLIPTextConfig CLIPTextConfig::from_json(const nlohmann::json& root, const std::string& where) {
  // A full CLIPConfig nests the text tower's settings under text_config.
  const bool nested = root.contains("text_config") && root.at("text_config").is_object() &&
                      !root.contains("hidden_size");
  const auto& j = nested ? root.at("text_config") : root;
  CLIPTextConfig c;
  c.vocab_size = cfg::get_int(j, "vocab_size", c.vocab_size, where);
  c.hidden_size = cfg::get_int(j, "hidden_size", c.hidden_size, where);
  c.intermediate_size = cfg::get_int(j, "intermediate_size", c.intermediate_size, where);
  c.projection_dim = cfg::get_int(j, "projection_dim", cfg::get_int(root, "projection_dim", c.projection_dim, where),
                                  where);
  c.num_hidden_layers = cfg::get_int(j, "num_hidden_layers", c.num_hidden_layers, where);
  c.num_attention_heads = cfg::get_int(j, "num_attention_heads", c.num_attention_heads, where);
  c.max_position_embeddings = cfg::get_int(j, "max_position_embeddings", c.max_position_embeddings, where);
  c.hidden_act = cfg::get_string(j, "hidden_act", c.hidden_act, where);
  c.layer_norm_eps = cfg::get_double(j, "layer_norm_eps", c.layer_norm_eps, where);
  c.eos_token_id = cfg::get_int(j, "eos_token_id", c.eos_token_id, where);
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
    cfg::bad(where, "num_attention_heads", "must divide hidden_size (" + std::to_string(c.hidden_size) + ")");
  }
  if (c.num_hidden_layers <= 0) cfg::bad(where, "num_hidden_layers", "must be positive");
  try {
    (void)nn::parse_activation(c.hidden_act);
  } catch (const std::invalid_argument& e) {
    cfg::bad(where, "hidden_act", e.what());
  }
  return c;
}

CLIPAttentionImpl::CLIPAttentionImpl(std::int64_t hidden, std::int64_t h) : heads(h) {
  q_proj = register_module("q_proj", nn::Linear(hidden, hidden, true));
  k_proj = register_module("k_proj", nn::Linear(hidden, hidden, true));
  v_proj = register_module("v_proj", nn::Linear(hidden, hidden, true));
  out_proj = register_module("out_proj", nn::Linear(hidden, hidden, true));
}

at::Tensor CLIPAttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  auto q = nn::split_heads(q_proj(x), heads);
  auto k = nn::split_heads(k_proj(x), heads);
  auto v = nn::split_heads(v_proj(x), heads);
  return out_proj(nn::merge_heads(nn::attention(q, k, v, mask)));
}

CLIPMLPImpl::CLIPMLPImpl(std::int64_t hidden, std::int64_t intermediate, nn::Activation a) : act(a) {
  fc1 = register_module("fc1", nn::Linear(hidden, intermediate, true));
  fc2 = register_module("fc2", nn::Linear(intermediate, hidden, true));
}

at::Tensor CLIPMLPImpl::forward(const at::Tensor& x) { return fc2(nn::apply_activation(act, fc1(x))); }

CLIPEncoderLayerImpl::CLIPEncoderLayerImpl(const CLIPTextConfig& c) {
  self_attn = register_module("self_attn", CLIPAttention(c.hidden_size, c.num_attention_heads));
  layer_norm1 = register_module("layer_norm1", nn::LayerNorm(c.hidden_size, c.layer_norm_eps));
  mlp = register_module("mlp", CLIPMLP(c.hidden_size, c.intermediate_size, nn::parse_activation(c.hidden_act)));
  layer_norm2 = register_module("layer_norm2", nn::LayerNorm(c.hidden_size, c.layer_norm_eps));
}

at::Tensor CLIPEncoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  auto h = x + self_attn(layer_norm1(x), mask);
  return h + mlp(layer_norm2(h));
}

CLIPTextEmbeddingsImpl::CLIPTextEmbeddingsImpl(const CLIPTextConfig& c) {
  token_embedding = register_module("token_embedding", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  position_embedding =
      register_module("position_embedding", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
}

at::Tensor CLIPTextEmbeddingsImpl::forward(const at::Tensor& input_ids) {
  const auto len = input_ids.size(1);
  if (len > position_embedding->weight.size(0)) {
    throw Error("CLIP text encoder: sequence of " + std::to_string(len) + " tokens is longer than " +
                    "max_position_embeddings (" + std::to_string(position_embedding->weight.size(0)) +
                    "); truncate the prompt in the tokenizer",
                ExitCode::bad_input);
  }
  auto pos = at::arange(len, input_ids.options().dtype(at::kLong));
  return token_embedding(input_ids) + position_embedding(pos).unsqueeze(0);
}

CLIPEncoderImpl::CLIPEncoderImpl(const CLIPTextConfig& c) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(CLIPEncoderLayer(c));
}

CLIPTextTransformerImpl::CLIPTextTransformerImpl(const CLIPTextConfig& c) : config(c) {
  embeddings = register_module("embeddings", CLIPTextEmbeddings(c));
  encoder = register_module("encoder", CLIPEncoder(c));
  final_layer_norm = register_module("final_layer_norm", nn::LayerNorm(c.hidden_size, c.layer_norm_eps));
}

at::Tensor clip_pooling_index(const at::Tensor& input_ids, std::int64_t eos_token_id) {
  if (eos_token_id == 2) {
    return input_ids.to(at::kInt).argmax(-1);
  }
  return (input_ids == eos_token_id).to(at::kInt).argmax(-1);
}

CLIPTextOutput CLIPTextTransformerImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                                bool output_hidden_states) {
  if (input_ids.dim() != 2) {
    throw Error("CLIP text encoder: input_ids must be [batch, length]", ExitCode::bad_input);
  }
  const auto len = input_ids.size(1);
  auto h = embeddings(input_ids);
  // Keep-mask: causal, and the padding mask over keys when given.
  auto keep = at::ones({len, len}, input_ids.options().dtype(at::kBool)).tril().view({1, 1, len, len});
  if (attention_mask.defined()) {
    keep = keep.logical_and(attention_mask.to(at::kBool).view({input_ids.size(0), 1, 1, len}));
  }
  CLIPTextOutput out;
  if (output_hidden_states) out.hidden_states.push_back(h);
  for (const auto& layer : *encoder->layers) {
    h = layer->as<CLIPEncoderLayerImpl>()->forward(h, keep);
    if (output_hidden_states) out.hidden_states.push_back(h);
  }
  out.last_hidden_state = final_layer_norm(h);
  auto idx = clip_pooling_index(input_ids, config.eos_token_id).to(at::kLong);
  auto rows = at::arange(input_ids.size(0), idx.options());
  out.pooler_output = out.last_hidden_state.index({rows, idx});
  return out;
}

CLIPTextModelImpl::CLIPTextModelImpl(const CLIPTextConfig& config, bool with_projection) {
  text_model = register_module("text_model", CLIPTextTransformer(config));
  if (with_projection) {
    text_projection = register_module("text_projection", nn::Linear(config.hidden_size, config.projection_dim, false));
  }
}

CLIPTextOutput CLIPTextModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                          bool output_hidden_states) {
  auto out = text_model(input_ids, attention_mask, output_hidden_states);
  if (text_projection) out.text_embeds = text_projection(out.pooler_output);
  return out;
}

std::vector<std::string> CLIPTextModelImpl::ignored_checkpoint_names() const {
  std::vector<std::string> names{"text_model.embeddings.position_ids"};
  if (!text_projection) names.push_back("text_projection.weight");
  return names;
}

}  // namespace yeto::models
