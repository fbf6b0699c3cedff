// A loaded model pipeline: the Diffusers repository, the family plugin that serves it, and
// every component its plan names, built and ready. This is what `train`, `learner`, `cache`,
// `sample`, `export` and `check-parity` (pipeline kinds) share, so a model loads the same way
// everywhere.
//
// Loading order (Pipeline::open):
//   1. resolve the model (local dir, org/name through the offline hub cache, or an alias);
//   2. load the one plugin the run names (plugin::load_adapter: signature, ABI, LibTorch
//      checks) and create its instance with the resolved run configuration;
//   3. register the plugin's component classes (host registry, origin "plugin NAME");
//   4. ask load_pipeline for the plan ({"components": {name: {"class", "dir"}}, ...});
//   5. build every planned component: host classes natively, plugin classes through their
//      C constructor with the weights streamed in by the host one tensor at a time in the
//      run's precision (no full float32 copy of a bf16 checkpoint is ever held);
//   6. make them reachable from the plugin (yeto_host_api.component_get) and call prepare()
//      with {"lora": {...}, "tuning": ..., "precision": ..., "device": ...}.
// Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/plugin.h"

namespace yeto::config {
class Config;
}
namespace yeto::io {
class DiffusersRepo;
class Provenance;
}
namespace yeto::plugin {
class Instance;
class ShardGroup;
struct LoadedPlugin;
}
namespace yeto::schedulers {
class Scheduler;
}

namespace yeto::pipeline {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct OpenOptions {
  bool load_weights = true;  // false: random weights (shapes only), for init-model and planning
  bool prepare = true;       // false: stop after building components (no LoRA attached)
  std::int64_t logical_rank = 0;  // the learner's logical rank: the plugin's RNG streams differ per rank
  bool plan_only = false;    // stop after step 4: the plugin's plan, no component built (data check)
  // train.shard = "fsdp": the island's ranks over which the plugin shards its denoisers' frozen
  // blocks while loading (yeto_host_api.shard_group); null keeps whole weights.
  std::shared_ptr<plugin::ShardGroup> shard_group;
};

// model.id as the run names it, with a relative local directory resolved from the directory
// of the file (or the working directory, for a flag) that set it, as every path key is; so a
// run behaves the same from any working directory and in the embedded mode's children.
std::string model_spec(const config::Config& cfg);

class Pipeline {
 public:
  // Steps 1-6 above for the run `cfg` describes. Throws yeto::Error with the loader's exit
  // codes (plugin_*), not_found for a missing model, bad_input naming the file/key otherwise.
  static std::unique_ptr<Pipeline> open(const config::Config& cfg, const OpenOptions& options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  plugin::Instance& plugin();
  const plugin::LoadedPlugin& loaded_plugin() const;
  const io::DiffusersRepo& repo() const;
  const std::filesystem::path& model_dir() const;
  // The model as the run named it and the immutable commit it resolved to ("" for a local dir).
  const std::string& model_id() const;
  const std::string& model_commit() const;
  const nlohmann::json& plan() const;

  // Components by model_index name; nullptr when the pipeline has none of that name.
  const yeto_component_v1* component(const std::string& name) const;
  std::vector<std::string> component_names() const;
  // The denoiser components present, in the canonical order transformer, transformer_2,
  // unet, model.
  std::vector<std::string> denoisers() const;
  // The training scheduler (the repository's scheduler/ component), shared with sampling.
  std::shared_ptr<schedulers::Scheduler> scheduler() const;

  // SHA-256 of each component's weight files and config, for cache fingerprints and
  // provenance: {name: "hex"}.
  std::map<std::string, std::string> component_hashes() const;
  // Adds model id/commit, component hashes and the plugin record to a provenance record.
  void record_provenance(io::Provenance& provenance) const;

 private:
  Pipeline();
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace yeto::pipeline
