#include "models/t5_encoder.hpp"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "models/config_json.hpp"
#include "yeto/nn/attention.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::models {

T5Config T5Config::from_json(const nlohmann::json& j, bool umt5, const std::string& where) {
  T5Config c;
  c.vocab_size = cfg::get_int(j, "vocab_size", c.vocab_size, where);
  c.d_model = cfg::get_int(j, "d_model", c.d_model, where);
  c.d_kv = cfg::get_int(j, "d_kv", c.d_kv, where);
  c.d_ff = cfg::get_int(j, "d_ff", c.d_ff, where);
  c.num_layers = cfg::get_int(j, "num_layers", c.num_layers, where);
  c.num_heads = cfg::get_int(j, "num_heads", c.num_heads, where);
  c.relative_attention_num_buckets =
      cfg::get_int(j, "relative_attention_num_buckets", c.relative_attention_num_buckets, where);
  c.relative_attention_max_distance =
      cfg::get_int(j, "relative_attention_max_distance", c.relative_attention_max_distance, where);
  c.layer_norm_epsilon = cfg::get_double(j, "layer_norm_epsilon", c.layer_norm_epsilon, where);
  // transformers derives the feed-forward from feed_forward_proj: "[gated-]<act>", with
  // "gated-gelu" meaning gelu_new.
  const auto proj = cfg::get_string(j, "feed_forward_proj", "relu", where);
  const auto dash = proj.find('-');
  const bool gated = dash != std::string::npos && proj.substr(0, dash) == "gated";
  if (dash != std::string::npos && !gated) {
    cfg::bad(where, "feed_forward_proj", "'" + proj + "' is not '<act>' or 'gated-<act>'");
  }
  std::string act = gated ? proj.substr(dash + 1) : proj;
  if (proj == "gated-gelu") act = "gelu_new";
  c.is_gated_act = gated;
  c.dense_act_fn = act;
  c.per_layer_position_bias = umt5;
  try {
    (void)nn::parse_activation(c.dense_act_fn);
  } catch (const std::invalid_argument& e) {
    cfg::bad(where, "feed_forward_proj", e.what());
  }
  if (c.num_layers <= 0 || c.num_heads <= 0 || c.d_kv <= 0) {
    cfg::bad(where, "num_layers", "num_layers, num_heads and d_kv must be positive");
  }
  if (c.relative_attention_num_buckets < 4) {
    cfg::bad(where, "relative_attention_num_buckets", "must be at least 4");
  }
  return c;
}

at::Tensor t5_relative_position_bucket(std::int64_t query_length, std::int64_t key_length, std::int64_t num_buckets,
                                       std::int64_t max_distance, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto context = at::arange(query_length, opts).unsqueeze(1);
  auto memory = at::arange(key_length, opts).unsqueeze(0);
  auto rel = memory - context;  // [Lq, Lk]
  const auto half = num_buckets / 2;
  auto buckets = (rel > 0).to(at::kLong) * half;
  rel = rel.abs();
  const auto max_exact = half / 2;
  auto is_small = rel < max_exact;
  auto large = at::log(rel.to(at::kFloat) / static_cast<double>(max_exact)) /
               std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
               static_cast<double>(half - max_exact);
  auto rel_large = large.to(at::kLong) + max_exact;
  rel_large = at::minimum(rel_large, at::full_like(rel_large, half - 1));
  return buckets + at::where(is_small, rel, rel_large);
}

T5LayerNormImpl::T5LayerNormImpl(std::int64_t dim, double e) : eps(e) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor T5LayerNormImpl::forward(const at::Tensor& x) { return nn::rms_norm(x, weight, eps); }

T5AttentionImpl::T5AttentionImpl(const T5Config& c, bool has_bias) : config(c) {
  const auto inner = c.num_heads * c.d_kv;
  q = register_module("q", nn::Linear(c.d_model, inner, false));
  k = register_module("k", nn::Linear(c.d_model, inner, false));
  v = register_module("v", nn::Linear(c.d_model, inner, false));
  o = register_module("o", nn::Linear(inner, c.d_model, false));
  if (has_bias) {
    relative_attention_bias = register_module(
        "relative_attention_bias", torch::nn::Embedding(c.relative_attention_num_buckets, c.num_heads));
  }
}

at::Tensor T5AttentionImpl::compute_bias(std::int64_t query_length, std::int64_t key_length) const {
  const auto& table = relative_attention_bias->weight;
  auto buckets = t5_relative_position_bucket(query_length, key_length, config.relative_attention_num_buckets,
                                             config.relative_attention_max_distance, table.device());
  auto values = at::embedding(table, buckets);  // [Lq, Lk, H]
  return values.permute({2, 0, 1}).unsqueeze(0);
}

at::Tensor T5AttentionImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  auto qh = nn::split_heads(q(x), config.num_heads);
  auto kh = nn::split_heads(k(x), config.num_heads);
  auto vh = nn::split_heads(v(x), config.num_heads);
  // T5 does not scale the scores (the 1/sqrt(d) is folded into its initialisation).
  auto out = nn::attention(qh, kh, vh, bias.to(qh.scalar_type()), false, 1.0);
  return o(nn::merge_heads(out));
}

