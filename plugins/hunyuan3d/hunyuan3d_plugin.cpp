// The Hunyuan3D-2.1 shape family plugin, written against the SDK only: the HunYuanDiTPlain
// component class (registered under its class name and its upstream module path, the name
// recorded reference cases use).
//
// The component's forward takes the upstream argument names: `x` [B, N, C] latent tokens, `t`
// [B] flow time in [0, 1] and the image tokens as `contexts.main` (or `contexts`) [B, M, D]. Its
// options may say {"train": true}: the call then runs in training mode (the MoE gates' auxiliary
// losses attach their gradient and are returned as `moe_aux_loss.<gate path>`).
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "hunyuan3d_dit.hpp"
#include "hunyuan3d_sampler.hpp"
#include "hunyuan3d_shapevae.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/sampling.hpp"

namespace yeto::hunyuan3d {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

constexpr const char* kDiT = "HunYuanDiTPlain";
constexpr const char* kDiTModule = "hy3dshape.models.denoisers.hunyuandit.HunYuanDiTPlain";
constexpr const char* kShapeVAE = "ShapeVAE";
constexpr const char* kShapeVAEModule = "hy3dshape.models.autoencoders.model.ShapeVAE";
constexpr const char* kScheduler = "hy3dshape.schedulers.FlowMatchEulerDiscreteScheduler";

const at::Tensor* find(const NamedTensors& in, const std::string& name) {
  for (const auto& [n, t] : in)
    if (n == name && t.defined()) return &t;
  return nullptr;
}

class DiTComponent : public family::ModelComponent<HunYuanDiTPlain, DiTConfig> {
 public:
  DiTComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kDiT, "is this the `model` state dict of a Hunyuan3D-2.1 shape checkpoint of this configuration?",
                        /*with_buffers=*/false}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    bool train = false;
    if (!options.empty()) {
      const json o = family::parse_json(options, "HunYuanDiTPlain forward options");
      if (o.is_object() && o.contains("train")) {
        if (!o["train"].is_boolean())
          sdk::fail(YETO_ERR_INVALID_ARGUMENT, "HunYuanDiTPlain forward options: 'train' must be true or false");
        train = o["train"].get<bool>();
      }
    }
    const auto* context = find(in, "contexts.main");
    if (!context) context = find(in, "contexts");
    if (!context)
      sdk::fail(YETO_ERR_NOT_FOUND, "HunYuanDiTPlain forward: no image conditioning ('contexts.main' [B, M, " +
                                        std::to_string(model_->config().context_dim) + "])");
    const bool was_training = model_->is_training();
    model_->train(train);
    NamedTensors out;
    try {
      out.emplace_back("sample", model_->forward(sdk::get(in, "x"), sdk::get(in, "t"), *context));
    } catch (const std::invalid_argument& e) {
      model_->train(was_training);
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    for (const auto& [gate, loss] : model_->moe_aux_losses()) out.emplace_back("moe_aux_loss." + gate, loss);
    model_->train(was_training);
    return out;
  }
};

double number_in(const std::string& python, const std::string& pattern, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(python, m, std::regex(pattern)))
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "recorded case: the call `" + python + "` does not give " + what);
  return std::stod(m[1]);
}

