// The bridge between the host's two component registries:
//   - io::ComponentRegistry: the host's built-ins (AutoencoderKL, CLIP/T5 text encoders,
//     tokenizers, schedulers) as C++ objects;
//   - plugin::ComponentRegistry: classes behind the C ABI (yeto_component_v1), which is what
//     plugins construct through yeto_host_api.component_create and receive from
//     component_get.
// Every host built-in is offered through the C ABI (forward() answers the methods listed in
// docs/PLUGIN_SDK.md, "Host components"), and every plugin-registered class becomes visible
// in io::ComponentRegistry under the kind the plan gives it. Torch-free declarations.
#pragma once

#include <memory>
#include <string>

#include "io/component_registry.hpp"
#include "plugin/components.hpp"
#include "yeto/plugin.h"

namespace yeto::pipeline {

// Registers the host's built-in component classes into io::ComponentRegistry::global() (once
// per process; what yeto-host's main does before any command, for library users and tests).
void ensure_builtin_components();

// A C component table over a host built-in (AutoencoderKL, CLIPTextModel(WithProjection),
// T5EncoderModel, UMT5EncoderModel, a tokenizer or a scheduler). The caller owns the table
// (destroy()); the table shares ownership of `component`.
const yeto_component_v1* wrap_host_component(std::shared_ptr<io::Component> component);
// The host object behind a table made by wrap_host_component; nullptr for any other table.
std::shared_ptr<io::Component> host_component_of(const yeto_component_v1* table);

// Offers every class of `host` that `target` does not have yet through the C ABI, with
// origin "host": its constructor parses config_json and, given a component folder, loads the
// folder (weights, tokenizer files, scheduler config) as the host does.
void register_host_classes(plugin::ComponentRegistry& target, const io::ComponentRegistry& host);

// Makes a plugin-registered class visible in `host` (kind "denoiser", "vae", ...): its io
// factory constructs the class through `source` and yields an io::Component that owns the C
// table (plugin_component_of gets it back). Host classes of the same name are left alone.
void expose_plugin_class(io::ComponentRegistry& host, const std::string& class_name, const std::string& kind,
                         plugin::ComponentRegistry& source);

// Installs the model class loader (plugin/class_loader.hpp): for a model (and run config) it loads
// the plugin that serves it (model.adapter, else the built-in alias's plugin, else a plugin
// whose manifest lists the model among its aliases) through the trusted loader, registers its
// classes and exposes them under the kinds its plan gives them, so `yeto-host inspect` shows
// e.g. FluxTransformer2DModel as served by plugin flux. A plugin that cannot be loaded is
// reported as a warning; its classes then show as not implemented.
void install_plugin_class_loader();

// The io::Component made by an exposed plugin class's factory.
class PluginComponent : public io::Component {
 public:
  PluginComponent(std::string class_name, std::string origin, const yeto_component_v1* table);
  ~PluginComponent() override;
  PluginComponent(const PluginComponent&) = delete;
  PluginComponent& operator=(const PluginComponent&) = delete;
  std::string class_name() const override { return class_name_; }
  const std::string& origin() const { return origin_; }
  const yeto_component_v1* table() const { return table_; }

 private:
  std::string class_name_;
  std::string origin_;
  const yeto_component_v1* table_;
};

// The kind of a component from its model_index name when the plan gives none:
// transformer*, unet*, prior, model -> "denoiser"; vae* -> "vae"; text_encoder* ->
// "text_encoder"; tokenizer* -> "tokenizer"; scheduler* -> "scheduler"; else the name.
std::string kind_for_component_name(const std::string& name);

}  // namespace yeto::pipeline
