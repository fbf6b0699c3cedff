#include "yeto/family/config.hpp"

#include <algorithm>
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

void invalid(const std::string& what) { throw std::invalid_argument(what); }

ConfigReader::ConfigReader(const json& config, std::string where) : j_(config), where_(std::move(where)) {
  if (!j_.is_object()) bad(where_ + ": expected a JSON object");
}

bool ConfigReader::present(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

void ConfigReader::fail(const std::string& key, const std::string& what) const {
  bad(where_ + ": '" + key + "' " + what);
}

void ConfigReader::require(const char* key, const std::string& why) const {
  if (!present(key)) fail(key, "is required" + why);
}

std::int64_t ConfigReader::integer(const char* key, std::int64_t fallback) const {
  if (!present(key)) return fallback;
  if (!j_[key].is_number_integer()) fail(key, "must be an integer, got " + j_[key].dump());
  return j_[key].get<std::int64_t>();
}

double ConfigReader::number(const char* key, double fallback) const {
  if (!present(key)) return fallback;
  if (!j_[key].is_number()) fail(key, "must be a number, got " + j_[key].dump());
  return j_[key].get<double>();
}

bool ConfigReader::boolean(const char* key, bool fallback) const {
  if (!present(key)) return fallback;
  if (!j_[key].is_boolean()) fail(key, "must be true or false, got " + j_[key].dump());
  return j_[key].get<bool>();
}

std::string ConfigReader::string(const char* key, const std::string& fallback) const {
  if (!present(key)) return fallback;
  if (!j_[key].is_string()) fail(key, "must be a string, got " + j_[key].dump());
  return j_[key].get<std::string>();
}

template <class T>
std::vector<T> ConfigReader::list(const char* key, const std::vector<T>& fallback, bool (json::*is)() const noexcept,
                                  const char* kind) const {
  if (!present(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_array()) fail(key, std::string("must be a list of ") + kind + ", got " + v.dump());
  std::vector<T> out;
  for (const auto& e : v) {
    if (!(e.*is)()) fail(key, std::string("must be a list of ") + kind + ", got " + v.dump());
    out.push_back(e.get<T>());
  }
  return out;
}

std::vector<std::int64_t> ConfigReader::integers(const char* key, const std::vector<std::int64_t>& fallback) const {
  return list(key, fallback, &json::is_number_integer, "integers");
}
std::vector<double> ConfigReader::numbers(const char* key, const std::vector<double>& fallback) const {
  return list(key, fallback, &json::is_number, "numbers");
}
std::vector<bool> ConfigReader::booleans(const char* key, const std::vector<bool>& fallback) const {
  return list(key, fallback, &json::is_boolean, "true/false values");
}
std::vector<std::string> ConfigReader::strings(const char* key, const std::vector<std::string>& fallback) const {
  return list(key, fallback, &json::is_string, "strings");
}

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

std::string component_class(const json& model_index, const ComponentSpec& spec, const std::string& where,
                            const std::string& plugin) {
  const auto& entry = model_index.at(spec.name);
  if (!entry.is_array() || entry.size() != 2 || !entry[1].is_string())
    bad(where + ": '" + spec.name + "' must be a [library, class] pair, got " + entry.dump());
  const auto cls = entry[1].get<std::string>();
  if (std::find(spec.classes.begin(), spec.classes.end(), cls) == spec.classes.end()) {
    std::string expected;
    for (const auto& c : spec.classes) expected += (expected.empty() ? "" : " or ") + c;
    bad(where + ": '" + spec.name + "' is " + cls + "; the " + plugin + " plugin expects " + expected);
  }
  return cls;
}

json plan_components(const std::string& model_dir, const json& model_index, const std::vector<ComponentSpec>& specs,
                     const std::string& plugin, const std::string& layout) {
  const std::string where = model_dir + "/model_index.json";
  if (!model_index.is_object()) bad(where + ": expected a JSON object");
  json components = json::object();
  for (const auto& spec : specs) {
    const bool listed = model_index.contains(spec.name);
    const json entry = listed ? model_index.at(spec.name) : json();
    const bool null = entry.is_null() || (entry.is_array() && entry.size() == 2 && entry[0].is_null() && entry[1].is_null());
    if (!listed || null) {
      if (spec.optional) continue;
      if (!listed) bad(where + ": no '" + spec.name + "' component; " + layout);
      if (!spec.nullable)
        bad(where + ": '" + spec.name + "' is null, but every " + plugin + " run needs it; " + layout);
      components[spec.name] = nullptr;
      continue;
    }
    const auto cls = component_class(model_index, spec, where, plugin);
    components[spec.name] = {{"class", cls}, {"dir", model_dir + "/" + spec.name}};
  }
  return components;
}

RequestReader::RequestReader(const json& request) : j_(request) {
  if (!j_.is_object()) bad("generate request: expected a JSON object");
}

bool RequestReader::has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

std::vector<std::string> RequestReader::strings(const char* key) const {
  if (j_.contains(key) && j_.at(key).is_string()) return {j_.at(key).get<std::string>()};
  if (!j_.contains(key) || !j_.at(key).is_array() || j_.at(key).empty())
    bad(std::string("generate request: '") + key + "' must be a string or a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& p : j_.at(key)) {
    if (!p.is_string()) bad(std::string("generate request: '") + key + "' must hold strings, got " + p.dump());
    out.push_back(p.get<std::string>());
  }
  return out;
}

void read_generate_settings(const RequestReader& in, const GenerateRules& rules, GenerateSettings& s) {
  s.prompts = in.strings("prompts");
  if (rules.negative_prompts && in.has("negative_prompts")) {
    s.negative_prompts = in.strings("negative_prompts");
    if (s.negative_prompts.size() == 1 && rules.single_negative_for_all)
      s.negative_prompts.assign(s.prompts.size(), s.negative_prompts[0]);
    if (s.negative_prompts.size() != s.prompts.size())
      bad("generate request: 'negative_prompts' has " + std::to_string(s.negative_prompts.size()) + " entries for " +
          std::to_string(s.prompts.size()) + " prompts (give " +
          (rules.single_negative_for_all ? "one, or one per prompt)" : "one per prompt)"));
  } else {
    s.negative_prompts.assign(s.prompts.size(), "");
  }
  s.seed = in.seed(s.seed);
  s.steps = in.integer("steps", s.steps, 1);
  s.height = in.integer("height", s.height, rules.min_size);
  s.width = in.integer("width", s.width, rules.min_size);
  s.max_sequence_length = in.integer("max_sequence_length", s.max_sequence_length, 1);
  if (rules.max_sequence_length > 0 && s.max_sequence_length > rules.max_sequence_length)
    bad("generate request: 'max_sequence_length' cannot be greater than " + std::to_string(rules.max_sequence_length) +
        " (" + rules.max_sequence_length_text + "), got " + std::to_string(s.max_sequence_length));
  s.guidance = in.number("guidance", s.guidance);
  s.trace = in.boolean("trace", s.trace);
}

std::int64_t RequestReader::integer(const char* key, std::int64_t fallback, std::int64_t min) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_number_integer()) bad(std::string("generate request: '") + key + "' must be an integer");
  const auto v = j_.at(key).get<std::int64_t>();
  if (v < min) bad(std::string("generate request: '") + key + "' must be at least " + std::to_string(min));
  return v;
}

