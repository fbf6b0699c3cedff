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
