// The host API table (yeto_host_api) a plugin calls back into: logging, tensor handles of
// the process's LibTorch, DLPack, configuration values, named RNG streams, components.
// Declared torch-free; implemented in host_api.cpp (library yeto_plugin_torch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "plugin/components.hpp"
#include "yeto/plugin.h"

namespace yeto::plugin {

// What yeto_host_api.component_get answers from: a loaded pipeline's components by their
// model_index.json name. Implemented by pipeline::Pipeline.
class ComponentSource {
 public:
  virtual ~ComponentSource() = default;
  // nullptr when there is no component of that name.
  virtual const yeto_component_v1* find_component(const std::string& name) const = 0;
  virtual std::vector<std::string> component_names() const = 0;
  // Why a component the pipeline does not have is absent ("" when the name is simply not one
  // of its components): what component_get tells a hook that asks for it.
  virtual std::string missing_reason(const std::string& /*name*/) const { return ""; }
};

// The island's sharding of the frozen base (train.shard = "fsdp") as the plugin reaches it
// through yeto_host_api.shard_group / shard_all_gather: the learner hands one to the pipeline
// (pipeline::OpenOptions::shard_group) over its island's collectives.
class ShardGroup {
 public:
  virtual ~ShardGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // `shard` (uint8, n bytes) of every rank into `out` (uint8, n * world_size bytes); both
  // borrowed handles. Throws yeto::Error when a rank fails.
  virtual void all_gather(yeto_tensor shard, yeto_tensor out) = 0;
};

struct HostApiOptions {
  std::string plugin_name;          // tags the plugin's log lines
  nlohmann::json config_values;     // {key: value}, what config_get answers
  std::uint64_t seed = 0;           // diffusion.seed
  std::int64_t logical_rank = 0;    // streams differ per (learner, island rank), except lora_init*
  ComponentRegistry* components = nullptr;  // nullptr: ComponentRegistry::global()
  const ComponentSource* pipeline = nullptr;  // component_get answers from it; nullptr: none
  std::shared_ptr<ShardGroup> shard_group;    // shard_group answers from it; nullptr: whole weights
};

// {key: value} of every key of a resolved configuration.
nlohmann::json config_values(const config::Config& cfg);

// A new host API table; it lives for the process (plugins keep the pointer).
const yeto_host_api* make_host_api(HostApiOptions options);

// A plugin keeps the table its entry point received for the life of the process, so a
// later pipeline of the same plugin rebinds that table instead of handing over a new one:
// bind_host_api makes `options` (config values, seed, rank, pipeline) current for `api`
// until unbind_host_api(api, options.pipeline) restores the binding that was current
// before. `api` must come from make_host_api.
void bind_host_api(const yeto_host_api* api, HostApiOptions options);
void unbind_host_api(const yeto_host_api* api, const ComponentSource* pipeline);

// The seed of stream `name`: SHA-256 of (seed, logical rank, name), first 8 bytes.
std::uint64_t stream_seed(std::uint64_t seed, std::int64_t logical_rank, const std::string& name);

}  // namespace yeto::plugin
