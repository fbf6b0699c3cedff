#include "artifacts/export_settings.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::artifacts {

namespace fs = std::filesystem;

const std::vector<std::string>& layout_keys() {
  static const std::vector<std::string> keys = {"model.id",   "model.revision", "model.kind",     "model.adapter",
                                                "tuning.mode", "lora.r",        "lora.alpha",     "lora.targets",
                                                "sync.fragments", "sync.fragment_pattern"};
  return keys;
}

fs::path find_run_config(const fs::path& checkpoint_file) {
  fs::path dir = fs::absolute(checkpoint_file).parent_path();
  for (int up = 0; up <= 3 && !dir.empty(); ++up) {
    if (fs::exists(dir / "config.toml")) return dir / "config.toml";
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return {};
}

ResolvedExportConfig resolve_export_config(const fs::path& checkpoint_file, const std::optional<fs::path>& config_file,
                                           const std::vector<config::Override>& overrides) {
  ResolvedExportConfig r;
  r.recorded_file = find_run_config(checkpoint_file);
  const std::optional<fs::path> base =
      config_file ? config_file : (r.recorded_file.empty() ? std::nullopt : std::optional<fs::path>(r.recorded_file));
  r.config = config::Config::resolve(base, overrides);
  if (r.recorded_file.empty()) return r;

  const config::Config recorded = config::Config::resolve(r.recorded_file, {});
  const auto rec = recorded.to_json(), now = r.config.to_json();
  std::vector<std::string> conflicts;
  for (const auto& key : layout_keys()) {
    if (!rec.contains(key)) continue;
    const auto& was = rec.at(key).at("value");
    const auto& is = now.at(key).at("value");
    if (was == is) continue;
    std::string source;
    for (const auto& o : overrides)
      if (o.key == key) source = o.source;
    if (source.empty()) source = config_file ? "--config " + config_file->string() : "the configuration";
    conflicts.push_back(key + ": " + source + " gives " + is.dump() + ", the run recorded " + was.dump());
  }
  if (!conflicts.empty()) {
    throw UsageError("export: settings contradict the run's recorded configuration " + r.recorded_file.string() +
                     " (the checkpoint was trained with it):\n  " + join(conflicts, "\n  ") +
                     "\ndrop these flags; the recorded values are used by default");
  }
  return r;
}

ExportSettings export_settings(const config::Config& cfg) {
  ExportSettings s;
  s.model = cfg.get_string("model.id");
  if (s.model.empty()) throw UsageError("export needs the model: --model M (or a run directory whose config.toml has model.id)");
  s.r = cfg.get_int("lora.r");
  s.alpha = cfg.get_number("lora.alpha");
  s.targets = cfg.get_list("lora.targets");
  s.fragments = static_cast<std::uint32_t>(cfg.get_int("sync.fragments"));
  s.fragment_pattern = cfg.get_string("sync.fragment_pattern");
  return s;
}

}  // namespace yeto::artifacts
