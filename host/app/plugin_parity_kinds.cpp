#include "app/plugin_parity_kinds.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "artifacts/adapter.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "io/tensors.hpp"
#include "parity/parity.hpp"
#include "parity/pipeline_helpers.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "schedulers/multistep.hpp"

namespace yeto::app {
namespace {

namespace fs = std::filesystem;
namespace py = parity::py;
using nlohmann::json;
using parity::CaseContext;
using parity::CaseResult;
using parity::Comparison;
using parity::compare_tensors;
using parity::mark_unsupported;
using parity::register_class;
using parity::register_kind;
using parity::set_pipeline_helper_provider;
using parity::Tolerance;
using parity::unsupported_class_message;

// The check-parity command's plugin settings (plugins.*), for every plugin loaded here.
std::vector<config::Override>& plugin_settings() {
  static std::vector<config::Override> settings;
  return settings;
}

std::vector<config::Override> with_plugin_settings(std::vector<config::Override> overrides) {
  overrides.insert(overrides.end(), plugin_settings().begin(), plugin_settings().end());
  return overrides;
}

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
                                                    {"frame_rate", "fps"},
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

// The scheduler timestep rule (model.scheduler_timesteps) of the Diffusers release that made a
// recording: `diffusers` of case.json `library` (the primary) or of an alternative recording.
// Empty when the case does not say (the configuration default then applies).
std::string timestep_rule_of(const json& holder, const std::string& where) {
  if (!holder.is_object() || !holder.contains("diffusers")) return "";
  if (!holder["diffusers"].is_string()) throw Error(where + ": 'diffusers' must be a version string", ExitCode::bad_input);
  return schedulers::timestep_rule_name(
      schedulers::timestep_rule_for_diffusers(holder["diffusers"].get<std::string>(), where + " diffusers"));
}

void run_pipeline_end_to_end(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string where = (ctx.dir() / "case.json").string();
  if (!c.contains("repository") || !c["repository"].is_string())
    throw Error(where + ": 'repository' (the model directory, relative to the case) is missing", ExitCode::bad_input);
  const fs::path repo = fs::weakly_canonical(ctx.dir() / c["repository"].get<std::string>());
  if (!fs::is_directory(repo))
    throw Error(where + ": repository " + repo.string() + " does not exist", ExitCode::not_found);
  const json request = request_from_arguments(c.value("call", json()), where);

  std::vector<config::Override> base = with_plugin_settings({{"model.id", repo.string(), "case.json repository"},
                                                             {"model.precision", "fp32", "check-parity"},
                                                             {"run.device", "cpu", "check-parity"}});
  std::string adapter = c.value("plugin", std::string());
  if (adapter.empty()) adapter = adapter_for(repo);
  if (!adapter.empty()) base.push_back({"model.adapter", adapter, "check-parity"});

  // One generate per timestep rule the recordings need (a rule of "" is the default).
  std::map<std::string, std::map<std::string, at::Tensor>> runs;
  auto traced = [&](const std::string& rule) -> const std::map<std::string, at::Tensor>& {
    auto it = runs.find(rule);
    if (it != runs.end()) return it->second;
    std::vector<config::Override> overrides = base;
    if (!rule.empty()) overrides.push_back({"model.scheduler_timesteps", rule, "check-parity (recording's Diffusers)"});
    const config::Config cfg = config::Config::resolve(std::nullopt, overrides);
    pipeline::OpenOptions open;
    open.prepare = false;  // the recorded run has no adapter
    auto pipe = pipeline::Pipeline::open(cfg, open);
    plugin::NamedTensors inputs;
    const auto out = pipe->plugin().generate(request.dump(), inputs);
    std::map<std::string, at::Tensor> by_name;
    for (const auto& [n, t] : out) by_name[n] = t;
    return runs.emplace(rule, std::move(by_name)).first->second;
  };

  // The primary recording (expected.safetensors), run with the rule of its Diffusers release.
  const json library = c.value("library", json::object());
  const std::string primary_rule = timestep_rule_of(library, where + " library");
  const auto& primary = traced(primary_rule);
  const std::size_t first = result.comparisons.size();
  for (const auto& key : ctx.compare_keys()) {
    const auto it = primary.find(key);
    if (it == primary.end()) {
      Comparison cmp;
      cmp.name = key;
      cmp.note = "the plugin's generate trace has no '" + key + "'";
      result.comparisons.push_back(cmp);
      continue;
    }
    ctx.compare(key, it->second, result);
  }

  // Alternative recordings of the same run made with other Diffusers releases (case.json
  // `alternative_recordings`: {name: {"file", "diffusers", "compare"}}), e.g. when a
  // scheduler's timestep table changed between releases: each is compared too, with the rule of
  // its own release (without `diffusers`, the primary's).
  if (!c.contains("alternative_recordings") || !c["alternative_recordings"].is_object()) return;
  const std::string primary_label =
      "recording primary (expected.safetensors" +
      (library.contains("diffusers") && library["diffusers"].is_string()
           ? ", Diffusers " + library["diffusers"].get<std::string>()
           : std::string()) +
      ")";
  for (std::size_t i = first; i < result.comparisons.size(); ++i) {
    auto& note = result.comparisons[i].note;
    note = primary_label + (note.empty() ? "" : ": " + note);
  }
  for (const auto& [name, alt] : c["alternative_recordings"].items()) {
    const std::string alt_where = where + " alternative_recordings." + name;
    if (!alt.is_object() || !alt.contains("file") || !alt["file"].is_string() || !alt.contains("compare") ||
        !alt["compare"].is_object())
      throw Error(alt_where + ": needs 'file' (a safetensors file) and 'compare' (key -> tolerance)", ExitCode::bad_input);
    const std::string file = alt["file"].get<std::string>();
    std::string rule = timestep_rule_of(alt, alt_where);
    if (!alt.contains("diffusers")) rule = primary_rule;
    const auto& got = traced(rule);
    const auto expected = io::load_safetensors(ctx.dir() / file);
    const std::string label = "recording " + name + " (" + file +
                              (alt.contains("diffusers") ? ", Diffusers " + alt["diffusers"].get<std::string>() : "") +
                              ")";
    for (const auto& [key, tol] : alt["compare"].items()) {
      const auto it = got.find(key);
      const auto ex = expected.find(key);
      Comparison cmp;
      if (it == got.end() || ex == expected.end()) {
        cmp.name = key;
        cmp.note = it == got.end() ? "the plugin's generate trace has no '" + key + "'" : file + " has no '" + key + "'";
      } else {
        cmp = compare_tensors(key, it->second, ex->second, Tolerance{tol.value("rtol", 0.0), tol.value("atol", 0.0)});
      }
      cmp.note = label + (cmp.note.empty() ? "" : ": " + cmp.note);
      result.comparisons.push_back(cmp);
    }
  }
}

// ---- model: one plugin component class --------------------------------------------------

config::Config parity_config() {
  return config::Config::resolve(std::nullopt, with_plugin_settings({{"model.precision", "fp32", "check-parity"},
                                                                     {"run.device", "cpu", "check-parity"}}));
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

using plugin::ComponentPtr;

// The component a plugin-class case calls: the class from the case's `plugin` (else the plugin
// that serves the class), built from the case directory's config.json and loaded with the
// case's safetensors `model_files`. Null, with the result marked unsupported, when no plugin
// serves or registers the class.
ComponentPtr plugin_component_of_case(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  std::string name = c.value("plugin", std::string());
  if (name.empty()) name = plugin_for_class(cls);
  if (name.empty()) {
    mark_unsupported(result, unsupported_class_message(cls) + " (no family plugin serves it)");
    return nullptr;
  }
  auto& pc = plugin_classes(name);
  if (!pc.registry->has(cls)) {
    mark_unsupported(result, unsupported_class_message(cls) + " (plugin '" + name + "' does not register it)");
    return nullptr;
  }
  const fs::path config_path = ctx.dir() / "config.json";
  if (!fs::exists(config_path))
    throw Error(config_path.string() + " does not exist (the component's config)", ExitCode::bad_input);
  ComponentPtr comp(
      pc.registry->create(cls, read_file(config_path), ctx.dir().string()));
  plugin::NamedTensors weights;
  for (const auto& file : c.value("model_files", json::array())) {
    const std::string f = file.get<std::string>();
    if (f.size() < 12 || f.substr(f.size() - 12) != ".safetensors") continue;
    for (auto& [n, t] : io::load_safetensors(ctx.dir() / f)) weights.emplace_back(n, t);
  }
  if (weights.empty()) throw Error(where_of(ctx) + ": no safetensors weights in model_files", ExitCode::bad_input);
  plugin::component_load_weights(*comp, weights);
  return comp;
}

// The recorded model call of a `model` or `lora` case: its tensor arguments by name and, as the
// component's forward options, its non-tensor arguments (num_frames, rope scales, ...).
struct RecordedCall {
  plugin::NamedTensors inputs;
  std::string options;
  explicit RecordedCall(const CaseContext& ctx) {
    const json& call = ctx.case_json().at("call");
    for (const auto& [arg, _] : call.at("tensor_args").items()) inputs.emplace_back(arg, ctx.input(arg));
    json o = call.value("scalar_args", json::object());
    o.erase("return_dict");
    options = o.dump();
  }
  // The component's "sample" output for these arguments.
  at::Tensor sample(const yeto_component_v1& comp, const std::string& cls) const {
    return sample_of(outputs(comp, inputs, options), cls);
  }
  // Every output of the component for `args`, with `opts` as its options.
  static std::map<std::string, at::Tensor> outputs(const yeto_component_v1& comp, const plugin::NamedTensors& args,
                                                   const std::string& opts) {
    std::map<std::string, at::Tensor> out;
    for (const auto& [n, t] : plugin::component_forward(comp, args, opts)) out.emplace(n, t);
    return out;
  }
  static at::Tensor sample_of(const std::map<std::string, at::Tensor>& out, const std::string& cls) {
    const auto it = out.find("sample");
    if (it == out.end()) throw Error(cls + " forward returned no 'sample'", ExitCode::failure);
    return it->second;
  }
  // The options with "train": true: the component runs the call in training mode.
  std::string train_options() const {
    json o = json::parse(options);
    o["train"] = true;
    return o.dump();
  }
};

// Gradients of the listed parameters (case.json {grad_key: parameter name}), compared.
void compare_gradients(const CaseContext& ctx, const json& grad_keys, const plugin::NamedTensors& params,
                       CaseResult& result) {
  for (const auto& [grad_key, param] : grad_keys.items()) {
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

// The positional argument names of the recorded call `out = model(a, b, key=...)`, in order.
std::vector<std::string> positional_arguments(const std::string& python) {
  std::vector<std::string> names;
  const auto open = python.find('(');
  const auto close = python.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return names;
  std::string cur;
  int depth = 0;
  auto flush = [&] {
    cur.erase(0, cur.find_first_not_of(' '));
    cur.erase(cur.find_last_not_of(' ') + 1);
    if (!cur.empty() && cur.find('=') == std::string::npos) names.push_back(cur);
    cur.clear();
  };
  for (std::size_t i = open + 1; i < close; ++i) {
    const char ch = python[i];
    if (ch == '(' || ch == '[' || ch == '{') ++depth;
    if (ch == ')' || ch == ']' || ch == '}') --depth;
    if (ch == ',' && depth == 0) {
      flush();
      continue;
    }
    cur += ch;
  }
  flush();
  return names;
}

// The flow-matching training objective of a `model` case (case.json `flow_matching`), for the
// linear path with a velocity target (t = 0 noise, t = 1 data): from the recorded data fm.x1,
// noise fm.x0 and times fm.t, xt = t x1 + (1 - t) x0 and ut = x1 - x0; the model is called as
// recorded with xt and t in place of its first two positional arguments (in training mode when
// `flow_matching.mode` says model.train()); loss_per_sample = mean over the non-batch axes of
// (output - ut)^2, loss = its mean; then the gradients `flow_matching.grad_keys`.
void run_flow_matching(const CaseContext& ctx, const yeto_component_v1& comp, const RecordedCall& call,
                       const plugin::NamedTensors& params, CaseResult& result) {
  const json& c = ctx.case_json();
  const json& fm = c.at("flow_matching");
  const std::string where = where_of(ctx) + " flow_matching";
  const std::string source = fm.value("source", std::string());
  if (source.find("path_type='Linear'") == std::string::npos ||
      source.find("prediction='velocity'") == std::string::npos)
    throw Error(where + ": only the linear path with a velocity target (create_transport(path_type='Linear', "
                "prediction='velocity')) is implemented; 'source' says: " + source,
                ExitCode::bad_input);
  const auto args = positional_arguments(c.at("call").value("python", std::string()));
  if (args.size() < 2)
    throw Error(where + ": call.python must pass the sample and the time as the first two positional arguments",
                ExitCode::bad_input);
  const at::Tensor x1 = ctx.input("fm.x1"), x0 = ctx.input("fm.x0"), t = ctx.input("fm.t");
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x1.dim()), 1);
  shape[0] = t.numel();
  const at::Tensor tb = t.reshape(shape).to(x1.scalar_type());
  const at::Tensor xt = tb * x1 + (1 - tb) * x0;
  const at::Tensor ut = x1 - x0;
  ctx.compare("fm.xt", xt, result);
  ctx.compare("fm.ut", ut, result);

  plugin::NamedTensors inputs = call.inputs;
  bool have_x = false, have_t = false;
  for (auto& [n, v] : inputs) {
    if (n == args[0]) {
      v = xt;
      have_x = true;
    } else if (n == args[1]) {
      v = t;
      have_t = true;
    }
  }
  if (!have_x || !have_t)
    throw Error(where + ": the call's arguments '" + args[0] + "' and '" + args[1] + "' are not tensor_args",
                ExitCode::bad_input);
  for (auto& [n, p] : params) p.mutable_grad() = at::Tensor();
  const bool train = fm.value("mode", std::string()).rfind("model.train()", 0) == 0;
  const at::Tensor out =
      RecordedCall::sample_of(RecordedCall::outputs(comp, inputs, train ? call.train_options() : call.options),
                              ctx.class_name());
  ctx.compare("fm.model_output", out.detach(), result);
  std::vector<std::int64_t> axes;
  for (std::int64_t d = 1; d < out.dim(); ++d) axes.push_back(d);
  const at::Tensor per_sample = (out - ut).pow(2).mean(axes);
  const at::Tensor loss = per_sample.mean();
  ctx.compare("fm.loss_per_sample", per_sample.detach(), result);
  ctx.compare("fm.loss", loss.detach(), result);
  if (!fm.contains("grad_keys")) return;
  loss.backward();
  compare_gradients(ctx, fm["grad_keys"], params, result);
}

bool plugin_computes_case(const CaseContext& ctx, CaseResult& result);

void run_plugin_model(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  // A case of several calls (no single `call`): the plugin computes every output it records.
  if (!c.contains("call") && c.contains("calls")) {
    if (!plugin_computes_case(ctx, result))
      mark_unsupported(result, unsupported_class_message(cls) + " (no family plugin serves it)");
    return;
  }
  const auto comp = plugin_component_of_case(ctx, result);
  if (!comp) return;

  const RecordedCall call(ctx);
  const std::string output = c.at("compare").contains("sample") ? "sample" : c.at("compare").begin().key();
  {
    at::NoGradGuard no_grad;
    ctx.compare(output, call.sample(*comp, cls), result);
  }
  if (!c.contains("backward") && !c.contains("flow_matching")) return;
  auto params = plugin::component_parameters(*comp);
  for (auto& [n, p] : params) {
    p.set_requires_grad(true);
    p.mutable_grad() = at::Tensor();
  }
  if (c.contains("backward")) {
    const json& b = c["backward"];
    // A case that records the training-mode output ("train.sample", and "train.<name>" for the
    // component's other outputs, e.g. auxiliary losses) runs the backward call in training mode.
    const bool train = c.at("compare").contains("train.sample");
    const auto outs = RecordedCall::outputs(*comp, call.inputs, train ? call.train_options() : call.options);
    const at::Tensor sample = RecordedCall::sample_of(outs, cls);
    if (train)
      for (const auto& [n, t] : outs)
        if (c.at("compare").contains("train." + n)) ctx.compare("train." + n, t.detach(), result);
    const auto loss = (sample - ctx.expected(b.value("target_key", std::string("loss_target")))).pow(2).mean();
    ctx.compare(b.value("loss_key", std::string("loss")), loss.detach(), result);
    loss.backward();
    compare_gradients(ctx, b.at("grad_keys"), params, result);
  }
  if (c.contains("flow_matching")) run_flow_matching(ctx, *comp, call, params, result);
}

// ---- LoRA adapters on a plugin's model class ------------------------------------------------
// The `lora` kind: the case's model class (through its plugin, as for `model` cases) runs the
// recorded call as is (sample_base) and with each recorded adapter directory folded into its
// weights, W += scale * B @ A (what PEFT's LoRA layer computes without dropout), through the
// same adapter reader export and merge use: lora_peft at adapter_config.json's lora_alpha / r
// (sample_lora); the Diffusers files, which store no alpha, at Diffusers' scale 1
// (sample_lora_alpha_eq_rank) and at the case's lora_alpha (sample_lora again).
void run_plugin_lora(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  // A case of several calls (a training step with the adapter attached, its gradients): the
  // plugin computes every output it records.
  if (!c.contains("call") && c.contains("calls")) {
    if (!plugin_computes_case(ctx, result))
      mark_unsupported(result, unsupported_class_message(cls) + " (no family plugin serves it)");
    return;
  }
  const auto comp = plugin_component_of_case(ctx, result);
  if (!comp) return;
  const RecordedCall call(ctx);
  at::NoGradGuard no_grad;
  auto sample = [&] { return call.sample(*comp, cls); };
  std::map<std::string, at::Tensor> weights;
  for (const auto& [n, t] : plugin::component_parameters(*comp)) weights.emplace(n, t);
  auto with_adapter = [&](const std::string& dir, std::optional<double> alpha) {
    artifacts::ReadOptions ro;
    ro.alpha = alpha;
    const artifacts::Adapter adapter = artifacts::read_adapter(ctx.dir() / dir, ro);
    std::vector<std::pair<at::Tensor, at::Tensor>> saved;
    for (const auto& [path, m] : adapter.modules_of("transformer")) {
      const auto it = weights.find(path + ".weight");
      if (it == weights.end())
        throw Error(where_of(ctx) + ": " + dir + " adapts '" + path + "', which is not a layer of " + cls,
                    ExitCode::bad_input);
      saved.emplace_back(it->second, it->second.clone());
      it->second.add_((m->B.mm(m->A) * m->scale).to(it->second.scalar_type()));
    }
    if (saved.empty()) throw Error(where_of(ctx) + ": " + dir + " holds no LoRA module", ExitCode::bad_input);
    const at::Tensor out = sample();
    for (auto& [w, original] : saved) w.copy_(original);
    return out;
  };
  // The same expected output reached from a second adapter layout is listed under its own name.
  auto compare_as = [&](const std::string& key, const std::string& source, const at::Tensor& actual) {
    if (!c.at("compare").contains(key)) return;
    result.comparisons.push_back(compare_tensors(key + " (" + source + ")", actual, ctx.expected(key), ctx.tolerance(key)));
  };
  auto exists = [&](const char* dir) { return fs::is_directory(ctx.dir() / dir); };
  if (c.at("compare").contains("sample_base")) ctx.compare("sample_base", sample(), result);
  if (exists("lora_peft")) compare_as("sample_lora", "lora_peft", with_adapter("lora_peft", std::nullopt));
  const std::optional<double> alpha =
      c.contains("lora_config") && c["lora_config"].contains("lora_alpha") && c["lora_config"]["lora_alpha"].is_number()
          ? std::optional<double>(c["lora_config"]["lora_alpha"].get<double>())
          : std::nullopt;
  for (const char* dir : {"lora_diffusers", "lora_model_level"}) {
    if (!exists(dir)) continue;
    compare_as("sample_lora_alpha_eq_rank", dir, with_adapter(dir, std::nullopt));
    if (alpha) compare_as("sample_lora", std::string(dir) + " at lora_alpha", with_adapter(dir, alpha));
  }
  if (result.comparisons.empty())
    throw Error(where_of(ctx) + ": no adapter directory (lora_peft, lora_diffusers, lora_model_level) and no "
                "sample_base to compare",
                ExitCode::bad_input);
}

// ---- recorded cases a plugin computes ------------------------------------------------------
// A case whose class a plugin registers but whose calls no host handler interprets (a family's
// own scheduler or decoder with its pipeline loop): the component is built from the case's
// config (scheduler_config.json for a scheduler case when present, else config.json, else {})
// with the case directory as its folder, and loaded with the case's `model_files` safetensors;
// its forward gets every tensor of inputs.safetensors by name, the tensors of the other
// safetensors files the case lists under `files` as "<file>/<name>", and the options
// {"recorded_case": case.json}. It returns outputs named as the case's compare keys, and each
// key is compared (a key it did not return is a failed comparison).
bool plugin_computes_case(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  const std::string name = plugin_for_class(cls);
  if (name.empty()) return false;
  auto& pc = plugin_classes(name);
  if (!pc.registry->has(cls)) return false;
  std::string config = "{}";
  const bool scheduler = ctx.kind() == "scheduler" && fs::exists(ctx.dir() / "scheduler_config.json");
  if (scheduler)
    config = read_file(ctx.dir() / "scheduler_config.json");
  else if (fs::exists(ctx.dir() / "config.json"))
    config = read_file(ctx.dir() / "config.json");
  ComponentPtr comp(pc.registry->create(cls, config, ctx.dir().string()));
  std::set<std::string> weight_files;
  plugin::NamedTensors weights;
  for (const auto& file : c.value("model_files", json::array())) {
    const std::string f = file.get<std::string>();
    if (f.size() < 12 || f.substr(f.size() - 12) != ".safetensors") continue;
    weight_files.insert(f);
    for (auto& [n, t] : io::load_safetensors(ctx.dir() / f)) weights.emplace_back(n, t);
  }
  if (!weights.empty()) plugin::component_load_weights(*comp, weights);
  plugin::NamedTensors inputs;
  for (const auto& [n, t] : ctx.inputs()) inputs.emplace_back(n, t);
  std::vector<std::string> other_files;
  for (const auto& file : c.value("files", json::array())) other_files.push_back(file.get<std::string>());
  // Other models of the case (extra_model_files {"name": [files]}, e.g. a variant's weights).
  const json extra = c.value("extra_model_files", json::object());  // named: items() must not outlive it
  for (const auto& [group, files] : extra.items())
    if (files.is_array())
      for (const auto& file : files)
        if (file.is_string()) other_files.push_back(file.get<std::string>());
  for (const auto& f : other_files) {
    if (f.size() < 12 || f.substr(f.size() - 12) != ".safetensors" || f == "inputs.safetensors" ||
        f == "expected.safetensors" || weight_files.count(f))
      continue;
    for (auto& [n, t] : io::load_safetensors(ctx.dir() / f)) inputs.emplace_back(f + "/" + n, t);
  }
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> got;
  for (auto& [n, t] : plugin::component_forward(*comp, inputs, json{{"recorded_case", c}}.dump())) got[n] = t;
  for (const auto& key : ctx.compare_keys()) {
    const auto it = got.find(key);
    if (it == got.end()) {
      Comparison cmp;
      cmp.name = key;
      cmp.note = cls + " (plugin '" + name + "') returned no '" + key + "'";
      result.comparisons.push_back(cmp);
      continue;
    }
    ctx.compare(key, it->second, result);
  }
  return true;
}

// A scheduler case of a class the host does not implement: computed by the plugin that serves it.
void run_plugin_scheduler(const CaseContext& ctx, CaseResult& result) {
  if (!plugin_computes_case(ctx, result))
    mark_unsupported(result, unsupported_class_message(ctx.class_name()) + " (no family plugin serves it)");
}

// A case of a kind only family code interprets (e.g. rope): computed by the plugin that serves
// its class.
void run_plugin_computed(const CaseContext& ctx, CaseResult& result) {
  if (!plugin_computes_case(ctx, result))
    mark_unsupported(result, unsupported_class_message(ctx.class_name()) + " (no family plugin serves it)");
}

// A preprocessing case (resize, crop, normalisation recorded around a model) of a class the host
// does not implement: computed by the plugin that serves it.
void run_plugin_preprocess(const CaseContext& ctx, CaseResult& result) {
  if (!plugin_computes_case(ctx, result))
    mark_unsupported(result, unsupported_class_message(ctx.class_name()) + " (no family plugin serves it)");
}

// A loss case (a family's training objective recorded around its model, e.g. Protenix's diffusion
// loss) of a class the host does not implement: computed by the plugin that serves it.
void run_plugin_loss(const CaseContext& ctx, CaseResult& result) {
  if (!plugin_computes_case(ctx, result))
    mark_unsupported(result, unsupported_class_message(ctx.class_name()) + " (no family plugin serves it)");
}

// ---- autoencoder classes served by a plugin (video VAEs) -----------------------------------
// The same case layout as the host's AutoencoderKL cases: calls `model.encode(x)` (outputs
// `...mean`, `...std`, `...logvar`) and `model.decode(z)` (the sample), through the
// component's typed VAE service; further recorded outputs of a call (`encode.patchified_x`,
// `decode.decoder_output`) through the component's forward with {"vae_call": ...}.
void run_plugin_autoencoder(const CaseContext& ctx, CaseResult& result) {
  const json& c = ctx.case_json();
  const std::string cls = ctx.class_name();
  const auto comp = plugin_component_of_case(ctx, result);
  if (!comp) return;
  if (!plugin::component_vae(*comp)) {
    // A decoder with calls of its own (e.g. latents -> a volume): computed by the plugin.
    plugin_computes_case(ctx, result);
    return;
  }
  at::NoGradGuard no_grad;
  for (const auto& call : c.at("calls")) {
    const std::string python = call.value("python", std::string());
    if (!call.contains("tensor_args") || call["tensor_args"].empty())
      throw Error(where_of(ctx) + ": call `" + python + "` has no tensor argument", ExitCode::bad_input);
    const bool encode = python.find(".encode(") != std::string::npos;
    if (!encode && python.find(".decode(") == std::string::npos)
      throw Error(where_of(ctx) + ": call `" + python + "` is neither encode nor decode", ExitCode::bad_input);
    // The first positional argument of the call is the sample / latents (case.json keeps the
    // tensor arguments in a map, so its order says nothing); the others keep their names (temb).
    const auto open = python.find(encode ? ".encode(" : ".decode(") + 8;
    std::string first = python.substr(open, python.find_first_of(",)", open) - open);
    first.erase(0, first.find_first_not_of(' '));
    first.erase(first.find_last_not_of(' ') + 1);
    if (!call["tensor_args"].contains(first)) first = call["tensor_args"].begin().key();
    plugin::NamedTensors args = {{encode ? "sample" : "latents", ctx.input(first)}};
    for (const auto& [arg, _] : call["tensor_args"].items())
      if (arg != first) args.emplace_back(arg, ctx.input(arg));
    std::map<std::string, at::Tensor> got;
    if (encode) {
      auto [mean, logvar] = plugin::vae_encode(*comp, args.front().second);
      got["mean"] = mean;
      got["logvar"] = logvar;
      got["std"] = at::exp(0.5 * logvar);
    } else {
      got["sample"] = plugin::vae_decode(*comp, args.front().second, {args.begin() + 1, args.end()});
    }
    const json outputs = call.value("outputs", json::object());  // named: items() must not outlive it
    // Outputs other than the posterior / the sample (what the encoder saw, the decoder's raw
    // output) come from the component's forward with {"vae_call": "encode" | "decode"}, which
    // returns them by the name after the key's last dot.
    // A decode call's only output is the sample whatever its name.
    auto field_of = [&](const std::string& key) {
      return !encode && outputs.size() == 1 ? std::string("sample") : key.substr(key.rfind('.') + 1);
    };
    bool extra = false;
    for (const auto& [key, _] : outputs.items()) extra = extra || !got.count(field_of(key));
    std::string why;
    if (extra) {
      try {
        const json options = {{"vae_call", encode ? "encode" : "decode"}};
        for (auto& [n, t] : plugin::component_forward(*comp, args, options.dump())) got.emplace(n, t);
      } catch (const Error& e) {
        why = std::string(" (") + e.what() + ")";
      }
    }
    for (const auto& [key, _] : outputs.items()) {
      const std::string field = field_of(key);
      if (!got.count(field)) {
        Comparison cmp;
        cmp.name = key;
        cmp.note = cls + " " + (encode ? "encode" : "decode") + " returned no '" + field + "'" + why;
        result.comparisons.push_back(cmp);
        continue;
      }
      ctx.compare(key, got[field], result);
    }
  }
}

// ---- pipeline helpers a plugin serves -----------------------------------------------------
// A family plugin may register its pipeline class (`LTXPipeline`) as a component whose forward
// runs the pipeline's static helpers: options {"method": NAME, "args": [...], "kwargs": {...}},
// where a tensor argument is {"tensor": INPUT} naming one of the inputs; the value comes back as
// the output "result". Every `Class.name(` a case's snippets call becomes such a function.
json helper_argument(const py::Value& v, const std::string& name, plugin::NamedTensors& tensors) {
  if (v.is_none()) return nullptr;
  if (v.is_tensor()) {
    tensors.emplace_back(name, v.to_tensor());
    return {{"tensor", name}};
  }
  if (std::holds_alternative<bool>(v.v)) return v.to_bool();
  if (std::holds_alternative<std::int64_t>(v.v)) return v.to_int();
  if (std::holds_alternative<double>(v.v)) return v.to_double();
  if (std::holds_alternative<std::string>(v.v)) return v.to_string();
  if (v.is_list()) {
    json a = json::array();
    std::size_t i = 0;
    for (const auto& item : v.list()) a.push_back(helper_argument(item, name + "." + std::to_string(i++), tensors));
    return a;
  }
  throw Error("pipeline helper argument " + name + ": cannot pass " + v.describe() + " to a plugin", ExitCode::bad_input);
}

std::map<std::string, py::Function> plugin_pipeline_helpers(const CaseContext& ctx) {
  const std::string cls = ctx.class_name();
  const std::string name = plugin_for_class(cls);
  if (name.empty()) return {};
  std::set<std::string> methods;
  const std::regex called(cls + R"(\.([A-Za-z_][A-Za-z0-9_]*)\s*\()");
  for (const auto& call : ctx.case_json().value("calls", json::array())) {
    const std::string python = call.value("python", std::string());
    for (std::sregex_iterator it(python.begin(), python.end(), called), end; it != end; ++it) methods.insert((*it)[1]);
  }
  if (methods.empty()) return {};
  std::map<std::string, py::Function> fns;
  std::shared_ptr<const yeto_component_v1> comp;
  try {
    auto& pc = plugin_classes(name);
    if (!pc.registry->has(cls)) return {};
    comp.reset(pc.registry->create(cls, "{}", ""), plugin::ComponentDeleter());
  } catch (const std::exception& e) {
    // A plugin that cannot be loaded here leaves its helpers unsupported, with the reason.
    const std::string why = e.what();
    for (const auto& method : methods)
      fns[cls + "." + method] = [cls, method, name, why](const py::ValueList&, const py::Kwargs&) -> py::Value {
        throw py::Unsupported(cls + "." + method + ": plugin '" + name + "' is not available: " + why);
      };
    return fns;
  }
  for (const auto& method : methods) {
    fns[cls + "." + method] = [comp, method, cls](const py::ValueList& args, const py::Kwargs& kwargs) {
      plugin::NamedTensors tensors;
      json options = {{"method", method}, {"args", json::array()}, {"kwargs", json::object()}};
      for (std::size_t i = 0; i < args.size(); ++i)
        options["args"].push_back(helper_argument(args[i], "args." + std::to_string(i), tensors));
      for (const auto& [k, v] : kwargs) options["kwargs"][k] = helper_argument(v, "kwargs." + k, tensors);
      for (const auto& [n, t] : plugin::component_forward(*comp, tensors, options.dump()))
        if (n == "result") return py::Value(t);
      throw Error(cls + "." + method + ": the plugin returned no 'result'", ExitCode::failure);
    };
  }
  return fns;
}

}  // namespace

std::string plugin_for_class(const std::string& class_name) {
  const config::Config cfg = parity_config();
  const auto options = plugin::LoaderOptions::from_config(cfg, plugin::LoaderOptions::default_install_roots());
  return plugin::plugin_serving(plugin::Catalog::scan(options.dirs), options, class_name);
}

void set_parity_plugin_settings(const config::Config& cfg) {
  auto& s = plugin_settings();
  s.clear();
  for (const char* key : {"plugins.dirs", "plugins.trusted_keys", "plugins.revoked_keys", "plugins.accept_licenses"})
    s.push_back({key, json(cfg.get_list(key)).dump(), "check-parity configuration"});
  s.push_back({"plugins.allow_unsigned", cfg.get_bool("plugins.allow_unsigned") ? "true" : "false",
               "check-parity configuration"});
}

std::string pipeline_request_for_case(const std::string& case_json_text) {
  const json c = json::parse(case_json_text);
  return request_from_arguments(c.value("call", json()), "case.json").dump();
}

void register_plugin_parity_kinds() {
  register_kind("pipeline_end_to_end", run_pipeline_end_to_end);
  // Every model class the host does not implement (the shared LTX-2 vocoders are host classes).
  register_kind("model", parity::class_dispatcher("model"));
  register_class("model", parity::kAnyClass, run_plugin_model);
  register_kind("lora", run_plugin_lora);
  // Every autoencoder class the host does not implement: the plugin that serves it, through
  // its component's VAE service.
  register_class("autoencoder", parity::kAnyClass, run_plugin_autoencoder);
  // Every scheduler class the host does not implement: computed by the plugin that serves it.
  register_class("scheduler", parity::kAnyClass, run_plugin_scheduler);
  // Preprocessing recorded around a model (an image conditioner's resize, crop and normalisation):
  // computed by the plugin that serves the class.
  register_kind("preprocess", run_plugin_preprocess);
  // Training losses recorded around a model class: computed by the plugin that serves the class.
  register_kind("loss", run_plugin_loss);
  // Rotary-embedding helpers recorded as functions of a family's model code (tables, their
  // application): computed by the plugin that serves the class.
  register_kind("rope", run_plugin_computed);
  // A family's sampling loop recorded end to end (its own scheduler, guidance branches, model
  // calls): computed by the plugin that serves the class.
  register_kind("sampler", run_plugin_computed);
  set_pipeline_helper_provider(plugin_pipeline_helpers);
}

}  // namespace yeto::app
