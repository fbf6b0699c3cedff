// Applying an adapter directory to a loaded pipeline for sampling, for any model family: the
// recorded base is checked against the loaded model, then W += scale * B @ A is folded into
// each denoiser component's weights in place through its C view (parameters() shares the
// component's storage), exactly as `yeto-host merge` folds them into files. Include only where
// LibTorch is already in use.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace yeto::config {
class Config;
}
namespace yeto::pipeline {
class Pipeline;
}

namespace yeto::sample {

// The plugin rule, checked before any plugin loads: an adapter whose record names a plugin is
// refused unless the run names its plugin itself (--diffusion-adapter / model.adapter); the
// plugin an artifact names is never loaded because it names it. Returns the record (null when
// the directory has none). Throws yeto::Error (usage) saying to pass --diffusion-adapter NAME.
nlohmann::json check_adapter_plugin(const std::filesystem::path& adapter_dir, const config::Config& cfg);

struct FoldReport {
  std::size_t modules = 0;
  std::string components;  // "transformer", ...
};

// Reads the adapter (any layout read_adapter reads), refuses one recorded for another base than
// the pipeline's model (naming both), and folds it into the pipeline's denoiser weights.
// `into` is the denoiser chosen with --adapter-dir DIR:COMPONENT ("" none): with several
// denoisers, an adapter without a record saying which it is for needs it. Throws yeto::Error
// (bad_input) naming the adapter file and tensor for a module the model lacks or a shape that
// does not fit; usage for an `into` that names no denoiser.
FoldReport fold_adapter(pipeline::Pipeline& pipe, const config::Config& cfg, const std::filesystem::path& adapter_dir,
                        const std::string& into = "");

}  // namespace yeto::sample
