#include "io/repository.hpp"

#include <algorithm>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/python_json.hpp"
#include "core/strings.hpp"

namespace yeto::io {
namespace fs = std::filesystem;

namespace {

const char* const kConfigFiles[] = {"config.json", "scheduler_config.json", "tokenizer_config.json",
                                    "preprocessor_config.json"};
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json", "merges.txt", "spiece.model", "added_tokens.json",
                                       "vocab.txt", "tokenizer.model"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void scan_folder(ComponentInfo& c) {
  std::error_code ec;
  for (const char* f : kConfigFiles) {
    if (fs::is_regular_file(c.dir / f, ec)) {
      c.config_file = c.dir / f;
      c.config = read_json_file(c.config_file);
      if (!c.config.is_object())
        throw Error(c.config_file.string() + ": a config must be a JSON object", ExitCode::bad_input);
      break;
    }
  }
  for (const char* f : kTokenizerFiles)
    if (fs::is_regular_file(c.dir / f, ec)) c.tokenizer_files.push_back(c.dir / f);
  std::vector<std::string> variants;
  for (const auto& e : fs::directory_iterator(c.dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!ends_with(n, ".safetensors") && !ends_with(n, ".safetensors.index.json") && !ends_with(n, ".json")) continue;
    if (ends_with(n, ".safetensors")) c.has_weights = true;
    // name.<variant>.safetensors, name.safetensors.index.<variant>.json, name-0000x-of-0000y.<variant>.safetensors
    for (const char* v : {"fp16", "bf16", "fp32", "fp8"})
      if (n.find(std::string(".") + v + ".") != std::string::npos) variants.push_back(v);
  }
  std::sort(variants.begin(), variants.end());
  variants.erase(std::unique(variants.begin(), variants.end()), variants.end());
  c.variants = variants;
}

std::string class_from_config(const nlohmann::json& cfg) {
  if (cfg.contains("_class_name") && cfg["_class_name"].is_string()) return cfg["_class_name"];
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty() &&
      cfg["architectures"][0].is_string())
    return cfg["architectures"][0];
  if (cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()) return cfg["tokenizer_class"];
  return "";
}

}  // namespace

nlohmann::json read_json_file(const fs::path& path) {
  // Diffusers and transformers write configs with Python's json module, which spells
  // non-finite floats as bare Infinity / -Infinity / NaN (a DPM-Solver scheduler config has
  // "lambda_min_clipped": -Infinity), so those literals are accepted.
  return parse_python_json(read_file(path), path.string());
}

DiffusersRepo DiffusersRepo::open(const fs::path& dir, const std::string& variant) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("model directory '" + dir.string() + "' does not exist", ExitCode::not_found);
  DiffusersRepo r;
  r.dir_ = dir;
  r.variant_ = variant;
  const fs::path index = dir / "model_index.json";
  if (!fs::is_regular_file(index, ec)) {
    if (!fs::is_regular_file(dir / "config.json", ec) && !fs::is_regular_file(dir / "scheduler_config.json", ec))
      throw Error("'" + dir.string() + "' is not a Diffusers model: it has no model_index.json (a pipeline) and no "
                  "config.json (a single model)",
                  ExitCode::bad_input);
    r.single_ = true;
    ComponentInfo c;
    c.dir = dir;
    scan_folder(c);
    c.class_name = class_from_config(c.config);
    c.library = c.config.contains("_diffusers_version") ? "diffusers"
                : c.config.contains("architectures")   ? "transformers"
                                                       : "";
    if (c.class_name.empty())
      throw Error(c.config_file.string() + ": names no class (no \"_class_name\" or \"architectures\")",
                  ExitCode::bad_input);
    r.components_.push_back(std::move(c));
    return r;
  }
  r.index_ = read_json_file(index);
  if (!r.index_.is_object()) throw Error(index.string() + ": must be a JSON object", ExitCode::bad_input);
  for (const auto& [name, value] : r.index_.items()) {
    if (name.empty() || name[0] == '_' || !value.is_array()) continue;  // metadata and pipeline options
    if (value.size() != 2)
      throw Error(index.string() + ": component '" + name + "' must be [library, class]", ExitCode::bad_input);
    if (value[0].is_null() && value[1].is_null()) continue;  // an optional component that is absent
    if (!value[0].is_string() || !value[1].is_string())
      throw Error(index.string() + ": component '" + name + "' must be [library, class] strings", ExitCode::bad_input);
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      throw Error(index.string() + ": component name '" + name + "' is not a folder name", ExitCode::bad_input);
    ComponentInfo c;
    c.name = name;
    c.library = value[0].get<std::string>();
    c.class_name = value[1].get<std::string>();
    c.dir = dir / name;
    if (!fs::is_directory(c.dir, ec))
      throw Error(index.string() + " names component '" + name + "' (" + c.class_name + ") but the folder " +
                      c.dir.string() + " does not exist",
                  ExitCode::bad_input);
    scan_folder(c);
    r.components_.push_back(std::move(c));
  }
  return r;
}

DiffusersRepo DiffusersRepo::open_unindexed(const fs::path& dir, const std::string& variant) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("model directory '" + dir.string() + "' does not exist", ExitCode::not_found);
  DiffusersRepo r;
  r.dir_ = dir;
  r.variant_ = variant;
  return r;
}

bool DiffusersRepo::is_indexed(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "model_index.json", ec) || fs::is_regular_file(dir / "scheduler_config.json", ec))
    return true;
  if (!fs::is_regular_file(dir / "config.json", ec)) return false;
  // A config.json that names no class (a release's own model config next to its single-file
  // checkpoint) is not one Diffusers / transformers model: that layout is its plugin's to plan. One
  // that does not parse is left to open(), which names the error.
  try {
    return !class_from_config(read_json_file(dir / "config.json")).empty();
  } catch (const std::exception&) {
    return true;
  }
}

std::string DiffusersRepo::pipeline_class() const {
  if (single_) return components_.front().class_name;
  return index_.contains("_class_name") && index_["_class_name"].is_string() ? index_["_class_name"].get<std::string>()
                                                                             : "";
}

const ComponentInfo* DiffusersRepo::component(const std::string& name) const {
  for (const auto& c : components_)
    if (c.name == name) return &c;
  return nullptr;
}

const ComponentInfo& DiffusersRepo::require(const std::string& name) const {
  if (const ComponentInfo* c = component(name)) return *c;
  std::vector<std::string> names;
  for (const auto& c : components_) names.push_back(c.name.empty() ? "(the model itself)" : c.name);
  throw Error("model " + dir_.string() + " has no component '" + name + "' (it has " + join(names, ", ") + ")" +
                  did_you_mean(name, names),
              ExitCode::not_found);
}

ComponentSource DiffusersRepo::source(const ComponentInfo& c) const {
  return ComponentSource{c.class_name, c.dir, c.config, variant_};
}

std::shared_ptr<Component> DiffusersRepo::create(const std::string& name, const ComponentRegistry& registry) const {
  return registry.create(source(require(name)));
}

WeightSource DiffusersRepo::weights(const std::string& name) const {
  return WeightSource::open(require(name).dir, variant_);
}

}  // namespace yeto::io
