// The shared model components as registry entries: AutoencoderKL (kind "vae"), CLIPTextModel,
// CLIPTextModelWithProjection, T5EncoderModel and UMT5EncoderModel (kind "text_encoder").
// A factory builds the module from the component's config.json and, when the folder holds
// weights, loads them by name (streaming, one tensor at a time).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/component_registry.hpp"
#include "io/module_component.hpp"
#include "io/weight_source.hpp"
#include "models/autoencoder_kl.hpp"
#include "models/clip_text.hpp"
#include "models/ltx2_audio.hpp"
#include "models/t5_encoder.hpp"
#include "yeto/nn/state_dict.hpp"

namespace yeto::models {

class AutoencoderKLComponent : public io::ModuleComponent {
 public:
  explicit AutoencoderKLComponent(AutoencoderKL m) : vae(std::move(m)) {}
  std::string class_name() const override { return "AutoencoderKL"; }
  torch::nn::Module& module() override { return *vae; }
  AutoencoderKL vae;
};

class CLIPTextComponent : public io::ModuleComponent {
 public:
  explicit CLIPTextComponent(CLIPTextModel m) : model(std::move(m)) {}
  std::string class_name() const override {
    return model->with_projection() ? "CLIPTextModelWithProjection" : "CLIPTextModel";
  }
  torch::nn::Module& module() override { return *model; }
  CLIPTextModel model;
};

class T5EncoderComponent : public io::ModuleComponent {
 public:
  explicit T5EncoderComponent(T5EncoderModel m) : model(std::move(m)) {}
  std::string class_name() const override {
    return model->config().per_layer_position_bias ? "UMT5EncoderModel" : "T5EncoderModel";
  }
  torch::nn::Module& module() override { return *model; }
  T5EncoderModel model;
};

// LTX-2's audio VAE (kind "audio_vae"): log-mel <-> latents [B, 8, T, 16].
class LTX2AudioVaeComponent : public io::ModuleComponent {
 public:
  explicit LTX2AudioVaeComponent(AutoencoderKLLTX2Audio m) : vae(std::move(m)) {}
  std::string class_name() const override { return "AutoencoderKLLTX2Audio"; }
  torch::nn::Module& module() override { return *vae; }
  AutoencoderKLLTX2Audio vae;
};

// An LTX-2 vocoder (kind "vocoder"): LTX2Vocoder (mel -> 24 kHz) or LTX2VocoderWithBWE (mel ->
// 48 kHz); exactly one of the two is set.
class LTX2VocoderComponent : public io::ModuleComponent {
 public:
  explicit LTX2VocoderComponent(LTX2Vocoder m) : plain(std::move(m)) {}
  explicit LTX2VocoderComponent(LTX2VocoderWithBWE m) : bwe(std::move(m)) {}
  std::string class_name() const override { return bwe ? "LTX2VocoderWithBWE" : "LTX2Vocoder"; }
  torch::nn::Module& module() override { return bwe ? static_cast<torch::nn::Module&>(*bwe) : *plain; }
  // Mel [B, C, frames, mel_bins] -> waveform [B, out_channels, samples]; `inter` as the model's.
  at::Tensor forward(const at::Tensor& mel, Intermediates* inter = nullptr) {
    return bwe ? bwe->forward(mel, inter) : plain->forward(mel, inter);
  }
  std::int64_t sampling_rate() const {
    return bwe ? bwe->config().output_sampling_rate : plain->config().output_sampling_rate;
  }
  LTX2Vocoder plain{nullptr};
  LTX2VocoderWithBWE bwe{nullptr};
};

// The classes this area provides, sorted.
std::vector<std::string> model_component_classes();

// Builds the module of `class_name` from its config (no weights loaded). Throws yeto::Error
// (bad_input) for a class this area does not provide or a bad config.
std::shared_ptr<io::ModuleComponent> build_model_component(const std::string& class_name,
                                                           const nlohmann::json& config,
                                                           const std::string& where = "config.json");

// How checkpoints of a class map onto its module: legacy names, tied duplicates, buffers that
// upstream files carry but the module computes.
nn::LoadOptions checkpoint_rules(const std::string& class_name);

// Loads `source` into `module` under the class's rules. Names and shapes are checked from the
// headers before any tensor is read; with strict, nothing is copied when anything is missing,
// unexpected or of the wrong shape (yeto::Error bad_input naming them).
nn::LoadReport load_component_weights(torch::nn::Module& module, const std::string& class_name,
                                      const io::WeightSource& source, bool strict = true);

void register_model_components(io::ComponentRegistry& registry);

}  // namespace yeto::models
