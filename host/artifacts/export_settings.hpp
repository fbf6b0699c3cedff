// The settings `yeto-host export` rebuilds a run's trainable layout from: the run's recorded
// configuration (RUN_DIR/config.toml, as `train` writes it) is the default, command-line flags
// may only add to it, and a flag that contradicts a recorded layout setting is refused.
// Torch-free.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "artifacts/export.hpp"
#include "config/config.hpp"

namespace yeto::artifacts {

// The keys the trainable layout (or the adapter's scale) depends on.
const std::vector<std::string>& layout_keys();

// RUN_DIR/config.toml for a checkpoint file: looked for in its directory and up to three
// directories above (syncer state dir, learner step dir, checkpoints dir, run dir). Empty when
// there is none.
std::filesystem::path find_run_config(const std::filesystem::path& checkpoint_file);

struct ResolvedExportConfig {
  config::Config config;
  std::filesystem::path recorded_file;  // empty when the run recorded none
};

// Resolves the export's configuration: the recorded run config (or `config_file` when given
// explicitly) < `overrides`. Throws yeto::UsageError naming the key, the flag, both values and
// the recorded file when an override contradicts a recorded layout setting.
ResolvedExportConfig resolve_export_config(const std::filesystem::path& checkpoint_file,
                                           const std::optional<std::filesystem::path>& config_file,
                                           const std::vector<config::Override>& overrides);

ExportSettings export_settings(const config::Config& cfg);

}  // namespace yeto::artifacts
