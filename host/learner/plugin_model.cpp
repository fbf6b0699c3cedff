#include <ATen/ATen.h>

#include "core/error.hpp"
#include "learner/model.hpp"
#include "plugin/instance.hpp"
#include "schedulers/scheduler.hpp"

namespace yeto::learner {
namespace {

std::string step_json(const std::string& denoiser) {
  return nlohmann::json{{"denoiser", denoiser}, {"training", true}}.dump();
}

class PluginModel final : public TrainModel {
 public:
  PluginModel(plugin::Instance& instance, std::shared_ptr<schedulers::Scheduler> scheduler,
              std::vector<std::string> denoisers, std::optional<double> boundary_ratio)
      : instance_(instance), scheduler_(std::move(scheduler)), denoisers_(std::move(denoisers)) {
    if (instance_.has(YETO_CAP_LOSS_STEP)) return;  // the plugin computes the whole loss
    if (!scheduler_) throw Error("the model has no scheduler component; the learner needs one to build training targets",
                                 ExitCode::bad_input);
    if (denoisers_.empty())
      throw Error("the model has no denoiser component (transformer, transformer_2, unet or model)",
                  ExitCode::bad_input);
    if (denoisers_.size() > 1) {
      if (!boundary_ratio)
        throw Error("the pipeline has " + std::to_string(denoisers_.size()) +
                        " denoisers but declares no boundary_ratio to route timesteps between them",
                    ExitCode::bad_input);
      boundary_ = *boundary_ratio * static_cast<double>(scheduler_->num_train_timesteps());
    }
  }

  NamedTensors trainable() override { return instance_.trainable_parameters(); }
  const std::vector<std::string>& denoisers() const override { return denoisers_; }
  std::optional<double> boundary_timestep() const override { return boundary_; }
  const schedulers::Scheduler& scheduler() const override {
    if (!scheduler_) throw Error(describe() + ": the model has no scheduler component", ExitCode::bad_input);
    return *scheduler_;
  }
  bool computes_loss() const override { return instance_.has(YETO_CAP_LOSS_STEP); }
  at::Tensor loss_step(const nlohmann::json& rows, const NamedTensors& batch, nlohmann::json& metrics) override {
    std::string text;
    at::Tensor loss = instance_.loss_step(rows.dump(), batch, text);
    const std::string where = describe() + " loss_step";
    if (!loss.defined() || loss.numel() != 1 || !loss.is_floating_point())
      throw Error(where + ": the loss must be one floating-point value, got " +
                      (loss.defined() ? c10::str(loss.sizes(), " ", loss.scalar_type()) : std::string("none")),
                  ExitCode::bad_input);
    metrics = text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text, nullptr, false);
    if (!metrics.is_object())
      throw Error(where + ": metrics must be a JSON object, got: " + text.substr(0, 200), ExitCode::bad_input);
    for (const auto& [name, v] : metrics.items())
      if (!v.is_number())
        throw Error(where + ": metric '" + name + "' must be a number, got " + v.dump(), ExitCode::bad_input);
    return loss.reshape({});
  }

  at::Tensor encode_media(const at::Tensor& pixel_values, bool sample, std::uint64_t seed) override {
    if (!instance_.has(YETO_CAP_ENCODE_MEDIA))
      throw Error(describe() + " does not encode raw media; train from cached latents (yeto-host cache)",
                  ExitCode::bad_input);
    const auto out = instance_.encode_media({{"pixel_values", pixel_values}},
                                            nlohmann::json{{"sample", sample}, {"seed", seed}}.dump());
    for (const auto& [name, t] : out)
      if (name == "latents") return t;
    throw Error(describe() + ": encode_media returned no 'latents'");
  }

  NamedTensors encode_conditioning(const std::vector<std::string>& prompts, const NamedTensors& extra) override {
    if (!instance_.has(YETO_CAP_ENCODE_CONDITIONING))
      throw Error(describe() + " does not encode prompts; train from cached text embeddings (yeto-host cache)",
                  ExitCode::bad_input);
    return instance_.encode_conditioning(nlohmann::json(prompts).dump(), extra);
  }

  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& denoiser) override {
    return instance_.denoiser_kwargs(batch, step_json(denoiser));
  }
  at::Tensor denoise(const NamedTensors& inputs, const std::string& denoiser) override {
    return instance_.denoise(inputs, step_json(denoiser));
  }
  std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                          const std::string& denoiser) override {
    if (!instance_.has(YETO_CAP_ALIGN)) return {prediction, target};
    return instance_.align(prediction, target, step_json(denoiser));
  }
  bool can_generate() const override { return instance_.has(YETO_CAP_GENERATE); }
  NamedTensors generate(const nlohmann::json& request) override {
    at::NoGradGuard no_grad;
    return instance_.generate(request.dump(), {});
  }
  std::string describe() const override {
    return "plugin " + instance_.plugin().manifest.name + " " + instance_.plugin().manifest.version;
  }

 private:
  plugin::Instance& instance_;
  std::shared_ptr<schedulers::Scheduler> scheduler_;
  std::vector<std::string> denoisers_;
  std::optional<double> boundary_;
};

}  // namespace

at::Tensor TrainModel::loss_step(const nlohmann::json& /*rows*/, const NamedTensors& /*batch*/,
                                 nlohmann::json& /*metrics*/) {
  throw Error(describe() + " does not compute its own loss", ExitCode::failure);
}

NamedTensors TrainModel::generate(const nlohmann::json& /*request*/) {
  throw Error(describe() + " does not generate", ExitCode::not_available);
}

std::unique_ptr<TrainModel> make_plugin_model(plugin::Instance& instance,
                                              std::shared_ptr<schedulers::Scheduler> scheduler,
                                              std::vector<std::string> denoisers,
                                              std::optional<double> boundary_ratio) {
  return std::make_unique<PluginModel>(instance, std::move(scheduler), std::move(denoisers), boundary_ratio);
}

std::optional<double> boundary_ratio_of(const nlohmann::json& plan, const nlohmann::json& model_index) {
  for (const auto* j : {&plan, &model_index})
    if (j->is_object() && j->contains("boundary_ratio") && (*j)["boundary_ratio"].is_number())
      return (*j)["boundary_ratio"].get<double>();
  return std::nullopt;
}

}  // namespace yeto::learner
