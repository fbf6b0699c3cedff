// The Hunyuan3D-2.1 shape family plugin, written against the SDK only: the HunYuanDiTPlain,
// ShapeVAE and hy3dshape scheduler component classes (registered under their class names and their
// upstream module paths, the names recorded reference cases use) and the family's pipeline:
// repository plan and presets from hunyuan3d.family.json, LoRA (or full) tuning of the DiT, the
// flow-matching training objective as loss_step, and generate (image tokens -> shape latents ->
// the ShapeVAE's occupancy grid, which the host turns into a mesh).
//
// The DiT component's forward takes the upstream argument names: `x` [B, N, C] latent tokens, `t`
// [B] flow time in [0, 1] and the image tokens as `contexts.main` (or `contexts`) [B, M, D]. Its
// options may say {"train": true}: the call then runs in training mode (the MoE gates' auxiliary
// losses attach their gradient and are returned as `moe_aux_loss.<gate path>`).
//
// A training row (loss_step) carries cached tensors: `latents` [N, C], the shape latents the DiT
// sees (z_scale_factor x the ShapeVAE posterior sample, Diffuser.forward's x1), and `image_embeds`
// [M, D], the image conditioner's tokens (DINOv2 last_hidden_state with the CLS token). Per row,
// from the row's seed: x0 ~ N(0, 1) first, then t ~ U[0, 1); xt = t x1 + (1 - t) x0, target
// ut = x1 - x0, loss = mean((model(xt, t, image_embeds) - ut)^2) (Transport.training_losses with
// the Linear path and velocity prediction); in training mode the MoE gates' auxiliary losses add
// their gradient (AddAuxiliaryLoss).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "hunyuan3d_calls.hpp"
#include "hunyuan3d_dinov2.hpp"
#include "hunyuan3d_dit.hpp"
#include "hunyuan3d_family.hpp"
#include "hunyuan3d_release.hpp"
#include "hunyuan3d_sampler.hpp"
#include "hunyuan3d_shapevae.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
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
constexpr const char* kDinov2 = "Dinov2Model";
constexpr const char* kDinoEncoder = "hy3dshape.models.conditioner.DinoImageEncoder";
constexpr const char* kConditioner = "DinoImageEncoder";

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

// A number of the recorded call `python` (a keyword argument's value, or with call set, the
// argument of that call); fails naming the call and what is missing.
double number_in(const std::string& python, const std::string& name, bool call = false) {
  std::optional<double> v;
  try {
    v = call ? call_number(python, name) : keyword_number(python, name);
  } catch (const std::invalid_argument& e) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "recorded case: the call `" + python + "`: " + e.what());
  }
  if (!v)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "recorded case: the call `" + python + "` does not give " +
                                             (call ? name + "(...)" : "'" + name + "'"));
  return *v;
}

