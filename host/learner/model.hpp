// What the generic learner needs from a model: the trainable tensors, the scheduler, and the
// family's hooks, or, for a model that computes its whole loss (a plugin with loss_step), the
// trainable tensors and that one call. PluginModel serves them from a plugin instance (the only
// implementation the host uses); everything family-specific stays behind these calls.
// Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::plugin {
class Instance;
}
namespace yeto::schedulers {
class Scheduler;
}

namespace yeto::learner {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  // Canonical names, float32, requires_grad, in canonical order.
  virtual NamedTensors trainable() = 0;
  // Denoiser component names in canonical order (transformer, transformer_2, unet, model).
  virtual const std::vector<std::string>& denoisers() const = 0;
  // Timestep (in the scheduler's timestep units) at which a two-denoiser pipeline switches
  // from the first (high-noise) to the second denoiser; nullopt for one denoiser.
  virtual std::optional<double> boundary_timestep() const = 0;
  virtual const schedulers::Scheduler& scheduler() const = 0;
  // Raw media in [-1, 1] to training latents (normalised, scheduler layout).
  virtual at::Tensor encode_media(const at::Tensor& pixel_values, bool sample, std::uint64_t seed) = 0;
  virtual NamedTensors encode_conditioning(const std::vector<std::string>& prompts, const NamedTensors& extra) = 0;
  virtual NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& denoiser) = 0;
  virtual at::Tensor denoise(const NamedTensors& inputs, const std::string& denoiser) = 0;
  virtual std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                                  const std::string& denoiser) = 0;
  // True when the model computes its whole training loss (loss_step): the learner then hands it
  // each batch's rows and tensors, and never encodes, noises, denoises or aligns for it.
  virtual bool computes_loss() const { return false; }
  // The loss of one batch, a scalar with its autograd graph; `metrics` receives the model's own
  // scalar metrics. rows: one JSON object per row (docs/PLUGIN_SDK.md, loss_step).
  virtual at::Tensor loss_step(const nlohmann::json& rows, const NamedTensors& batch, nlohmann::json& metrics);
  // True when the model can generate (a plugin with capability generate): the learner renders
  // validation.prompts with the weights it is training.
  virtual bool can_generate() const { return false; }
  // One generation (docs/PLUGIN_SDK.md, generate: request JSON with prompts, seed, steps,
  // guidance, height, width); returns the plugin's outputs ("images" [B, 3, H, W] in [0, 1], or
  // "video" [B, 3, F, H, W]). Runs without autograd.
  virtual NamedTensors generate(const nlohmann::json& request);
  // Short description for logs and provenance ("plugin flux 0.1.0").
  virtual std::string describe() const = 0;
};

// The hooks of a prepared plugin instance plus the repository's training scheduler (none is
// needed, nor a denoiser, when the plugin has loss_step).
// `boundary_ratio` (Wan 2.2's model_index.json key, or the plugin plan's) times
// num_train_timesteps gives the boundary timestep of a two-denoiser pipeline.
std::unique_ptr<TrainModel> make_plugin_model(plugin::Instance& instance,
                                              std::shared_ptr<schedulers::Scheduler> scheduler,
                                              std::vector<std::string> denoisers,
                                              std::optional<double> boundary_ratio);

// The boundary ratio a pipeline declares: plan["boundary_ratio"], else model_index.json's.
std::optional<double> boundary_ratio_of(const nlohmann::json& plan, const nlohmann::json& model_index);

}  // namespace yeto::learner
