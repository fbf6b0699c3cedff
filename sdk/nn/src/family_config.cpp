#include "yeto/nn/family_config.hpp"

#include <stdexcept>

namespace yeto::family {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json t5_like_config(const T5Shape& s) {
  return {{"architectures", {"T5EncoderModel"}},
          {"classifier_dropout", 0.0},
          {"d_ff", s.d_ff},
          {"d_kv", s.d_kv},
          {"d_model", s.d_model},
          {"decoder_start_token_id", 0},
          {"dense_act_fn", "gelu_new"},
          {"dropout_rate", 0.1},
          {"eos_token_id", 1},
          {"feed_forward_proj", "gated-gelu"},
          {"initializer_factor", 1.0},
          {"is_encoder_decoder", true},
          {"is_gated_act", true},
          {"layer_norm_epsilon", 1e-06},
          {"model_type", "t5"},
          {"num_decoder_layers", s.layers},
          {"num_heads", s.heads},
          {"num_layers", s.layers},
          {"pad_token_id", 0},
          {"relative_attention_max_distance", 128},
          {"relative_attention_num_buckets", 32},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float32"},
          {"vocab_size", 640}};
}

}  // namespace

LoraTargets resolve_lora_targets(const json& targets, const LoraTargetSets& sets) {
  LoraTargets out;
  std::vector<std::string> items;
  if (targets.is_null()) {
    items = {"auto"};
  } else if (targets.is_string()) {
    items = {targets.get<std::string>()};
  } else if (targets.is_array()) {
    for (const auto& t : targets) {
      if (!t.is_string()) bad("lora.targets: every entry must be a string, got " + t.dump());
      items.push_back(t.get<std::string>());
    }
  } else {
    bad("lora.targets: expected auto, attention, all-linear or a list of module patterns, got " + targets.dump());
  }
  if (items.empty()) bad("lora.targets: the list is empty; use auto, attention, all-linear or module patterns");
  if (items.size() == 1 && items[0] == "auto") {
    out.patterns = sets.auto_patterns;
  } else if (items.size() == 1 && items[0] == "attention") {
    out.patterns = sets.attention_patterns;
  } else if (items.size() == 1 && items[0] == "all-linear") {
    out.all_linear = true;
  } else {
    for (const auto& i : items)
      if (i == "auto" || i == "attention" || i == "all-linear")
        bad("lora.targets: '" + i + "' cannot be combined with other entries");
    out.patterns = items;
  }
  return out;
}

std::string resolve_precision(const std::string& precision, const std::string& device, const std::string& key) {
  if (precision == "fp32" || precision == "bf16" || precision == "fp16") return precision;
  if (precision.empty() || precision == "auto") return device.rfind("cuda", 0) == 0 ? "bf16" : "fp32";
  bad(key + ": expected auto, fp32, bf16 or fp16, got '" + precision + "'");
}

json clip_text_config(const ClipTextShape& s) {
  return {{"architectures", json::array({s.architecture})},
          {"attention_dropout", 0.0},
          {"bos_token_id", 0},
          {"dropout", 0.0},
          {"eos_token_id", 2},
          {"hidden_act", s.hidden_act},
          {"hidden_size", s.hidden},
          {"initializer_factor", 1.0},
          {"initializer_range", 0.02},
          {"intermediate_size", s.intermediate},
          {"layer_norm_eps", 1e-05},
          {"max_position_embeddings", 77},
          {"model_type", "clip_text_model"},
          {"num_attention_heads", s.heads},
          {"num_hidden_layers", s.layers},
          {"pad_token_id", 1},
          {"projection_dim", s.hidden},
          {"torch_dtype", "float32"},
          {"vocab_size", 49408}};
}

json t5_encoder_config(const T5Shape& shape) { return t5_like_config(shape); }

json umt5_encoder_config(const T5Shape& shape) {
  auto c = t5_like_config(shape);
  c["architectures"] = json::array({"UMT5EncoderModel"});
  c["model_type"] = "umt5";
  c["scalable_attention"] = true;
  c["tokenizer_class"] = "T5Tokenizer";
  return c;
}

json clip_tokenizer_config(const std::string& pad_token) {
  return {{"tokenizer_class", "CLIPTokenizer"}, {"model_max_length", 77},     {"bos_token", "<|startoftext|>"},
          {"eos_token", "<|endoftext|>"},       {"pad_token", pad_token},   {"unk_token", "<|endoftext|>"},
          {"do_lower_case", true}};
}

json t5_tokenizer_config(int model_max_length) {
  return {{"tokenizer_class", "T5Tokenizer"}, {"model_max_length", model_max_length}, {"eos_token", "</s>"},
          {"pad_token", "<pad>"},           {"unk_token", "<unk>"},                 {"extra_ids", 100},
          {"legacy", true}};
}

}  // namespace yeto::family
