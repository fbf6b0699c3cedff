// transformers' T5EncoderModel and UMT5EncoderModel.
//
// T5: RMS layer norm (no bias, no mean subtraction, variance in float32), unscaled attention with
// a bucketed relative position bias that block 0 computes and every block reuses, feed-forward
// `relu` (wi -> relu -> wo) or gated (`gated-gelu`: wo(gelu_new(wi_0 x) * wi_1 x)), final layer
// norm. UMT5: the same, but every block has its own relative_attention_bias and adds its own bias.
// Names: `shared.weight` (the token embedding; `encoder.embed_tokens.weight` is the same tied
// tensor and is accepted in its place), `encoder.block.{i}.layer.0.SelfAttention.{q,k,v,o}.weight`,
// `...layer.0.layer_norm.weight`, `...layer.1.DenseReluDense.{wi|wi_0,wi_1,wo}.weight`,
// `...layer.1.layer_norm.weight`, `encoder.final_layer_norm.weight`.
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

namespace yeto::models {

struct T5Config {
  std::int64_t vocab_size = 32128;
  std::int64_t d_model = 512;
  std::int64_t d_kv = 64;
  std::int64_t d_ff = 2048;
  std::int64_t num_layers = 6;
  std::int64_t num_heads = 8;
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  bool is_gated_act = false;
  std::string dense_act_fn = "relu";
  bool per_layer_position_bias = false;  // UMT5

  // Reads a transformers config.json: feed_forward_proj "relu" / "gated-gelu" / "gated-<act>"
  // decides the feed-forward (gated-gelu means gelu_new, as transformers maps it).
  static T5Config from_json(const nlohmann::json& j, bool umt5, const std::string& where = "config.json");
};

// The bidirectional bucket of each (query, key) pair, [Lq, Lk] int64, as transformers'
// T5Attention._relative_position_bucket (relative position = key - query).
at::Tensor t5_relative_position_bucket(std::int64_t query_length, std::int64_t key_length, std::int64_t num_buckets,
                                       std::int64_t max_distance, const at::Device& device);

class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(std::int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(T5LayerNorm);

class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(const T5Config& c, bool has_relative_attention_bias);
  // [1, heads, Lq, Lk] position bias from this layer's relative_attention_bias.
  at::Tensor compute_bias(std::int64_t query_length, std::int64_t key_length) const;
  // bias: position bias plus the additive padding mask, [B or 1, heads, L, L].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};
  T5Config config;
};
TORCH_MODULE(T5Attention);

class T5LayerSelfAttentionImpl : public torch::nn::Module {
 public:
  T5LayerSelfAttentionImpl(const T5Config& c, bool has_relative_attention_bias);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  T5Attention SelfAttention{nullptr};
  T5LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerSelfAttention);

// DenseReluDense: `wi`/`wo` (T5DenseActDense) or `wi_0`/`wi_1`/`wo` (T5DenseGatedActDense).
class T5DenseImpl : public torch::nn::Module {
 public:
  explicit T5DenseImpl(const T5Config& c);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear wi{nullptr}, wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};
  nn::Activation act;
};
TORCH_MODULE(T5Dense);

class T5LayerFFImpl : public torch::nn::Module {
 public:
  explicit T5LayerFFImpl(const T5Config& c);
  at::Tensor forward(const at::Tensor& x);
  T5Dense DenseReluDense{nullptr};
  T5LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerFF);

class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const T5Config& c, bool has_relative_attention_bias);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  torch::nn::ModuleList layer{nullptr};  // 0: T5LayerSelfAttention, 1: T5LayerFF
  T5LayerSelfAttentionImpl& self_attention();
};
TORCH_MODULE(T5Block);

struct T5EncoderOutput {
  at::Tensor last_hidden_state;           // final_layer_norm(last block output)
  std::vector<at::Tensor> hidden_states;  // embeddings, block outputs..., last_hidden_state
  std::vector<at::Tensor> position_bias;  // per block that computed one, before the mask [1, H, L, L]
};

class T5StackImpl : public torch::nn::Module {
 public:
  explicit T5StackImpl(const T5Config& c);
  torch::nn::ModuleList block{nullptr};
  T5LayerNorm final_layer_norm{nullptr};
};
TORCH_MODULE(T5Stack);

// T5EncoderModel (per_layer_position_bias = false) and UMT5EncoderModel (true).
class T5EncoderModelImpl : public torch::nn::Module {
 public:
  explicit T5EncoderModelImpl(const T5Config& config);
  // attention_mask [B, L] (1 = keep) optional: without it padding tokens are attended to, as the
  // SD3 and Flux pipelines call their T5.
  T5EncoderOutput forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                          bool output_hidden_states = false);
  // Checkpoint name -> module name (`encoder.embed_tokens.weight` -> `shared.weight`).
  static std::string rename(const std::string& name);
  std::vector<std::string> ignored_checkpoint_names() const;
  const T5Config& config() const { return config_; }
  torch::nn::Embedding shared{nullptr};
  T5Stack encoder{nullptr};

 private:
  T5Config config_;
};
TORCH_MODULE(T5EncoderModel);

}  // namespace yeto::models
