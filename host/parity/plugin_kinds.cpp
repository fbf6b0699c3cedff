#include "parity/plugin_kinds.hpp"

#include <filesystem>
#include <map>
#include <optional>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "parity/parity.hpp"
#include "pipeline/pipeline.hpp"
#include "io/tensors.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"

namespace yeto::parity {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json request_from_arguments(const json& call, const std::string& where) {
  if (!call.is_object() || !call.contains("arguments") || !call["arguments"].is_object())
    throw Error(where + ": 'call.arguments' must be an object (prompt, seed, num_inference_steps, ...)",
                ExitCode::bad_input);
  const json& a = call["arguments"];
  json r = json::object();
  if (a.contains("prompt")) {
    if (a["prompt"].is_string()) r["prompts"] = json::array({a["prompt"]});
    else if (a["prompt"].is_array()) r["prompts"] = a["prompt"];
  }
  if (!r.contains("prompts")) throw Error(where + ": 'call.arguments.prompt' is missing", ExitCode::bad_input);
  if (a.contains("negative_prompt")) {
    r["negative_prompts"] = a["negative_prompt"].is_string() ? json::array({a["negative_prompt"]}) : a["negative_prompt"];
  }
  // Diffusers argument names -> the generate request's.
  const std::map<std::string, std::string> names = {{"seed", "seed"},
                                                    {"num_inference_steps", "steps"},
                                                    {"guidance_scale", "guidance"},
                                                    {"guidance_scale_2", "guidance_2"},
                                                    {"height", "height"},
                                                    {"width", "width"},
                                                    {"num_frames", "num_frames"},
                                                    {"fps", "fps"},
                                                    {"max_sequence_length", "max_sequence_length"}};
  for (const auto& [from, to] : names)
    if (a.contains(from) && !a[from].is_null()) r[to] = a[from];
  r["trace"] = true;
  return r;
}

// The plugin for a repository whose case names none: the family plugin of the pipeline
// class in its model_index.json.
std::string adapter_for(const fs::path& repo) {
  std::error_code ec;
  const fs::path index = repo / "model_index.json";
  if (!fs::exists(index, ec)) return "";
  try {
    return plugin_for_class(json::parse(read_file(index)).value("_class_name", std::string()));
  } catch (const std::exception&) {
    return "";
  }
}

std::string where_of(const CaseContext& ctx) { return (ctx.dir() / "case.json").string(); }

void run_pipeline_end_to_end(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string where = (ctx.dir() / "case.json").string();
  if (!c.contains("repository") || !c["repository"].is_string())
    throw Error(where + ": 'repository' (the model directory, relative to the case) is missing", ExitCode::bad_input);
  const fs::path repo = fs::weakly_canonical(ctx.dir() / c["repository"].get<std::string>());
  if (!fs::is_directory(repo))
    throw Error(where + ": repository " + repo.string() + " does not exist", ExitCode::not_found);
  const json request = request_from_arguments(c.value("call", json()), where);

  std::vector<config::Override> overrides = {{"model.id", repo.string(), "case.json repository"},
                                             {"model.precision", "fp32", "check-parity"},
                                             {"run.device", "cpu", "check-parity"}};
  std::string adapter = c.value("plugin", std::string());
  if (adapter.empty()) adapter = adapter_for(repo);
  if (!adapter.empty()) overrides.push_back({"model.adapter", adapter, "check-parity"});
  const config::Config cfg = config::Config::resolve(std::nullopt, overrides);

  pipeline::OpenOptions open;
  open.prepare = false;  // the recorded run has no adapter
  auto pipe = pipeline::Pipeline::open(cfg, open);
  plugin::NamedTensors inputs;
  const auto out = pipe->plugin().generate(request.dump(), inputs);
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [n, t] : out) by_name[n] = t;

  for (const auto& key : ctx.compare_keys()) {
    const auto it = by_name.find(key);
    if (it == by_name.end()) {
      Comparison cmp;
      cmp.name = key;
      cmp.note = "the plugin's generate trace has no '" + key + "'";
      result.comparisons.push_back(cmp);
      continue;
    }
    ctx.compare(key, it->second, result);
  }
}

// ---- model: one plugin component class --------------------------------------------------

config::Config parity_config() {
  return config::Config::resolve(std::nullopt, {{"model.precision", "fp32", "check-parity"},
                                                {"run.device", "cpu", "check-parity"}});
}

// A plugin instance and its component classes, once per plugin and process.
struct PluginClasses {
  std::unique_ptr<plugin::Instance> instance;
  std::unique_ptr<plugin::ComponentRegistry> registry;
};

