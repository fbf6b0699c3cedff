// One plugin instance as the host drives it: every hook as a C++ call on at::Tensor, with
// the plugin's status + message turned into a yeto::Error that names the plugin and hook.
// Include only where LibTorch is already in use (the learner, sampler, tests).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "plugin/components.hpp"
#include "plugin/loader.hpp"

namespace yeto::plugin {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Instance {
 public:
  // Calls the plugin's create(config_json).
  Instance(const LoadedPlugin& plugin, const std::string& config_json);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const LoadedPlugin& plugin() const { return plugin_; }
  bool has(std::uint64_t capability) const { return (plugin_.descriptor.capabilities & capability) != 0; }

  void register_components(ComponentRegistry& registry);
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json);
  void prepare(const std::string& options_json);
  NamedTensors trainable_parameters();
  NamedTensors encode_media(const NamedTensors& media, const std::string& options_json);
  NamedTensors encode_conditioning(const std::string& prompts_json, const NamedTensors& extra);
  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& step_json);
  at::Tensor denoise(const NamedTensors& inputs, const std::string& step_json);
  std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                          const std::string& step_json);
  // Returns the loss and writes the plugin's metrics JSON into metrics_json.
  at::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics_json);
  void save_artifact(const std::string& dir, const std::string& metadata_json);
  std::string load_artifact(const std::string& dir);
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs);
  // ABI 1.1 (capability "presets"): the plugin's init-model presets as JSON text.
  std::string presets();

 private:
  const LoadedPlugin& plugin_;
  void* instance_ = nullptr;
};

// Component calls on at::Tensor.
NamedTensors component_forward(const yeto_component_v1& c, const NamedTensors& inputs,
                               const std::string& options_json = "{}");
NamedTensors component_parameters(const yeto_component_v1& c);
// options_json: {"strict": bool}.
void component_load_weights(const yeto_component_v1& c, const NamedTensors& weights,
                            const std::string& options_json = R"({"strict": true})");

// The component's typed VAE service (ABI 1.2 tables), nullptr when it offers none.
const yeto_vae_service* component_vae(const yeto_component_v1& c);
// Calls of a VAE service; a failure throws Error naming the component's class.
std::pair<at::Tensor, at::Tensor> vae_encode(const yeto_component_v1& c, const at::Tensor& pixels);
at::Tensor vae_decode(const yeto_component_v1& c, const at::Tensor& latents, const NamedTensors& extra = {});

}  // namespace yeto::plugin
