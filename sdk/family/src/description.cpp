#include "yeto/family/description.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::family {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

const json& member(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key)) bad(where + ": no '" + key + "'");
  return obj.at(key);
}

std::string string_at(const json& obj, const char* key, const std::string& where) {
  const auto& v = member(obj, key, where);
  if (!v.is_string() || v.get<std::string>().empty()) bad(where + ": '" + key + "' must be a non-empty string");
  return v.get<std::string>();
}

std::vector<std::string> strings_at(const json& v, const std::string& where) {
  if (!v.is_array() || v.empty()) bad(where + " must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& s : v) {
    if (!s.is_string()) bad(where + " must be a non-empty array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

bool boolean_or(const json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.contains(key)) return fallback;
  if (!obj.at(key).is_boolean()) bad(where + ": '" + key + "' must be true or false");
  return obj.at(key).get<bool>();
}

// A model_index.json entry that names a component: [library, class] with a class.
bool names_component(const json& entry) { return entry.is_array() && entry.size() == 2 && entry[1].is_string(); }

// The shape values of a kit config, read with `where` naming the key.
class Shape {
 public:
  Shape(json shape, std::string where) : shape_(std::move(shape)), where_(std::move(where)) {
    if (!shape_.is_object()) bad(where_ + ": 'shape' must be an object");
  }
  int integer(const char* key) {
    if (!shape_.contains(key)) bad(where_ + ".shape: no '" + key + "'");
    return integer_or(key, 0);
  }
  int integer_or(const char* key, int fallback) {
    used_.push_back(key);
    if (!shape_.contains(key)) return fallback;
    const auto& v = shape_.at(key);
    if (!v.is_number_integer() || v.get<long long>() <= 0)
      bad(where_ + ".shape: '" + key + "' must be a positive integer");
    return v.get<int>();
  }
  std::string text(const char* key, const std::string& fallback) {
    used_.push_back(key);
    if (!shape_.contains(key)) return fallback;
    if (!shape_.at(key).is_string()) bad(where_ + ".shape: '" + key + "' must be a string");
    return shape_.at(key).get<std::string>();
  }
  // Every key was read: a misspelt one is an error, not a silent default.
  void done() const {
    for (auto it = shape_.begin(); it != shape_.end(); ++it)
      if (std::find(used_.begin(), used_.end(), it.key()) == used_.end())
        bad(where_ + ".shape: unknown key '" + it.key() + "'");
  }

 private:
  json shape_;
  std::string where_;
  std::vector<std::string> used_;
};

}  // namespace

json expand_kit_config(const json& config, const std::string& where) {
  if (!config.is_object() || !config.contains("kit")) return config;
  for (auto it = config.begin(); it != config.end(); ++it)
    if (it.key() != "kit" && it.key() != "shape" && it.key() != "with")
      bad(where + ": a kit config has only 'kit', 'shape' and 'with', got '" + it.key() + "'");
  const auto kit = string_at(config, "kit", where);
  Shape s(config.value("shape", json::object()), where);
  json out;
  if (kit == "clip_text") {
    ClipTextShape c;
    c.hidden = s.integer("hidden");
    c.layers = s.integer("layers");
    c.heads = s.integer("heads");
    c.intermediate = s.integer("intermediate");
    c.architecture = s.text("architecture", c.architecture);
    c.hidden_act = s.text("hidden_act", c.hidden_act);
    out = clip_text_config(c);
  } else if (kit == "t5_encoder" || kit == "umt5_encoder") {
    const T5Shape t{s.integer("d_model"), s.integer("d_kv"), s.integer("heads"), s.integer("d_ff"),
                    s.integer("layers")};
    out = kit == "t5_encoder" ? t5_encoder_config(t) : umt5_encoder_config(t);
  } else if (kit == "clip_tokenizer") {
    out = clip_tokenizer_config(s.text("pad_token", "<|endoftext|>"));
  } else if (kit == "t5_tokenizer") {
    out = t5_tokenizer_config(s.integer_or("model_max_length", 512));
  } else {
    bad(where + ": unknown kit config '" + kit +
        "' (clip_text, t5_encoder, umt5_encoder, clip_tokenizer, t5_tokenizer)");
  }
  s.done();
  if (config.contains("with")) {
    if (!config["with"].is_object()) bad(where + ": 'with' must be an object");
    out.merge_patch(config["with"]);
  }
  return out;
}

FamilyDescription FamilyDescription::parse(const std::string& text, const std::string& where) {
  FamilyDescription d;
  try {
    d.doc_ = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(where + ": invalid JSON: " + e.what());
  }
  const json& doc = d.doc_;
  if (!doc.is_object()) bad(where + ": expected a JSON object");
  d.plugin_ = string_at(doc, "plugin", where);
  d.model_ = string_at(doc, "model", where);
  if (doc.contains("denoiser")) d.denoiser_ = string_at(doc, "denoiser", where);
  d.layout_ = string_at(doc, "layout", where);
  if (doc.contains("latents")) {
    const auto& l = doc["latents"];
    for (const char* k : {"scaling_factor", "shift_factor"})
      if (l.contains(k) && !l[k].is_number()) bad(where + ": 'latents." + k + "' must be a number");
    d.scaling_factor_ = l.value("scaling_factor", d.scaling_factor_);
    d.shift_factor_ = l.value("shift_factor", d.shift_factor_);
  }

  if (doc.contains("max_sequence_length")) {
    const auto& m = doc["max_sequence_length"];
    auto count = [&](const char* k) -> std::int64_t {
      if (!m.contains(k)) return 0;
      if (!m[k].is_number_integer() || m[k].get<std::int64_t>() < 0)
        bad(where + ": 'max_sequence_length." + k + "' must be a non-negative integer");
      return m[k].get<std::int64_t>();
    };
    if (!m.is_object()) bad(where + ": 'max_sequence_length' must be {\"default\": N, \"max\": M}");
    d.max_sequence_length_ = count("default");
    d.max_sequence_length_limit_ = count("max");
  }

  const auto& comps = member(doc, "components", where);
  if (!comps.is_array() || comps.empty()) bad(where + ": 'components' must be a non-empty array");
  bool has_denoiser = false;
  for (std::size_t i = 0; i < comps.size(); ++i) {
    const std::string at = where + ": components[" + std::to_string(i) + "]";
    const auto& c = comps[i];
    if (!c.is_object()) bad(at + " must be an object");
    ComponentSpec spec{string_at(c, "name", at), strings_at(member(c, "classes", at), at + ".classes"),
                       boolean_or(c, "optional", false, at), boolean_or(c, "nullable", true, at)};
    has_denoiser = has_denoiser || spec.name == d.denoiser_;
    d.components_.push_back(std::move(spec));
  }
  if (!has_denoiser) bad(where + ": the denoiser '" + d.denoiser_ + "' is not one of the components");

  if (doc.contains("memory")) {
    const auto& m = doc["memory"];
    if (!m.is_object()) bad(where + ": 'memory' must be an object");
    for (const char* k : {"token_pixels", "token_frames", "text_tokens"})
      if (m.contains(k) && (!m[k].is_number_integer() || m[k].get<std::int64_t>() < 0))
        bad(where + ": 'memory." + k + "' must be a non-negative integer");
    if (m.contains("attention") && !(m["attention"] == "joint" || m["attention"] == "self_cross"))
      bad(where + ": 'memory.attention' must be \"joint\" or \"self_cross\"");
    if (m.contains("heads_key") && !m["heads_key"].is_string()) bad(where + ": 'memory.heads_key' must be a string");
    for (const char* k : {"per_sample_linears", "text_linears"})
      if (m.contains(k)) strings_at(m[k], where + ": memory." + k);
  }

  const auto& lora = member(doc, "lora_targets", where);
  d.lora_sets_.auto_patterns =
      strings_at(member(lora, "auto", where + ": lora_targets"), where + ": lora_targets.auto");
  d.lora_sets_.attention_patterns =
      strings_at(member(lora, "attention", where + ": lora_targets"), where + ": lora_targets.attention");

  // Presets: the family's model_index and default configs, each patched by the preset.
  const auto& index = member(doc, "model_index", where);
  if (!index.is_object()) bad(where + ": 'model_index' must be an object");
  const json defaults = doc.value("configs", json::object());
  if (!defaults.is_object()) bad(where + ": 'configs' must be an object");
  d.presets_ = json::object();
  const json presets = doc.value("presets", json::object());
  if (!presets.is_object()) bad(where + ": 'presets' must be an object");
  for (auto p = presets.begin(); p != presets.end(); ++p) {
    const std::string at = where + ": presets." + p.key();
    const auto& preset = p.value();
    if (!preset.is_object()) bad(at + " must be an object");
    json model_index = index;
    if (preset.contains("model_index")) model_index.merge_patch(preset["model_index"]);
    const json patches = preset.value("configs", json::object());
    json components = json::object();
    for (auto e = model_index.begin(); e != model_index.end(); ++e) {
      if (!names_component(e.value())) continue;
      json config = defaults.value(e.key(), json());
      if (patches.contains(e.key())) {
        if (config.is_null()) config = json::object();
        config.merge_patch(patches[e.key()]);
      }
      if (!config.is_object()) bad(at + ": no config for the component '" + e.key() + "'");
      components[e.key()] = {{"config", expand_kit_config(config, at + ".configs." + e.key())}};
    }
    for (auto e = patches.begin(); e != patches.end(); ++e)
      if (!components.contains(e.key()))
        bad(at + ": configs." + e.key() + " is not a component of the preset's model_index");
    // Analytic weights the host writes instead of random ones (e.g. "pixel-codec" for a VAE).
    const json weights = preset.value("weights", json::object());
    if (!weights.is_object()) bad(at + ": 'weights' must be an object {component: \"name\"}");
    for (auto e = weights.begin(); e != weights.end(); ++e) {
      if (!components.contains(e.key())) bad(at + ": weights." + e.key() + " is not a component of the preset's model_index");
      if (!e.value().is_string()) bad(at + ": weights." + e.key() + " must be a string");
      components[e.key()]["weights"] = e.value();
    }
    d.presets_[p.key()] = {{"description", string_at(preset, "description", at)},
                           {"model_index", model_index},
                           {"components", components}};
  }
  return d;
}

json FamilyDescription::plan(const std::string& model_dir, const json& model_index) const {
  json components = plan_components(model_dir, model_index, components_, plugin_, layout_);
  // The component the run trains is the model's denoiser whatever its name (Protenix's
  // diffusion_module): the host folds an adapter into it when sampling.
  if (components.contains(denoiser_) && components[denoiser_].is_object() && !components[denoiser_].contains("kind"))
    components[denoiser_]["kind"] = "denoiser";
  json out = {{"components", components}, {"family", plugin_}};
  // The family's token geometry for the host's memory model (host/memory): the file's "memory"
  // object, its text tokens defaulting to the pipeline's max_sequence_length.
  if (doc_.contains("memory")) {
    json m = doc_["memory"];
    if (!m.contains("text_tokens") && max_sequence_length_ > 0) m["text_tokens"] = max_sequence_length_;
    out["memory"] = m;
  }
  return out;
}

LoraTargets FamilyDescription::lora_targets(const json& targets) const {
  return resolve_lora_targets(targets, lora_sets_);
}

}  // namespace yeto::family
