// The torch-free half of init-model: model_index.json, component configs and tokenizer files.
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "initmodel/init_model.hpp"
#include "text/tokenizer_components.hpp"
#include "text/tokenizer_writer.hpp"

namespace yeto::initmodel {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_json(const fs::path& file, const json& j) {
  fs::create_directories(file.parent_path());
  atomic_write(file, j.dump(2) + "\n");
}

bool is_scheduler_class(const std::string& c) { return c.find("Scheduler") != std::string::npos; }
bool is_clip_tokenizer(const std::string& c) { return c == "CLIPTokenizer" || c == "CLIPTokenizerFast"; }

// "tokenizer" -> "text_encoder", "tokenizer_2" -> "text_encoder_2".
std::string encoder_for(const std::string& tokenizer) {
  return tokenizer.rfind("tokenizer", 0) == 0 ? "text_encoder" + tokenizer.substr(9) : "";
}

std::optional<std::int64_t> int_field(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number_integer()) return j[key].get<std::int64_t>();
  return std::nullopt;
}

}  // namespace

std::vector<std::string> write_preset_files(const fs::path& dir, const json& preset, const std::string& where) {
  auto bad = [&](const std::string& what) -> Error { return Error(where + ": " + what, ExitCode::bad_input); };
  if (!preset.is_object()) throw bad("a preset must be a JSON object");
  if (!preset.contains("model_index") || !preset["model_index"].is_object()) throw bad("no \"model_index\" object");
  const json components = preset.value("components", json::object());
  if (!components.is_object()) throw bad("\"components\" must be an object {name: {\"config\": {...}}}");

  json index = preset["model_index"];
  if (!index.contains("_class_name")) throw bad("model_index has no \"_class_name\" (the pipeline class)");
  if (!index.contains("_diffusers_version")) index["_diffusers_version"] = "0.33.1";

  struct Comp {
    std::string name, library, class_name;
    json config;
  };
  std::vector<Comp> comps;
  for (const auto& [name, entry] : index.items()) {
    if (name.empty() || name[0] == '_' || !entry.is_array()) continue;  // metadata, flags
    if (entry.size() != 2) throw bad("model_index." + name + " must be a [library, class] pair, got " + entry.dump());
    if (entry[0].is_null() && entry[1].is_null()) continue;  // an optional component left out
    if (!entry[0].is_string() || !entry[1].is_string())
      throw bad("model_index." + name + " must be a [library, class] pair of strings, got " + entry.dump());
    Comp c{name, entry[0].get<std::string>(), entry[1].get<std::string>(), json::object()};
    if (components.contains(name)) {
      const json& spec = components[name];
      if (!spec.is_object() || (spec.contains("config") && !spec["config"].is_object()))
        throw bad("components." + name + " must be {\"config\": {...}}");
      if (spec.contains("weights") && !(spec["weights"].is_string() && spec["weights"] == "pixel-codec"))
        throw bad("components." + name + ".weights must be \"pixel-codec\" (the only analytic weights init-model "
                  "writes), got " + spec["weights"].dump());
      c.config = spec.value("config", json::object());
    }
    comps.push_back(std::move(c));
  }
  if (comps.empty()) throw bad("model_index names no components");
  for (const auto& [name, spec] : components.items()) {
    bool known = false;
    for (const auto& c : comps) known = known || c.name == name;
    if (!known) throw bad("components." + name + " is not in model_index");
  }
  auto config_of = [&](const std::string& name) -> const json* {
    for (const auto& c : comps)
      if (c.name == name) return &c.config;
    return nullptr;
  };

  write_json(dir / "model_index.json", index);
  std::vector<std::string> names;
  for (const auto& c : comps) {
    const fs::path cdir = dir / c.name;
    const std::string cwhere = "components." + c.name + ".config";
    names.push_back(c.name);
    if (text::is_tokenizer_class(c.class_name)) {
      // The vocabulary must match the paired text encoder's embedding table.
      const std::string enc = encoder_for(c.name);
      const json* enc_cfg = enc.empty() ? nullptr : config_of(enc);
      std::optional<std::int64_t> vocab = enc_cfg ? int_field(*enc_cfg, "vocab_size") : std::nullopt;
      if (!vocab && enc_cfg && enc_cfg->contains("text_config")) vocab = int_field((*enc_cfg)["text_config"], "vocab_size");
      if (!vocab) vocab = int_field(c.config, "vocab_size");
      if (!vocab)
        throw bad("cannot size the " + c.name + " vocabulary: components." + enc + ".config has no \"vocab_size\" and " + cwhere +
                  " gives none");
      if (is_clip_tokenizer(c.class_name)) {
        const std::int64_t max_len = int_field(c.config, "model_max_length").value_or(77);
        text::write_clip_tokenizer(cdir, *vocab, max_len, c.class_name);
        // CLIP pools at the first eos (or, with the legacy eos_token_id 2, at the highest id).
        if (const auto eos = enc_cfg ? int_field(*enc_cfg, "eos_token_id") : std::nullopt; eos && *eos != 2 && *eos != *vocab - 1)
          throw bad("components." + enc + ".config.eos_token_id is " + std::to_string(*eos) + " but the generated " + c.name +
                    " puts <|endoftext|> at " + std::to_string(*vocab - 1) + " (vocab_size - 1); use that, or 2 (pool at the highest id)");
      } else {
        const std::int64_t max_len = int_field(c.config, "model_max_length").value_or(512);
        const std::int64_t extra = int_field(c.config, "extra_ids").value_or(100);
        text::write_t5_tokenizer(cdir, *vocab, max_len, c.class_name, extra);
      }
      // The preset's own tokenizer settings win over the generated defaults.
      if (!c.config.empty()) {
        json tc = json::parse(read_file(cdir / "tokenizer_config.json"));
        for (const auto& [k, v] : c.config.items())
          if (k != "added_tokens_decoder" && k != "vocab_size") tc[k] = v;
        tc["tokenizer_class"] = c.class_name;
        write_json(cdir / "tokenizer_config.json", tc);
      }
      continue;
    }
    if (c.config.empty()) throw bad("components." + c.name + " (" + c.class_name + ") has no config");
    json cfg = c.config;
    if (is_scheduler_class(c.class_name)) {
      cfg["_class_name"] = c.class_name;
      write_json(cdir / "scheduler_config.json", cfg);
    } else if (c.library == "transformers") {
      if (!cfg.contains("architectures")) cfg["architectures"] = json::array({c.class_name});
      write_json(cdir / "config.json", cfg);
    } else {
      cfg["_class_name"] = c.class_name;
      if (!cfg.contains("_diffusers_version")) cfg["_diffusers_version"] = index["_diffusers_version"];
      write_json(cdir / "config.json", cfg);
    }
  }
  return names;
}

}  // namespace yeto::initmodel