// The ShapeVAE's decode path. Its forward takes `latents` [B, N, embed_dim] as the sampler returns
// them and options {"bounds" (1.01), "octree_resolution" (256), "num_chunks" (8000)} or
// {"recorded_case": case.json} (the values of its volume_decoder call); it returns
// `latents_scaled` (latents / scale_factor), `decoded_latents`, `query_points` and `grid_logits`
// [B, R + 1, R + 1, R + 1] (the occupancy logits; the surface is their 0 level set).
class ShapeVAEComponent : public family::ModelComponent<ShapeVAEDecoder, ShapeVAEConfig> {
 public:
  ShapeVAEComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kShapeVAE, "is this the `vae` state dict of a Hunyuan3D-2.1 shape checkpoint of this configuration?",
                        /*with_buffers=*/false}) {}

  // A full checkpoint also holds the point-cloud encoder (encoder.*, pre_kl.*), which decoding
  // does not use: those tensors are skipped.
  void load_weights(const NamedTensors& weights, bool strict) override {
    NamedTensors kept;
    for (const auto& [n, t] : weights)
      if (n.rfind("encoder.", 0) != 0 && n.rfind("pre_kl.", 0) != 0) kept.emplace_back(n, t);
    ModelComponent::load_weights(kept, strict);
  }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    double bounds = 1.01;
    std::int64_t resolution = 256, chunks = 8000;
    const json o = options.empty() ? json::object() : family::parse_json(options, "ShapeVAE forward options");
    if (o.contains("recorded_case")) {
      const json calls = o["recorded_case"].value("calls", json::array());
      for (const auto& call : calls) {
        const std::string python = call.value("python", std::string());
        if (python.find("volume_decoder(") == std::string::npos) continue;
        bounds = number_in(python, R"(bounds=([0-9.]+))", "bounds");
        resolution = static_cast<std::int64_t>(number_in(python, R"(octree_resolution=([0-9]+))", "octree_resolution"));
        chunks = static_cast<std::int64_t>(number_in(python, R"(num_chunks=([0-9]+))", "num_chunks"));
      }
    } else {
      try {
        const family::ConfigReader r(o, "ShapeVAE forward options");
        bounds = r.number("bounds", bounds);
        resolution = r.integer("octree_resolution", resolution);
        chunks = r.integer("num_chunks", chunks);
      } catch (const std::invalid_argument& e) {
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
      }
    }
    at::NoGradGuard no_grad;
    try {
      const auto scaled = (1.0 / model_->config().scale_factor) * sdk::get(in, "latents");
      const auto decoded = model_->decode(scaled);
      return {{"latents_scaled", scaled},
              {"decoded_latents", decoded},
              {"query_points", dense_grid_points(bounds, resolution)},
              {"grid_logits", model_->grid_logits(decoded, bounds, resolution, chunks)}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }
};

// hy3dshape's FlowMatchEulerDiscreteScheduler (reversed time) and the pipeline loop. Its forward
// computes a recorded sampler case (options {"recorded_case": case.json}): the tables after
// construction ("init.*"), the pipeline's schedules ("set_timesteps.N<n>.*"), the guided Euler loop
// over recorded model outputs ("loop.*") and the whole pipeline loop ("pipe.*") with the tiny
// DiT of the case folder (config.json; weights as inputs "model.safetensors/<name>").
class SchedulerComponent : public sdk::Component {
 public:
  SchedulerComponent(const std::string& config_json, const std::string& dir)
      : config_(parse_config(config_json, dir)), dir_(dir) {}

