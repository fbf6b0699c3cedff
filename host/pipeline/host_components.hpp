// Host components behind the C ABI, and the one component registry's host half:
//   - every host built-in (AutoencoderKL, CLIP/T5 text encoders, tokenizers, schedulers, made
//     by the factories its area puts into io::ComponentRegistry, the host's internal catalogue)
//     is offered in plugin::ComponentRegistry, the process's one registry, through the same C
//     constructor table as a plugin's classes (origin "host", with its kind);
//   - a host component's table carries the typed service of its kind (ABI 1.2; the ABI 1.1
//     forward() methods of docs/PLUGIN_SDK.md stay for older plugins).
// Torch-free declarations.
#pragma once

#include <memory>
#include <string>

#include "io/component_registry.hpp"
#include "plugin/components.hpp"
#include "yeto/plugin.h"

namespace yeto::config {
class Config;
}
namespace yeto::io {
class DiffusersRepo;
}

namespace yeto::pipeline {

// Puts the host's built-in component classes into io::ComponentRegistry::global() (once per
// process) and offers them in plugin::ComponentRegistry::global(): what yeto-host's main does
// before any command, and Pipeline::open for library users and tests.
void ensure_builtin_components();

// A C component table over a host built-in (AutoencoderKL, CLIPTextModel(WithProjection),
// T5EncoderModel, UMT5EncoderModel, LTX-2's audio VAE and vocoders, a tokenizer or a scheduler). The caller owns the table
// (destroy()); the table shares ownership of `component`.
const yeto_component_v1* wrap_host_component(std::shared_ptr<io::Component> component);
// The host object behind a table made by wrap_host_component; nullptr for any other table.
std::shared_ptr<io::Component> host_component_of(const yeto_component_v1* table);

// Offers every class of `host` that `target` does not have yet through the C ABI, with
// origin "host" and its kind: its constructor parses config_json and, given a component folder,
// loads the folder (weights, tokenizer files, scheduler config) as the host does.
void register_host_classes(plugin::ComponentRegistry& target, const io::ComponentRegistry& host);

// For a model (and run config) that a command looks at without opening it (`inspect`): loads the
// plugin that serves it (the one the run names, else the one select_plugin chooses from the
// repository) through the trusted loader, registers its classes and exposes them under the
// kinds its plan gives them, so `yeto-host inspect` shows e.g. FluxTransformer2DModel as served
// by plugin flux. A plugin that cannot be loaded is reported as a warning; its classes then
// show as not implemented.
void load_model_classes(const config::Config& cfg, const io::DiffusersRepo& repo);

// The kind of a component from its model_index name when the plan gives none:
// transformer*, unet*, prior, model -> "denoiser"; vae* -> "vae"; text_encoder* ->
// "text_encoder"; tokenizer* -> "tokenizer"; scheduler* -> "scheduler"; else the name.
std::string kind_for_component_name(const std::string& name);

}  // namespace yeto::pipeline