double RequestReader::number(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_number()) bad(std::string("generate request: '") + key + "' must be a number");
  return j_.at(key).get<double>();
}

bool RequestReader::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_boolean()) bad(std::string("generate request: '") + key + "' must be a boolean");
  return j_.at(key).get<bool>();
}

std::uint64_t RequestReader::seed(std::uint64_t fallback) const {
  if (!has("seed")) return fallback;
  const auto& s = j_.at("seed");
  if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<std::int64_t>() >= 0))
    bad("generate request: 'seed' must be a non-negative integer");
  return s.get<std::uint64_t>();
}

std::vector<double> linspace(double start, double stop, std::int64_t num) {
  if (num < 0) bad("linspace: num must be non-negative");
  std::vector<double> y(static_cast<std::size_t>(num));
  const std::int64_t div = num - 1;
  const double delta = stop - start;
  for (std::int64_t i = 0; i < num; ++i) {
    double v = static_cast<double>(i);
    if (div > 0) {
      const double step = delta / static_cast<double>(div);
      v = step == 0.0 ? v / static_cast<double>(div) * delta : v * step;
    } else {
      v = v * delta;
    }
    y[static_cast<std::size_t>(i)] = v + start;
  }
  if (num > 1) y.back() = stop;
  return y;
}

}  // namespace yeto::family
