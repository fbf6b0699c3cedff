// `yeto-host init-model`: a complete, randomly initialised Diffusers-layout repository from a
// family plugin's presets (ABI 1.1 `presets` hook). The plugin documents shapes only; the
// host writes model_index.json and every component's config, builds each component from its
// class with seeded random weights (Pipeline::open without weights) and saves it as
// safetensors, and writes the tokenizer files itself (text/tokenizer_writer.hpp), so the
// result loads with every other command. Torch-free declarations (library yeto_initmodel).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::config {
struct Override;
class Config;
}

namespace yeto::initmodel {

struct InitOptions {
  std::string family;  // a plugin family (or plugin name / alias)
  std::string preset;
  std::filesystem::path out;
  std::uint64_t seed = 0;
  bool force = false;  // replace a non-empty `out`
};

struct InitResult {
  std::string plugin;  // the plugin that served the family
  std::vector<std::string> components;       // written, in model_index order
  std::map<std::string, std::int64_t> parameters;  // component -> parameter count (weighted ones)
};

// The files of one preset, written into `dir` (which must exist and be empty): model_index.json,
// every component's config (config.json / scheduler_config.json / tokenizer files). Throws
// yeto::Error (bad_input) naming the preset key when it is malformed. Returns the component
// names in model_index order.
std::vector<std::string> write_preset_files(const std::filesystem::path& dir, const nlohmann::json& preset,
                                            const std::string& where);

// The init-model presets of the plugin that serves `family` (a family, plugin name or alias),
// found and loaded through the trusted loader with `cfg`'s plugins.* settings: presets() parsed,
// a non-empty object. Throws yeto::Error (plugin_not_found naming the families found and the
// directories searched; not_available when the plugin offers none).
struct FamilyPresets {
  std::string plugin;
  std::string version;
  nlohmann::json presets;
};
FamilyPresets family_presets(const config::Config& cfg, const std::string& family, std::uint64_t seed = 0);

// The whole command: finds and loads the plugin (trusted loader, the run configuration's
// plugins.* settings from `config_file` + `overrides`), reads its presets, writes the
// repository into a staging folder beside `out` and moves it into place at the end (an
// interrupted run leaves `out` as it was).
InitResult init_model(const std::optional<std::filesystem::path>& config_file,
                      const std::vector<config::Override>& overrides, const InitOptions& options);

}  // namespace yeto::initmodel
