// The base of a Diffusers-style family: the hooks every such family writes the same way, from
// its family description (yeto/family/description.hpp). It prepares the denoiser (placement, LoRA or
// full tuning), lists its trainable tensors under PEFT names, encodes images with the host's VAE
// and the family's latent normalisation, turns encode_conditioning's prompts into the family's
// conditioning, and aligns prediction and target of one layout. What stays in the family: the
// network (its component classes), its text encoders (conditioning), its run settings (prepare_run),
// packing and keywords (denoiser_kwargs, denoise), generate, and any hook it overrides.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/family/description.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"

namespace yeto::family {

class DiffusersFamily : public sdk::Plugin {
 public:
  // The family's description, from its family file (it outlives the plugin: a static).
  explicit DiffusersFamily(const FamilyDescription& description);

  // model_index.json -> plan(model_dir, index) (its std::invalid_argument fails naming the key),
  // then configs_.read (vae/config.json and scheduler_config.json where the plan has them), then
  // pipeline_loaded(model_dir, index, plan).
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) override;
  // The description's presets.
  std::string presets() override;

  // Places each denoiser by the options' device and precision, tunes it (LoRA or full; LoRA
  // seeded from lora_seed(denoiser)), reads the run's model.max_sequence_length (0: the
  // pipeline's default) into max_sequence_length_, then prepare_run(options).
  void prepare(const std::string& options_json) override;
  // "<denoiser>.<layer>.lora_A.weight" ... of every denoiser (or every parameter with full
  // tuning), sorted.
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
  // The trained denoisers by pipeline component, each a ModuleComponent this plugin built.
  // Default: the description's denoiser. A family with experts (Wan 2.2) lists them all.
  virtual std::vector<std::string> denoisers() const { return {description_.denoiser()}; }
  // The host rng stream a denoiser's LoRA initialisation draws from (rng_seed(name)).
  virtual std::string lora_seed(const std::string& denoiser) const {
    (void)denoiser;
    return "lora_init";
  }
  // The family's text conditioning of a batch of prompts (e.g. prompt_embeds, pooled_prompt_embeds).
  virtual NamedTensors conditioning(const std::vector<std::string>& prompts) = 0;
  // The family's own run settings, read at prepare after the denoiser is tuned.
  virtual void prepare_run(const nlohmann::json& options) { (void)options; }
  // The pipeline's text length: the description's max_sequence_length.default; a family whose
  // default depends on the repository (PixArt-Alpha 120, PixArt-Sigma 300) overrides it.
  virtual std::int64_t default_max_sequence_length() const { return description_.max_sequence_length(); }
  // The plan of a repository; throws std::invalid_argument. Default: family_description().plan.
  virtual nlohmann::json plan(const std::string& model_dir, const nlohmann::json& model_index) {
    return description_.plan(model_dir, model_index);
  }
  // What the family reads from the repository once the plan is made (tokenizer lengths, ...).
  virtual void pipeline_loaded(const std::string& model_dir, const nlohmann::json& model_index,
                               const nlohmann::json& plan) {
    (void)model_dir, (void)model_index, (void)plan;
  }

  // (Not description(): inside a family class that name would hide the family's own
  // description() function, and a constructor passing it to this base would read garbage.)
  const FamilyDescription& family_description() const { return description_; }

  // 2^(len(block_out_channels) - 1) of the repository's VAE, 8 without one.
  std::int64_t vae_scale_factor() const { return configs_.vae_scale_factor(); }
  // The geometry of an image generation: the prompts' count, the image size (the request's
  // height and width, else the denoiser's native sample_size, in latent pixels, times the VAE
  // scale factor; both must be multiples of the VAE scale factor x patch_size, refused as
  // generation_size says) and the VAE scale factor.
  struct ImageGrid {
    std::int64_t batch = 0, height = 0, width = 0, vae_scale_factor = 8;
  };
  ImageGrid image_grid(const GenerateSettings& request, std::int64_t sample_size, std::int64_t patch_size) const;

  // Final latents -> images [B, 3, H, W] in [0, 1] through the host's VAE with the repository's
  // latent normalisation (family::decode_images).
  at::Tensor decode_images(const at::Tensor& latents, Trace& record);

  PipelineConfigs configs_;  // read by load_pipeline
  std::string tuning_ = "lora";
  // The text length conditioning() encodes to (the description's default until prepare).
  std::int64_t max_sequence_length_ = 0;

 private:
  const FamilyDescription& description_;
};

}  // namespace yeto::family
