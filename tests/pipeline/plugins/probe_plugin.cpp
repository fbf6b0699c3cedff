// A test plugin that looks at its pipeline from the plugin side: it reaches the host's
// components through their typed services (ABI 1.2: yeto::sdk::Host::vae, tokenizer,
// text_encoder, scheduler) and through the ABI 1.1 form that older plugins use
// (Host::component(...).forward with {"method": ...}), gets its own denoiser object back from
// the component the host built (ComponentRef::as), and serves init-model presets.
//
// generate(request) runs one probe, named by request {"op": ...}; "form": "json" takes the
// ABI 1.1 route, anything else the typed services:
//   "encode"      pixel_values -> the host VAE's encode outputs (mean, logvar)
//   "decode"      latents -> the host VAE's decode output (sample)
//   "text"        {"prompts": [...]} -> tokenized (max_length 77), then encoded with hidden
//                 states: input_ids, attention_mask, last_hidden_state, pooler_output, ...
//   "schedule"    {"steps": N} -> set_timesteps(N, mu 0.5): timesteps, sigmas
//   "step"        model_output, sample -> set_timesteps(N) then one step at the first
//                 timestep: prev_sample
//   "wrong_kind"  asks for the VAE service of the transformer (fails with its message)
//   "own"         the denoiser's weight as the plugin's own object holds it ("proj.weight"),
//                 and a forward through that object ("sample")
//   "missing"     asks for a component the pipeline does not have (fails with its message)
// load_artifact(dir) returns {"prepare": <options prepare() got>, "own": bool, "tensors":
// [component names the plugin saw at prepare()]}.
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

namespace {

using nlohmann::json;
using yeto::sdk::Host;
using yeto::sdk::NamedTensors;

class ProbeDenoiser : public yeto::sdk::Component {
 public:
  ProbeDenoiser(const std::string& config_json, const std::string& /*dir*/) {
    const json c = json::parse(config_json);
    const int64_t ch = c.value("in_channels", 4);
    proj = torch::nn::Linear(ch, ch);
  }
  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    return {{"sample", proj->forward(yeto::sdk::get(in, "hidden_states"))}};
  }
  NamedTensors parameters() override {
    NamedTensors out;
    for (const auto& p : proj->named_parameters()) out.emplace_back("proj." + p.key(), p.value());
    return out;
  }
  void load_weights(const NamedTensors& weights, bool strict) override {
    torch::NoGradGuard no_grad;
    auto params = proj->named_parameters();
    for (const auto& [name, t] : weights) {
      auto* p = name.rfind("proj.", 0) == 0 ? params.find(name.substr(5)) : nullptr;
      if (!p) {
        if (strict) yeto::sdk::fail(YETO_ERR_NOT_FOUND, "YetoProbeDenoiser has no parameter '" + name + "'");
        continue;
      }
      p->copy_(t);
    }
  }
  torch::nn::Linear proj{nullptr};
};

class ProbePlugin : public yeto::sdk::Plugin {
 public:
  std::string load_pipeline(const std::string& /*model_dir*/, const std::string& model_index_json) override {
    const json index = json::parse(model_index_json);
    json plan = {{"components", {{"transformer", {{"class", "YetoProbeDenoiser"}, {"kind", "denoiser"}}}}}};
    // A component the family does not use is dropped from the plan.
    if (index.contains("safety_checker")) plan["components"]["safety_checker"] = nullptr;
    return plan.dump();
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<ProbeDenoiser>("YetoProbeDenoiser");
  }