// A count of the recorded call: a whole, non-negative number.
std::int64_t count_in(const std::string& python, const std::string& name, bool call = false) {
  const double v = number_in(python, name, call);
  if (!(v >= 0) || v != static_cast<double>(static_cast<std::int64_t>(v)))
    sdk::fail(YETO_ERR_INVALID_ARGUMENT,
              "recorded case: the call `" + python + "` gives " + name + " " + std::to_string(v) + ", not a whole number");
  return static_cast<std::int64_t>(v);
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
        bounds = number_in(python, "bounds");
        resolution = count_in(python, "octree_resolution");
        chunks = count_in(python, "num_chunks");
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

// transformers' Dinov2Model (the conditioner's encoder). Forward: `pixel_values` [B, C, H, W] (and
// optionally `bool_masked_pos` [B, patches]) -> `last_hidden_state`, `pooler_output`; or options
// {"recorded_case": case.json}: every call of a dinov2-encoder case (the model at its native
// size, interpolated position tables, the mask token, a SwiGLU variant whose weights come as
// inputs "<its model file>/<name>", and the conditioner end to end).
class Dinov2Component : public family::ModelComponent<Dinov2Model, Dinov2Config> {
 public:
  Dinov2Component(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {kDinov2, "is this a transformers Dinov2Model checkpoint?", false}),
        dir_(dir) {}

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    const json o = options.empty() ? json::object() : family::parse_json(options, "Dinov2Model forward options");
    at::NoGradGuard no_grad;
    try {
      if (o.contains("recorded_case")) return recorded(o["recorded_case"], in);
      const auto* mask = find(in, "bool_masked_pos");
      const auto out = model_->forward(sdk::get(in, "pixel_values"), mask ? *mask : at::Tensor());
      return {{"last_hidden_state", out.last_hidden_state}, {"pooler_output", out.last_hidden_state.select(1, 0)}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

 private:
  // The model of a call that names its own model_files (config.json + safetensors in the case).
  Dinov2Model other_model(const json& call, const NamedTensors& in) {
    std::string config_file, weights_file;
    for (const auto& f : call.at("model_files")) {
      const auto name = f.get<std::string>();
      if (name.size() > 5 && name.substr(name.size() - 5) == ".json") config_file = name;
      if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") weights_file = name;
    }
    if (config_file.empty() || weights_file.empty())
      throw std::invalid_argument("call '" + call.value("name", std::string()) +
                                  "': model_files must name a config .json and a .safetensors file");
    const auto path = dir_ + "/" + config_file;
    Dinov2Model m(Dinov2Config::from_json(family::parse_json(family::read_text_file(path), path)));
    NamedTensors weights;
    const auto prefix = weights_file + "/";
    for (const auto& [n, t] : in)
      if (n.rfind(prefix, 0) == 0) weights.emplace_back(n.substr(prefix.size()), t);
    family::load_module_weights(*m, weights, true, kDinov2, "the case's " + weights_file, false);
    m->eval();
    return m;
  }

  NamedTensors recorded(const json& c, const NamedTensors& in) {
    NamedTensors out;
    const json calls = c.value("calls", json::array());
    for (const auto& call : calls) {
      const auto name = call.value("name", std::string());
      const std::string prefix = name == "forward" ? "" : name + ".";
      Dinov2Model model = call.contains("model_files") ? other_model(call, in) : model_;
      at::Tensor pixels, mask, image;
      const json args = call.value("tensor_args", json::object());  // named: items() must not outlive it
      for (const auto& [arg, _] : args.items()) {
        const auto ends = [&](const std::string& tail) {
          return arg.size() >= tail.size() && arg.compare(arg.size() - tail.size(), tail.size(), tail) == 0;
        };
        if (ends("pixel_values")) pixels = sdk::get(in, arg);
        else if (ends("bool_masked_pos")) mask = sdk::get(in, arg);
        else if (ends("image")) image = sdk::get(in, arg);
      }
      if (image.defined()) {
        // DinoImageEncoder(config, image_size=S, use_cls_token=...) end to end.
        const auto size = count_in(call.value("python", std::string()), "image_size");
        const auto px = dino_preprocess(image, size);
        const auto last = model->forward(px).last_hidden_state;
        const auto tokens = (size / model->config().patch_size) * (size / model->config().patch_size);
        out.emplace_back(prefix + "pixel_values", px);
        out.emplace_back(prefix + "main", last);
        out.emplace_back(prefix + "main_no_cls", last.narrow(1, 1, last.size(1) - 1));
        out.emplace_back(prefix + "unconditional", at::zeros({image.size(0), tokens + 1, model->config().hidden_size}));
        out.emplace_back(prefix + "unconditional_no_cls", at::zeros({image.size(0), tokens, model->config().hidden_size}));
        continue;
      }
      if (!pixels.defined())
        throw std::invalid_argument("call '" + name + "' has no pixel_values or image tensor argument");
      const auto r = model->forward(pixels, mask);
      out.emplace_back(prefix + "last_hidden_state", r.last_hidden_state);
      out.emplace_back(prefix + "pooler_output", r.last_hidden_state.select(1, 0));
      for (std::size_t i = 0; i < r.hidden_states.size(); ++i)
        out.emplace_back(prefix + "hidden_states." + std::to_string(i), r.hidden_states[i]);
      const auto p = model->config().patch_size;
      const auto grid = std::to_string(pixels.size(2) / p) + "x" + std::to_string(pixels.size(3) / p);
      out.emplace_back("pos_embed." + grid, r.position_table);
      if (!prefix.empty()) out.emplace_back(prefix + "pos_embed." + grid, r.position_table);
    }
    return out;
  }

  std::string dir_;
};

// A repository's image conditioner (class DinoImageEncoder): `image` [B, 3, H, W] in [-1, 1] ->
// `main` (the tokens the DiT attends to).
class ConditionerComponent : public family::ModelComponent<DinoImageEncoder, DinoImageEncoderConfig> {
 public:
  ConditionerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kConditioner, "is this the conditioner of a Hunyuan3D-2.1 repository (DinoImageEncoder)?", false}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    at::NoGradGuard no_grad;
    try {
      return {{"main", model_->forward(sdk::get(in, "image"))}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("DinoImageEncoder: ") + e.what());
    }
  }
};

// hy3dshape's DinoImageEncoder preprocessing (a dinov2-preprocess case): options {"recorded_case":
// case.json} gives, for each call, `pixel_values.<name>` (what the encoder's model receives),
// `resized.<name>` (after the resize, before the crop) and `noaa.pixel_values.<name>` (the same
// without antialias) of input `image.<name>` at the case's image_size; or `image` with options
// {"image_size": S} -> `pixel_values`.
class DinoPreprocessComponent : public sdk::Component {
 public:
  DinoPreprocessComponent(const std::string&, const std::string&) {}
  NamedTensors parameters() override { return {}; }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    const json o = options.empty() ? json::object() : family::parse_json(options, "DinoImageEncoder forward options");
    at::NoGradGuard no_grad;
    try {
      if (!o.contains("recorded_case")) {
        const family::ConfigReader r(o, "DinoImageEncoder forward options");
        return {{"pixel_values", dino_preprocess(sdk::get(in, "image"), r.integer("image_size", 518))}};
      }
      const json& c = o["recorded_case"];
      if (!c.contains("image_size") || !c["image_size"].is_number_integer())
        throw std::invalid_argument("recorded case: no integer 'image_size'");
      const auto size = c["image_size"].get<std::int64_t>();
      NamedTensors out;
      const json calls = c.value("calls", json::array());
      for (const auto& call : calls) {
        const auto name = call.value("name", std::string());
        const auto& image = sdk::get(in, call.value("input", "image." + name));
        at::Tensor resized;
        out.emplace_back("pixel_values." + name, dino_preprocess(image, size, true, &resized));
        out.emplace_back("resized." + name, resized);
        out.emplace_back("noaa.pixel_values." + name, dino_preprocess(image, size, false));
      }
      return out;
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("DinoImageEncoder: ") + e.what());
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
    const auto steps = count_in(python, "num_inference_steps");
    const double guidance = number_in(python, "guidance_scale");
    const auto seed = static_cast<std::uint64_t>(count_in(python, "manual_seed", /*call=*/true));
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

// The pipeline's component `name` of this plugin's class C, registered under either of its names.
template <class C>
C& plugin_component_of(const std::string& name, const char* cls, const char* module_path) {
  const auto c = sdk::Host::component(name);
  if (auto* impl = c.as<C>(module_path)) return *impl;
  return family::plugin_component<C>(name, cls, "hunyuan3d", "a");
}

class Hunyuan3DPlugin : public sdk::Plugin {
 public:
  void register_components(sdk::ComponentRegistry& registry) override {
    registry.add<DiTComponent>(kDiT);
    registry.add<DiTComponent>(kDiTModule);
    registry.add<SchedulerComponent>(kScheduler);
    registry.add<ShapeVAEComponent>(kShapeVAE);
    registry.add<ShapeVAEComponent>(kShapeVAEModule);
    registry.add<Dinov2Component>(kDinov2);
    registry.add<DinoPreprocessComponent>(kDinoEncoder);
    registry.add<ConditionerComponent>(kConditioner);
  }

  // The plan of the family file's layout (model, vae, conditioner, scheduler); the scheduler's
  // config (num_train_timesteps, shift) is read here for generate. A directory without
  // model_index.json in the release layout (config.yaml and model.fp16.safetensors / .ckpt,
  // itself or its hunyuan3d-dit-v2-1/ folder) is planned from config.yaml, every component's
  // tensors read from the one checkpoint under its prefix.
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) override {
    const auto index = family::parse_json(model_index_json, model_dir + "/model_index.json");
    if (index.is_object() && index.empty()) return release_pipeline(model_dir);
    json plan;
    try {
      plan = description().plan(model_dir, index);
      const auto path = model_dir + "/scheduler/scheduler_config.json";
      scheduler_ = SchedulerConfig::from_json(family::parse_json(family::read_text_file(path), path));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    return plan.dump();
  }

  std::string presets() override { return description().presets().dump(); }

  // LoRA (targets auto = attention, the community list, all-linear without final_layer.linear)
  // or full tuning of the DiT, placed by the run's device and precision.
  void prepare(const std::string& options_json) override {
    const auto o = family::parse_json(options_json, "prepare options");
    family::TuningSpec spec;
    spec.resolve_targets = [](const json& t) { return description().lora_targets(t); };
    spec.all_linear_excludes = {"final_layer.linear"};
    tuning_ = family::prepare_denoisers({&family::plugin_module("model", "hunyuan3d")}, o, spec);
  }

  NamedTensors trainable_parameters() override {
    return family::trainable_parameters({{"model", &family::plugin_module("model", "hunyuan3d")}}, tuning_);
  }

  at::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics) override {
    const json rows = family::parse_json(rows_json, "loss_step rows");
    if (!rows.is_array() || rows.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "hunyuan3d loss_step: no rows");
    auto& dit = denoiser();
    const auto& cfg = dit->config();
    const auto b = static_cast<std::int64_t>(rows.size());
    const auto* latents = find(batch, "latents");
    if (!latents)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "hunyuan3d: a training row needs its shape latents as cached 'latents' [N, " +
                    std::to_string(cfg.in_channels) +
                    "] (z_scale_factor x the ShapeVAE posterior sample); raw images or meshes are not encoded");
    const auto* context = find(batch, "image_embeds");
    if (!context)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "hunyuan3d: a training row needs its image conditioning as cached 'image_embeds' [M, " +
                    std::to_string(cfg.context_dim) +
                    "] (the DINOv2 conditioner's tokens), e.g. \"tensors\": {\"image_embeds\": \"cond.safetensors\"}");
    if (latents->dim() != 3 || latents->size(0) != b || latents->size(2) != cfg.in_channels)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "hunyuan3d: 'latents' must be [N, " + std::to_string(cfg.in_channels) +
                                               "] per row, got a batch of " + c10::str(latents->sizes()) + " for " +
                                               std::to_string(b) + " rows");
    if (context->dim() != 3 || context->size(0) != b || context->size(2) != cfg.context_dim)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "hunyuan3d: 'image_embeds' must be [M, " + std::to_string(cfg.context_dim) +
                                               "] per row, got a batch of " + c10::str(context->sizes()) + " for " +
                                               std::to_string(b) + " rows");
    // Per row, from its seed: the noise first, then t (Transport.sample's order).
    const auto x1 = latents->to(at::kFloat);
    std::vector<at::Tensor> noise, times;
    bool training = false;
    for (std::int64_t i = 0; i < b; ++i) {
      const auto& r = rows[static_cast<std::size_t>(i)];
      if (!r.contains("seed") || !r["seed"].is_number_unsigned())
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "hunyuan3d loss_step: row " + std::to_string(i) + " has no seed");
      auto gen = at::make_generator<at::CPUGeneratorImpl>(r["seed"].get<std::uint64_t>());
      noise.push_back(at::randn(x1[i].sizes(), gen, at::kFloat));
      times.push_back(at::rand({1}, gen, at::kFloat));
      training = training || r.value("training", false);
    }
    const auto device = dit->x_embedder->weight.device();
    const auto x0 = at::stack(noise).to(device);
    const auto t = at::cat(times).to(device);
    const auto data = x1.to(device);
    const auto tt = t.view({b, 1, 1});
    const auto xt = tt * data + (1 - tt) * x0;
    const auto ut = data - x0;
    const bool was_training = dit->is_training();
    dit->train(training);
    at::Tensor pred;
    try {
      pred = dit->forward(xt, t, context->to(device));
    } catch (const std::invalid_argument& e) {
      dit->train(was_training);
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("hunyuan3d loss_step: ") + e.what());
    }
    double aux = 0.0;
    for (const auto& [gate, loss] : dit->moe_aux_losses()) aux += loss.item<double>();
    dit->train(was_training);
    const auto loss = (pred.to(at::kFloat) - ut).pow(2).mean();
    metrics = json{{"flow_loss", loss.item<double>()}, {"moe_aux_loss", aux}, {"t_mean", t.mean().item<double>()}}.dump();
    return loss;
  }

  // Request: {"prompts": [one path], "seed", "steps", "guidance", and this family's "octree_resolution"
  // (or the host's "mesh_resolution"; default 256), "bounds" (1.01), "num_chunks" (8000)}.
  // The image tokens [M, D] (or [1, M, D]) come as the input tensor "image_embeds" (`yeto-host
  // sample --prompt cond.safetensors` passes the file's tensors by name).
  // Outputs "occupancy" [B, R + 1, R + 1, R + 1] (the ShapeVAE's logits; the surface is their 0
  // level set, inside > 0), "occupancy_bounds" [2] (-bounds, bounds) and "latents".
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto r = family::parse_json(request_json, "generate request");
    std::int64_t steps = 50, resolution = 256, chunks = 8000;
    double guidance = 5.0, bounds = 1.01;
    std::uint64_t seed = 0;
    try {
      const family::ConfigReader in(r, "hunyuan3d generate request");
      steps = in.integer("steps", steps);
      guidance = in.number("guidance", guidance);
      resolution = in.integer("mesh_resolution", resolution);
      resolution = in.integer("octree_resolution", resolution);
      bounds = in.number("bounds", bounds);
      chunks = in.integer("num_chunks", chunks);
      if (r.contains("seed")) {
        if (!r["seed"].is_number_unsigned() && !(r["seed"].is_number_integer() && r["seed"].get<std::int64_t>() >= 0))
          in.fail("seed", "must be a non-negative integer");
        seed = r["seed"].get<std::uint64_t>();
      }
      if (steps < 1) in.fail("steps", "must be at least 1");
      if (resolution < 1 || resolution > 1024) in.fail("octree_resolution", "must be in [1, 1024]");
      if (!(bounds > 0)) in.fail("bounds", "must be positive");
      if (chunks < 1) in.fail("num_chunks", "must be positive");
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    auto& dit = denoiser();
    const auto& cfg = dit->config();
    at::Tensor c;
    if (const auto* tokens = find(inputs, "image_embeds")) {
      c = tokens->to(at::kFloat);
    } else if (const auto* image = find(inputs, "image")) {
      if (!sdk::Host::has_component("conditioner"))
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "hunyuan3d generate: an image prompt needs the repository's image conditioner, and this repository "
                  "has none (conditioner is null); give the image tokens as a .safetensors prompt ('image_embeds')");
      auto& encoder = plugin_component_of<ConditionerComponent>("conditioner", kConditioner, kConditioner).model();
      at::NoGradGuard no_grad;
      try {
        c = encoder->forward(*image).to(at::kFloat).cpu();
      } catch (const std::invalid_argument& e) {
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("hunyuan3d generate: the image prompt: ") + e.what());
      }
    } else {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "hunyuan3d generate: no image conditioning: give an image prompt (input 'image' [1, 3, H, W] in [-1, "
                "1]) or the image tokens [M, " + std::to_string(cfg.context_dim) +
                    "] (input 'image_embeds', e.g. a .safetensors prompt)");
    }
    const at::Tensor* cond = &c;
    if (c.dim() == 2) c = c.unsqueeze(0);
    if (c.dim() != 3 || c.size(2) != cfg.context_dim)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "hunyuan3d generate: 'image_embeds' must be [M, " +
                                               std::to_string(cfg.context_dim) + "], got " + c10::str(cond->sizes()));
    at::NoGradGuard no_grad;
    const bool was_training = dit->is_training();
    dit->eval();
    const auto device = dit->x_embedder->weight.device();
    const auto dtype = dit->x_embedder->compute_dtype();
    family::Trace record(r.value("trace", false));
    const auto latents = family::initial_latents(inputs, {c.size(0), cfg.input_size, cfg.in_channels}, seed, record);
    const VelocityModel velocity = [&](const at::Tensor& x, const at::Tensor& t, const at::Tensor& ctx) {
      return dit->forward(x.to(device, dtype), t.to(device), ctx.to(device, dtype)).to(at::kFloat).cpu();
    };
    const auto final_latents =
        hunyuan3d::denoise(velocity, latents, c, at::zeros_like(c), sampling_schedule(scheduler_, steps), scheduler_,
                           guidance, record);
    dit->train(was_training);
    auto& vae = shape_vae();
    const auto vdev = vae->post_kl->weight.device();
    const auto vdtype = vae->post_kl->compute_dtype();
    const auto decoded = vae->decode(((1.0 / vae->config().scale_factor) * final_latents).to(vdev, vdtype));
    const auto grid = vae->grid_logits(decoded, bounds, resolution, chunks).to(at::kFloat).cpu();
    NamedTensors out = {{"occupancy", grid},
                        {"occupancy_bounds", at::tensor(std::vector<float>{static_cast<float>(-bounds),
                                                                           static_cast<float>(bounds)})},
                        {"latents", final_latents}};
    return record.outputs(std::move(out));
  }

 private:
  static HunYuanDiTPlain& denoiser() { return plugin_component_of<DiTComponent>("model", kDiT, kDiTModule).model(); }
  static ShapeVAEDecoder& shape_vae() {
    return plugin_component_of<ShapeVAEComponent>("vae", kShapeVAE, kShapeVAEModule).model();
  }

  // The release layout's plan; each config is checked here so that an error names config.yaml
  // and the section.
  std::string release_pipeline(const std::string& model_dir) {
    const auto folder = release_folder(model_dir);
    if (folder.empty())
      sdk::fail(YETO_ERR_NOT_FOUND,
                "'" + model_dir + "' is neither a repository in the family file's layout (no model_index.json) nor "
                "Hunyuan3D-2.1's release layout (no config.yaml in it or in its hunyuan3d-dit-v2-1/ folder)");
    const auto file = (folder / "config.yaml").string();
    try {
      const auto configs = release_configs(read_release_yaml(family::read_text_file(file), file), file);
      const auto check = [&](const char* section, const auto& parse) {
        try {
          parse();
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(file + ": section '" + section + "': " + e.what());
        }
      };
      check("model.params", [&] { DiTConfig::from_json(configs.model); });
      check("vae.params", [&] { ShapeVAEConfig::from_json(configs.vae); });
      check("conditioner.params.main_image_encoder.kwargs", [&] { DinoImageEncoderConfig::from_json(configs.conditioner); });
      check("scheduler.params", [&] { scheduler_ = SchedulerConfig::from_json(configs.scheduler); });
      const auto checkpoint = release_checkpoint(folder);
      sdk::Host::log(YETO_LOG_INFO, "hunyuan3d: release layout " + folder.string() + " (config.yaml, " +
                                        checkpoint.filename().string() + ")");
      return release_plan(configs, checkpoint).dump();
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  std::string tuning_ = "lora";
  SchedulerConfig scheduler_;
};

}  // namespace
}  // namespace yeto::hunyuan3d

YETO_PLUGIN(yeto::hunyuan3d::Hunyuan3DPlugin)