PluginClasses& plugin_classes(const std::string& name) {
  static std::map<std::string, PluginClasses> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second;
  const config::Config cfg = parity_config();
  plugin::HostApiOptions o;
  o.plugin_name = name;
  o.config_values = plugin::config_values(cfg);
  const yeto_host_api* api = plugin::make_host_api(o);
  const auto& lp =
      plugin::load(name, plugin::LoaderOptions::from_config(cfg, plugin::LoaderOptions::default_install_roots()), api);
  PluginClasses pc;
  pc.instance = std::make_unique<plugin::Instance>(lp, o.config_values.dump());
  pc.registry = std::make_unique<plugin::ComponentRegistry>();
  if (pc.instance->has(YETO_CAP_COMPONENTS)) pc.instance->register_components(*pc.registry);
  return loaded.emplace(name, std::move(pc)).first->second;
}

void run_plugin_model(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  std::string name = c.value("plugin", std::string());
  if (name.empty()) name = plugin_for_class(cls);
  if (name.empty()) {
    mark_unsupported(result, unsupported_class_message(cls) + " (no family plugin serves it)");
    return;
  }
  auto& pc = plugin_classes(name);
  if (!pc.registry->has(cls)) {
    mark_unsupported(result, unsupported_class_message(cls) + " (plugin '" + name + "' does not register it)");
    return;
  }
  const fs::path config_path = ctx.dir() / "config.json";
  if (!fs::exists(config_path))
    throw Error(config_path.string() + " does not exist (the component's config)", ExitCode::bad_input);
  std::unique_ptr<const yeto_component_v1, plugin::ComponentDeleter> comp(
      pc.registry->create(cls, read_file(config_path), ctx.dir().string()));

  plugin::NamedTensors weights;
  for (const auto& file : c.value("model_files", json::array())) {
    const std::string f = file.get<std::string>();
    if (f.size() < 12 || f.substr(f.size() - 12) != ".safetensors") continue;
    for (auto& [n, t] : io::load_safetensors(ctx.dir() / f)) weights.emplace_back(n, t);
  }
  if (weights.empty()) throw Error(where_of(ctx) + ": no safetensors weights in model_files", ExitCode::bad_input);
  plugin::component_load_weights(*comp, weights);

  plugin::NamedTensors inputs;
  for (const auto& [arg, _] : c.at("call").at("tensor_args").items()) inputs.emplace_back(arg, ctx.input(arg));
  const std::string output = c.at("compare").contains("sample") ? "sample" : c.at("compare").begin().key();
  {
    at::NoGradGuard no_grad;
    const auto out = plugin::component_forward(*comp, inputs);
    bool found = false;
    for (const auto& [n, t] : out)
      if (n == "sample") {
        ctx.compare(output, t, result);
        found = true;
      }
    if (!found) throw Error(cls + " forward returned no 'sample'", ExitCode::failure);
  }
  if (!c.contains("backward")) return;
  const json& b = c["backward"];
  auto params = plugin::component_parameters(*comp);
  for (auto& [n, p] : params) {
    p.set_requires_grad(true);
    p.mutable_grad() = at::Tensor();
  }
  at::Tensor sample;
  for (const auto& [n, t] : plugin::component_forward(*comp, inputs))
    if (n == "sample") sample = t;
  const auto loss = (sample - ctx.expected(b.value("target_key", std::string("loss_target")))).pow(2).mean();
  ctx.compare(b.value("loss_key", std::string("loss")), loss.detach(), result);
  loss.backward();
  for (const auto& [grad_key, param] : b.at("grad_keys").items()) {
    at::Tensor grad;
    for (const auto& [n, p] : params)
      if (n == param.get<std::string>()) grad = p.grad();
    if (!grad.defined()) {
      Comparison cmp;
      cmp.name = grad_key;
      cmp.note = "no gradient for parameter '" + param.get<std::string>() + "'";
      result.comparisons.push_back(cmp);
      continue;
    }
    ctx.compare(grad_key, grad, result);
  }
}

}  // namespace

std::string plugin_for_class(const std::string& class_name) {
  static const std::map<std::string, std::string> families = {{"FluxPipeline", "flux"},
                                                              {"FluxImg2ImgPipeline", "flux"},
                                                              {"FluxInpaintPipeline", "flux"},
                                                              {"FluxTransformer2DModel", "flux"}};
  const auto it = families.find(class_name);
  return it == families.end() ? std::string() : it->second;
}

std::string pipeline_request_for_case(const std::string& case_json_text) {
  const json c = json::parse(case_json_text);
  return request_from_arguments(c.value("call", json()), "case.json").dump();
}

void register_plugin_parity_kinds() {
  register_kind("pipeline_end_to_end", run_pipeline_end_to_end);
  register_kind("model", run_plugin_model);
}

}  // namespace yeto::parity
