// The host API table (yeto_host_api) a plugin calls back into: logging, tensor handles of
// the process's LibTorch, DLPack, configuration values, named RNG streams, components.
// Declared torch-free; implemented in host_api.cpp (library yeto_plugin_torch).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "plugin/components.hpp"
#include "yeto/plugin.h"

namespace yeto::plugin {

struct HostApiOptions {
  std::string plugin_name;          // tags the plugin's log lines
  nlohmann::json config_values;     // {key: value}, what config_get answers
  std::uint64_t seed = 0;           // diffusion.seed
  std::int64_t logical_rank = 0;    // streams differ per (learner, island rank)
  ComponentRegistry* components = nullptr;  // nullptr: ComponentRegistry::global()
};

// {key: value} of every key of a resolved configuration.
nlohmann::json config_values(const config::Config& cfg);

// A new host API table; it lives for the process (plugins keep the pointer).
const yeto_host_api* make_host_api(HostApiOptions options);

// The seed of stream `name`: SHA-256 of (seed, logical rank, name), first 8 bytes.
std::uint64_t stream_seed(std::uint64_t seed, std::int64_t logical_rank, const std::string& name);

}  // namespace yeto::plugin