T5LayerSelfAttentionImpl::T5LayerSelfAttentionImpl(const T5Config& c, bool has_bias) {
  SelfAttention = register_module("SelfAttention", T5Attention(c, has_bias));
  layer_norm = register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

at::Tensor T5LayerSelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  return x + SelfAttention(layer_norm(x), bias);
}

T5DenseImpl::T5DenseImpl(const T5Config& c) : act(nn::parse_activation(c.dense_act_fn)) {
  if (c.is_gated_act) {
    wi_0 = register_module("wi_0", nn::Linear(c.d_model, c.d_ff, false));
    wi_1 = register_module("wi_1", nn::Linear(c.d_model, c.d_ff, false));
  } else {
    wi = register_module("wi", nn::Linear(c.d_model, c.d_ff, false));
  }
  wo = register_module("wo", nn::Linear(c.d_ff, c.d_model, false));
}

at::Tensor T5DenseImpl::forward(const at::Tensor& x) {
  at::Tensor h;
  if (wi_0) {
    h = nn::apply_activation(act, wi_0(x)) * wi_1(x);
  } else {
    h = nn::apply_activation(act, wi(x));
  }
  const auto wd = wo->weight.scalar_type();
  if (h.scalar_type() != wd) h = h.to(wd);
  return wo(h);
}

T5LayerFFImpl::T5LayerFFImpl(const T5Config& c) {
  DenseReluDense = register_module("DenseReluDense", T5Dense(c));
  layer_norm = register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

at::Tensor T5LayerFFImpl::forward(const at::Tensor& x) { return x + DenseReluDense(layer_norm(x)); }

namespace {

// transformers clamps fp16 activations of T5 blocks to keep them finite.
at::Tensor clamp_fp16(const at::Tensor& h) {
  if (h.scalar_type() != at::kHalf) return h;
  const double fmax = 65504.0;
  const double limit = h.isinf().any().item<bool>() ? fmax - 1000.0 : fmax;
  return at::clamp(h, -limit, limit);
}

}  // namespace

T5BlockImpl::T5BlockImpl(const T5Config& c, bool has_bias) {
  layer = register_module("layer", torch::nn::ModuleList());
  layer->push_back(T5LayerSelfAttention(c, has_bias));
  layer->push_back(T5LayerFF(c));
}

T5LayerSelfAttentionImpl& T5BlockImpl::self_attention() { return *layer->ptr<T5LayerSelfAttentionImpl>(0); }

at::Tensor T5BlockImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  auto h = clamp_fp16(self_attention().forward(x, bias));
  return clamp_fp16(layer->ptr<T5LayerFFImpl>(1)->forward(h));
}

T5StackImpl::T5StackImpl(const T5Config& c) {
  block = register_module("block", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    block->push_back(T5Block(c, i == 0 || c.per_layer_position_bias));
  }
  final_layer_norm = register_module("final_layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

T5EncoderModelImpl::T5EncoderModelImpl(const T5Config& c) : config_(c) {
  shared = register_module("shared", torch::nn::Embedding(c.vocab_size, c.d_model));
  encoder = register_module("encoder", T5Stack(c));
}

T5EncoderOutput T5EncoderModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                            bool output_hidden_states) {
  if (input_ids.dim() != 2) {
    throw Error("T5 encoder: input_ids must be [batch, length]", ExitCode::bad_input);
  }
  const auto b = input_ids.size(0);
  const auto len = input_ids.size(1);
  auto h = shared(input_ids);
  at::Tensor mask;  // additive [B, 1, 1, L]
  if (attention_mask.defined()) {
    double lowest = std::numeric_limits<float>::lowest();
    if (h.scalar_type() == at::kHalf) lowest = -65504.0;
    if (h.scalar_type() == at::kBFloat16) lowest = -3.3895313892515355e38;
    mask = (1.0 - attention_mask.to(h.scalar_type()).view({b, 1, 1, len})) * lowest;
  }
  T5EncoderOutput out;
  at::Tensor bias;
  std::int64_t i = 0;
  for (const auto& m : *encoder->block) {
    auto& blk = *m->as<T5BlockImpl>();
    auto& attn = *blk.self_attention().SelfAttention;
    if (i == 0 || config_.per_layer_position_bias) {
      auto pb = attn.compute_bias(len, len).to(h.scalar_type());
      out.position_bias.push_back(pb);
      bias = mask.defined() ? pb + mask : pb;
    }
    if (output_hidden_states) out.hidden_states.push_back(h);
    h = blk.forward(h, bias);
    ++i;
  }
  out.last_hidden_state = encoder->final_layer_norm(h);
  if (output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
  return out;
}

std::string T5EncoderModelImpl::rename(const std::string& name) {
  return name == "encoder.embed_tokens.weight" ? "shared.weight" : name;
}

std::vector<std::string> T5EncoderModelImpl::ignored_checkpoint_names() const {
  // Decoder halves of full T5 checkpoints and the LM head are not part of the encoder.
  return {"decoder.*", "lm_head.weight"};
}

}  // namespace yeto::models