  NamedTensors parameters() override { return {}; }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    const json o = family::parse_json(options, "hy3dshape scheduler forward options");
    if (!o.is_object() || !o.contains("recorded_case") || !o["recorded_case"].is_object())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "hy3dshape scheduler forward: options must be {\"recorded_case\": <case.json>} (the scheduler's "
                "sampling runs through the pipeline, not through this component)");
    const json& c = o["recorded_case"];
    family::Trace record(true);
    const auto tables = training_tables(config_);
    record("init.timesteps", tables.timesteps);
    record("init.sigmas", tables.sigmas);
    const std::regex set_key(R"(set_timesteps\.N([0-9]+)\.timesteps)");
    const json compare = c.value("compare", json::object());  // named: items() must not outlive it
    for (const auto& [key, _] : compare.items()) {
      std::smatch m;
      if (!std::regex_match(key, m, set_key)) continue;
      const auto n = std::stoll(m[1]);
      const auto s = sampling_schedule(config_, n);
      const auto p = "set_timesteps.N" + std::to_string(n) + ".";
      record(p + "timesteps", s.timesteps);
      record(p + "sigmas", s.sigmas);
      record(p + "model_timestep", s.timesteps / static_cast<double>(config_.num_train_timesteps));
    }
    const json calls = c.value("calls", json::array());
    for (const auto& call : calls) {
      const std::string python = call.value("python", std::string());
      if (call.contains("inputs") && sdk::has(in, "loop.sample.init")) run_loop(call, in, record);
      if (python.find("Hunyuan3DDiTFlowMatchingPipeline(") != std::string::npos) run_pipeline(python, in, record);
    }
    return record.outputs({});
  }

 private:
  static SchedulerConfig parse_config(const std::string& text, const std::string& dir) {
    const std::string where = dir.empty() ? std::string("hy3dshape scheduler config") : dir + "/scheduler_config.json";
    try {
      return SchedulerConfig::from_json(family::parse_json(text, where));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": " + e.what());
    }
  }

  // Euler steps with guidance over the recorded raw model outputs loop.model_output.<i>.
  void run_loop(const json& call, const NamedTensors& in, family::Trace& record) {
    const auto steps = call.value("num_inference_steps", std::int64_t{0});
    const double guidance = call.value("guidance_scale", 1.0);
    const auto schedule = sampling_schedule(config_, steps);
    at::Tensor sample = sdk::get(in, "loop.sample.init");
    for (std::int64_t i = 0; i < steps; ++i) {
      const auto si = std::to_string(i);
      const auto guided = guide(sdk::get(in, "loop.model_output." + si), guidance);
      record("loop.guided." + si, guided);
      sample = euler_step(sample, guided, schedule.sigmas[i].item<double>(), schedule.sigmas[i + 1].item<double>());
      record("loop.prev_sample." + si, sample);
    }
  }

  // The whole pipeline loop with the case folder's DiT and the image tokens pipe.contexts.main.
  void run_pipeline(const std::string& python, const NamedTensors& in, family::Trace& record) {
    const auto steps = static_cast<std::int64_t>(number_in(python, R"(num_inference_steps=([0-9]+))", "num_inference_steps"));
    const double guidance = number_in(python, R"(guidance_scale=([0-9.]+))", "guidance_scale");
    const auto seed = static_cast<std::uint64_t>(number_in(python, R"(manual_seed\(([0-9]+)\))", "the generator seed"));
    const std::string config_path = dir_ + "/config.json";
    HunYuanDiTPlain model{nullptr};
    try {
      model = HunYuanDiTPlain(DiTConfig::from_json(family::parse_json(family::read_text_file(config_path), config_path)));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, config_path + ": " + e.what());
    }
    NamedTensors weights;
    const std::string prefix = "model.safetensors/";
    for (const auto& [n, t] : in)
      if (n.rfind(prefix, 0) == 0) weights.emplace_back(n.substr(prefix.size()), t);
    family::load_module_weights(*model, weights, true, kDiT, "the case's model.safetensors", false);
    model->eval();
    const auto& cond = sdk::get(in, "pipe.contexts.main");
    const auto& cfg = model->config();
    family::Trace scratch(false);
    const auto latents = family::initial_latents({}, {cond.size(0), cfg.input_size, cfg.in_channels}, seed, scratch);
    record("pipe.initial_latents", latents);
    const VelocityModel velocity = [&](const at::Tensor& x, const at::Tensor& t, const at::Tensor& ctx) {
      return model->forward(x, t, ctx);
    };
    denoise(velocity, latents, cond, at::zeros_like(cond), sampling_schedule(config_, steps), config_, guidance, record,
            "pipe.");
  }

  SchedulerConfig config_;
  std::string dir_;
};

class Hunyuan3DPlugin : public sdk::Plugin {
 public:
  void register_components(sdk::ComponentRegistry& registry) override {
    registry.add<DiTComponent>(kDiT);
    registry.add<DiTComponent>(kDiTModule);
    registry.add<SchedulerComponent>(kScheduler);
    registry.add<ShapeVAEComponent>(kShapeVAE);
    registry.add<ShapeVAEComponent>(kShapeVAEModule);
  }
};

}  // namespace
}  // namespace yeto::hunyuan3d

YETO_PLUGIN(yeto::hunyuan3d::Hunyuan3DPlugin)
