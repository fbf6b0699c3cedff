// The base of a Diffusers-style family with one trained denoiser: the hooks every such family
// writes the same way, from a short description. It prepares the denoiser (placement, LoRA or
// full tuning), lists its trainable tensors under PEFT names, encodes images with the host's VAE
// and the family's latent normalisation, turns encode_conditioning's prompts into the family's
// conditioning, and aligns prediction and target of one layout. What stays in the family: the
// network (denoiser_module), its text encoders (conditioning), its run settings (prepare_run),
// packing and keywords (denoiser_kwargs, denoise), generate, and any hook it overrides.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"

namespace yeto::family {

struct FamilyDescription {
  std::string plugin;                    // "flux": the prefix of the hooks' errors
  std::string model;                     // "FLUX.1": named when media is not an image batch
  std::string denoiser = "transformer";  // the pipeline component the run trains
  double scaling_factor = 0.18215;       // latent normalisation when the repository has no VAE
  double shift_factor = 0.0;
  TargetResolver lora_targets;           // lora.targets -> layer patterns
};

class DiffusersFamily : public sdk::Plugin {
 public:
  explicit DiffusersFamily(FamilyDescription description);

  // Places the denoiser by the options' device and precision, tunes it (LoRA or full), then
  // prepare_run(options).
  void prepare(const std::string& options_json) override;
  // "<denoiser>.<layer>.lora_A.weight" ... (or every parameter with full tuning), sorted.
  NamedTensors trainable_parameters() override;
  // An image batch [B, 3, H, W] in [-1, 1] -> "latents" through the host's AutoencoderKL:
  // (z - shift_factor) * scaling_factor, the repository's factors (the description's without a VAE).
  NamedTensors encode_media(const NamedTensors& media, const std::string& options_json) override;
  // The prompts array -> conditioning(prompts).
  NamedTensors encode_conditioning(const std::string& prompts_json, const NamedTensors& extra) override;
  // Prediction and target in one layout, as float32 (refused naming both shapes otherwise).
  std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                          const std::string& step_json) override;

 protected:
  // The trained denoiser's module (the family's component behind description().denoiser).
  virtual torch::nn::Module& denoiser_module() = 0;
  // The family's text conditioning of a batch of prompts (e.g. prompt_embeds, pooled_prompt_embeds).
  virtual NamedTensors conditioning(const std::vector<std::string>& prompts) = 0;
  // The family's own run settings, read at prepare after the denoiser is tuned.
  virtual void prepare_run(const nlohmann::json& options) { (void)options; }

  const FamilyDescription& description() const { return description_; }

  PipelineConfigs configs_;  // read it in load_pipeline: configs_.read(model_dir, plan)
  std::string tuning_ = "lora";

 private:
  FamilyDescription description_;
};

}  // namespace yeto::family
