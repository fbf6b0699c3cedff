// A plugin on the installed family kit: a component class whose model is a LoRA-capable
// yeto::nn::Linear, prepared and tuned through yeto::family (options parsing, LoRA targets,
// PEFT trainable names, weights by Diffusers name).
#include <torch/torch.h>

#include <yeto/family/family.hpp>
#include <yeto/nn/linear.hpp>
#include <yeto/plugin.hpp>

#include <memory>
#include <string>

namespace {

using yeto::sdk::NamedTensors;

struct ProbeModelImpl : torch::nn::Module {
  explicit ProbeModelImpl(std::int64_t channels) {
    proj_in = register_module("proj_in", yeto::nn::Linear(channels, channels));
    proj_out = register_module("proj_out", yeto::nn::Linear(channels, channels));
  }
  torch::Tensor forward(const torch::Tensor& x) { return proj_out->forward(torch::silu(proj_in->forward(x))); }
  yeto::nn::Linear proj_in{nullptr};
  yeto::nn::Linear proj_out{nullptr};
};
TORCH_MODULE(ProbeModel);

class ProbeComponent : public yeto::sdk::Component {
 public:
  ProbeComponent(const std::string& config_json, const std::string& dir)
      : model_(yeto::family::parse_json(config_json, dir.empty() ? "KitProbeModel config" : dir + "/config.json")
                   .value("channels", 4)) {}
  NamedTensors forward(const NamedTensors& in, const std::string&) override {
    return {{"sample", model_->forward(yeto::sdk::get(in, "hidden_states"))}};
  }
  NamedTensors parameters() override { return yeto::family::module_tensors(*model_); }
  void load_weights(const NamedTensors& weights, bool strict) override {
    yeto::family::load_module_weights(*model_, weights, strict, "KitProbeModel", "a KitProbeModel checkpoint");
  }
  ProbeModel& model() { return model_; }

 private:
  ProbeModel model_;
};

class KitProbePlugin : public yeto::sdk::Plugin {
 public:
  // The run configuration, at create: lora.r of the run is the default rank of prepare.
  void configure(const std::string& config_json) override {
    const auto config = yeto::family::parse_json(config_json, "run configuration");
    default_rank_ = config.value("lora.r", std::int64_t{4});
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<ProbeComponent>("KitProbeModel");
  }

  // One component, the denoiser, built from the repository's transformer/config.json.
  std::string load_pipeline(const std::string& model_dir, const std::string&) override {
    return nlohmann::json{{"components", {{"transformer", {{"class", "KitProbeModel"}, {"dir", model_dir + "/transformer"}}}}}}
        .dump();
  }

  void prepare(const std::string& options_json) override {
    auto options = yeto::family::parse_json(options_json, "prepare options");
    if (!options.contains("lora")) options["lora"] = {{"r", default_rank_}};
    denoiser_ = std::make_unique<ProbeComponent>(options.dump(), "");
    tuning_ = yeto::family::parse_tuning(options);
    yeto::family::TuningSpec spec;
    spec.resolve_targets = [](const nlohmann::json& targets) {
      return yeto::family::resolve_lora_targets(targets, {{"proj_in"}, {"proj_in"}});
    };
    yeto::family::prepare_tuning(*denoiser_->model(), tuning_, options, spec);
  }

  NamedTensors trainable_parameters() override {
    return yeto::family::trainable_parameters({{"transformer", denoiser_->model().get()}}, tuning_);
  }

  torch::Tensor denoise(const NamedTensors& inputs, const std::string&) override {
    return denoiser_->model()->forward(yeto::sdk::get(inputs, "hidden_states"));
  }

 private:
  std::unique_ptr<ProbeComponent> denoiser_;
  std::string tuning_ = "lora";
  std::int64_t default_rank_ = 4;
};

}  // namespace

YETO_PLUGIN(KitProbePlugin)
