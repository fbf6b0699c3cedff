// A Diffusers-format model directory: `model_index.json` names each component's library and
// class; each component folder holds its config (`config.json`, `scheduler_config.json` or
// tokenizer files) and its weights (see weight_source.hpp). A directory with only a
// `config.json` (one saved model, e.g. a parity case) opens as a one-component repository.
// Torch-free.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/component_registry.hpp"
#include "io/weight_source.hpp"

namespace yeto::io {

struct ComponentInfo {
  std::string name;                       // folder name ("transformer"); "" for a one-model directory
  std::string library;                    // "diffusers", "transformers", "" when unknown
  std::string class_name;                 // the Diffusers / transformers class
  std::filesystem::path dir;
  std::filesystem::path config_file;      // empty when the folder has none
  nlohmann::json config = nlohmann::json::object();
  std::vector<std::filesystem::path> tokenizer_files;
  bool has_weights = false;               // holds safetensors weights (any variant)
  std::vector<std::string> variants;      // weight variants present besides the default ("fp16", ...)
};

class DiffusersRepo {
 public:
  // Throws yeto::Error: not_found when `dir` does not exist; bad_input (naming the file) for a
  // malformed model_index.json / config, or a component folder model_index.json names that
  // is missing.
  static DiffusersRepo open(const std::filesystem::path& dir, const std::string& variant = "");
  // A directory the serving plugin's load_pipeline plan describes entirely (a release layout
  // with no model_index.json, such as a single-file checkpoint next to its own config): no
  // components, model_index() {}. Throws yeto::Error (not_found) when `dir` does not exist.
  static DiffusersRepo open_unindexed(const std::filesystem::path& dir, const std::string& variant = "");
  // Whether `dir` has a model_index.json, a scheduler_config.json, or a config.json naming a class
  // (one model); a config.json that names none is a layout its plugin plans.
  static bool is_indexed(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& variant() const { return variant_; }
  const nlohmann::json& model_index() const { return index_; }  // {} for a one-model directory
  std::string pipeline_class() const;
  bool single_model() const { return single_; }
  const std::vector<ComponentInfo>& components() const { return components_; }
  const ComponentInfo* component(const std::string& name) const;
  // Throws yeto::Error (not_found) naming the components that exist.
  const ComponentInfo& require(const std::string& name) const;

  ComponentSource source(const ComponentInfo& c) const;
  // Constructs the component through the registry (by its class name).
  std::shared_ptr<Component> create(const std::string& name,
                                    const ComponentRegistry& registry = ComponentRegistry::global()) const;
  WeightSource weights(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  std::string variant_;
  nlohmann::json index_ = nlohmann::json::object();
  bool single_ = false;
  std::vector<ComponentInfo> components_;
};

// Reads a JSON file; throws yeto::Error (bad_input) naming the file and the parse position.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace yeto::io