  void prepare(const std::string& options_json) override {
    prepared_ = json::parse(options_json);
    own_ = Host::component("transformer").as<ProbeDenoiser>("YetoProbeDenoiser");
    // A host component is never mistaken for one of the plugin's own.
    foreign_is_own_ = Host::component("vae").as<ProbeDenoiser>("AutoencoderKL") != nullptr;
    seen_.clear();
    for (const char* n : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler", "unet"})
      if (Host::has_component(n)) seen_.push_back(n);
  }

  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const json r = json::parse(request_json);
    const std::string op = r.value("op", "");
    const bool json_form = r.value("form", "") == "json";
    using yeto::sdk::get;
    if (op == "encode") {
      if (json_form)
        return Host::component("vae").forward({{"sample", get(inputs, "pixel_values")}}, R"({"method": "encode"})");
      const auto p = Host::vae("vae").encode(get(inputs, "pixel_values"));
      return {{"mean", p.mean}, {"logvar", p.logvar}};
    }
    if (op == "decode") {
      if (json_form)
        return Host::component("vae").forward({{"latents", get(inputs, "latents")}}, R"({"method": "decode"})");
      return {{"sample", Host::vae("vae").decode(get(inputs, "latents"))}};
    }
    if (op == "text") {
      if (json_form) {
        const json tok_options = {{"method", "tokenize"}, {"text", r["prompts"]}, {"max_length", 77},
                                  {"padding", "max_length"}, {"truncation", true}};
        NamedTensors tokens = Host::component("tokenizer").forward({}, tok_options.dump());
        NamedTensors out = Host::component("text_encoder")
                               .forward({{"input_ids", get(tokens, "input_ids")}},
                                        R"({"method": "encode", "output_hidden_states": true})");
        out.insert(out.begin(), tokens.begin(), tokens.end());
        return out;
      }
      yeto::sdk::TokenizeOptions o;
      o.max_length = 77;
      const auto t = Host::tokenizer("tokenizer").tokenize(r["prompts"].get<std::vector<std::string>>(), o);
      NamedTensors out = Host::text_encoder("text_encoder").encode(t.input_ids, {}, /*hidden_states=*/true);
      out.insert(out.begin(), {{"input_ids", t.input_ids}, {"attention_mask", t.attention_mask}});
      return out;
    }
    if (op == "schedule") {
      if (json_form) {
        const json o = {{"method", "set_timesteps"}, {"num_inference_steps", r.value("steps", 4)}, {"mu", 0.5}};
        return Host::component("scheduler").forward({}, o.dump());
      }
      const auto s = Host::scheduler("scheduler").set_timesteps({r.value("steps", 4), {}, 0.5});
      return {{"timesteps", s.timesteps}, {"sigmas", s.sigmas}};
    }
    if (op == "step") {
      const std::int64_t steps = r.value("steps", 4);
      if (json_form) {
        const auto sched = Host::component("scheduler");
        const json o = {{"method", "set_timesteps"}, {"num_inference_steps", steps}, {"mu", 0.5}};
        const auto t = get(sched.forward({}, o.dump()), "timesteps")[0];
        return sched.forward({{"model_output", get(inputs, "model_output")}, {"timestep", t}, {"sample", get(inputs, "sample")}},
                             R"({"method": "step"})");
      }
      const auto sched = Host::scheduler("scheduler");
      const auto t = sched.set_timesteps({steps, {}, 0.5}).timesteps[0];
      return {{"prev_sample", sched.step(get(inputs, "model_output"), t, get(inputs, "sample"))}};
    }
    if (op == "wrong_kind") return {{"sample", Host::vae("transformer").decode(get(inputs, "latents"))}};
    if (op == "own") {
      if (!own_) yeto::sdk::fail(YETO_ERR_INTERNAL, "prepare() did not find the plugin's own denoiser");
      return {{"proj.weight", own_->proj->weight},
              {"sample", own_->forward({{"hidden_states", yeto::sdk::get(inputs, "hidden_states")}}, "{}")[0].second}};
    }
    if (op == "missing") return Host::component("no_such_component").parameters();
    yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "unknown probe op '" + op + "'");
  }

  std::string load_artifact(const std::string& /*dir*/) override {
    return json{{"prepare", prepared_}, {"own", own_ != nullptr}, {"foreign_is_own", foreign_is_own_}, {"seen", seen_}}
        .dump();
  }
  void save_artifact(const std::string& /*dir*/, const std::string& /*metadata*/) override {}

  std::string presets() override {
    return json{{"probe-tiny",
                 {{"description", "a 4-channel probe denoiser"},
                  {"model_index", {{"_class_name", "YetoProbePipeline"}, {"transformer", {"yeto", "YetoProbeDenoiser"}}}},
                  {"components", {{"transformer", {{"config", {{"_class_name", "YetoProbeDenoiser"}, {"in_channels", 4}}}}}}}}}}
        .dump();
  }

 private:
  json prepared_ = json::object();
  ProbeDenoiser* own_ = nullptr;
  bool foreign_is_own_ = false;
  std::vector<std::string> seen_;
};

}  // namespace

YETO_PLUGIN(ProbePlugin)
