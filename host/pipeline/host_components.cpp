#include "pipeline/host_components.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "config/config.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/repository.hpp"
#include "models/model_components.hpp"
#include "plugin/class_loader.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "schedulers/scheduler.hpp"
#include "text/text_fix.hpp"
#include "text/tokenizer_components.hpp"
#include "yeto/nn/state_dict.hpp"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

namespace yeto::pipeline {
namespace {

using nlohmann::json;
using Named = std::vector<std::pair<std::string, at::Tensor>>;

template <class F>
yeto_status run(yeto_error* e, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return YETO_OK;
  } catch (const c10::Error& x) {
    sdk::write_error(e, x.what_without_backtrace());
    return YETO_ERR_INVALID_ARGUMENT;
  } catch (const Error& x) {
    sdk::write_error(e, x.what());
    return x.code() == ExitCode::not_found ? YETO_ERR_NOT_FOUND
           : x.code() == ExitCode::bad_input ? YETO_ERR_INVALID_ARGUMENT
                                             : YETO_ERR_INTERNAL;
  } catch (...) {
    return sdk::detail::translate_current_exception(e);
  }
}

Named from_c(const yeto_named_tensors* in) {
  Named out;
  if (!in) return out;
  for (std::size_t i = 0; i < in->count; ++i) out.emplace_back(in->names[i], sdk::borrow(in->tensors[i]));
  return out;
}

void to_c(Named tensors, const yeto_named_tensors_out* out) {
  if (!out || !out->push) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "no output sink given");
  for (auto& [name, t] : tensors) {
    const yeto_status s = out->push(out->context, name.c_str(), sdk::to_handle(std::move(t)));
    if (s != YETO_OK) sdk::fail(s, "the caller refused output tensor '" + name + "'");
  }
}

const at::Tensor* find(const Named& in, const std::string& name) {
  for (const auto& [n, t] : in)
    if (n == name) return &t;
  return nullptr;
}

std::string names_of(const Named& in) {
  std::vector<std::string> n;
  for (const auto& x : in) n.push_back(x.first);
  return n.empty() ? "none" : join(n, ", ");
}

const at::Tensor& need(const Named& in, const std::string& name, const std::string& where) {
  const at::Tensor* t = find(in, name);
  if (!t || !t->defined())
    sdk::fail(YETO_ERR_NOT_FOUND, where + ": needs input tensor '" + name + "' (given: " + names_of(in) + ")");
  return *t;
}

json parse_options(const char* text, const std::string& where) {
  const std::string s = text && *text ? text : "{}";
  json j = json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": options must be a JSON object, got: " + s.substr(0, 200));
  return j;
}

std::string method_of(const json& options, const std::string& fallback, const std::string& where) {
  if (!options.contains("method")) {
    if (fallback.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": options need {\"method\": ...}");
    return fallback;
  }
  if (!options["method"].is_string()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": \"method\" must be a string");
  return options["method"].get<std::string>();
}

[[noreturn]] void unknown_method(const std::string& where, const std::string& method,
                                 const std::vector<std::string>& known) {
  sdk::fail(YETO_ERR_UNSUPPORTED, where + ": no method '" + method + "'" + did_you_mean(method, known) +
                                      " (methods: " + join(known, ", ") + ")");
}

template <class T>
T option(const json& o, const std::string& key, T fallback, const std::string& where) {
  if (!o.contains(key) || o[key].is_null()) return fallback;
  try {
    return o[key].get<T>();
  } catch (const json::exception&) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": option \"" + key + "\" has the wrong type: " + o[key].dump());
  }
}

// The dtype and device the module computes in (its first floating parameter or buffer).
at::TensorOptions module_options(torch::nn::Module& m) {
  for (const auto& p : m.parameters())
    if (p.is_floating_point()) return p.options();
  for (const auto& b : m.buffers())
    if (b.is_floating_point()) return b.options();
  return at::TensorOptions().dtype(at::kFloat);
}

at::Tensor as_input(const at::Tensor& t, const at::TensorOptions& o) {
  return t.is_floating_point() ? t.to(o.device(), o.dtype().toScalarType()) : t.to(o.device());
}

// ---- the methods of each host class -----------------------------------------------------------

Named vae_forward(models::AutoencoderKLComponent& c, const Named& in, const json& o, const std::string& where) {
  const std::string method = method_of(o, "", where);
  const auto opts = module_options(*c.vae);
  if (method == "encode") {
    const auto dist = c.vae->encode(as_input(need(in, "sample", where + " encode"), opts));
    return {{"mean", dist.mean}, {"logvar", dist.logvar}};
  }
  if (method == "decode") return {{"sample", c.vae->decode(as_input(need(in, "latents", where + " decode"), opts))}};
  unknown_method(where, method, {"decode", "encode"});
}

// The "encode" method's inputs, shared by the CLIP and T5 text encoders: token ids (and an
// optional attention mask) on the module's device, and whether hidden states are wanted.
struct EncodeCall {
  at::Tensor ids;
  at::Tensor mask;  // undefined when none was given
  bool hidden = false;
};

EncodeCall encode_call(const at::Device& dev, const Named& in, const json& o, const std::string& where) {
  const std::string method = method_of(o, "encode", where);
  if (method != "encode") unknown_method(where, method, {"encode"});
  EncodeCall call;
  call.ids = need(in, "input_ids", where + " encode").to(dev, at::kLong);
  const at::Tensor* mask = find(in, "attention_mask");
  if (mask && mask->defined()) call.mask = mask->to(dev);
  call.hidden = option<bool>(o, "output_hidden_states", false, where);
  return call;
}

void add_hidden_states(Named& out, const std::vector<at::Tensor>& hidden_states, bool wanted) {
  for (std::size_t i = 0; wanted && i < hidden_states.size(); ++i)
    out.emplace_back("hidden_states." + std::to_string(i), hidden_states[i]);
}

Named clip_forward(models::CLIPTextComponent& c, const Named& in, const json& o, const std::string& where) {
  const auto call = encode_call(module_options(*c.model).device(), in, o, where);
  const auto r = c.model->forward(call.ids, call.mask, call.hidden);
  Named out = {{"last_hidden_state", r.last_hidden_state}};
  if (c.model->with_projection())
    out.emplace_back("text_embeds", r.text_embeds);
  else
    out.emplace_back("pooler_output", r.pooler_output);
  add_hidden_states(out, r.hidden_states, call.hidden);
  return out;
}

Named t5_forward(models::T5EncoderComponent& c, const Named& in, const json& o, const std::string& where) {
  const auto call = encode_call(module_options(*c.model).device(), in, o, where);
  const auto r = c.model->forward(call.ids, call.mask, call.hidden);
  Named out = {{"last_hidden_state", r.last_hidden_state}};
  add_hidden_states(out, r.hidden_states, call.hidden);
  return out;
}

Named tokenizer_forward(text::TokenizerComponent& c, const json& o, const std::string& where) {
  const std::string method = method_of(o, "tokenize", where);
  if (method != "tokenize") unknown_method(where, method, {"tokenize"});
  std::vector<std::string> texts;
  if (!o.contains("text")) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: options need \"text\": [\"...\"]");
  if (o["text"].is_string()) {
    texts.push_back(o["text"].get<std::string>());
  } else if (o["text"].is_array()) {
    for (const auto& t : o["text"]) {
      if (!t.is_string()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: \"text\" must hold strings");
      texts.push_back(t.get<std::string>());
    }
  } else {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: \"text\" must be a string or an array of strings");
  }
  if (texts.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: \"text\" is empty");
  // Optional pipeline-level cleanup before tokenizing ("prompt_clean": Diffusers' prompt_clean).
  const std::string clean = option<std::string>(o, "clean", "none", where);
  if (clean == "prompt_clean")
    for (auto& t : texts) t = text::prompt_clean(t);
  else if (clean != "none")
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: clean must be none or prompt_clean, not '" + clean + "'");
  text::EncodeOptions eo;
  const std::string padding = option<std::string>(o, "padding", "max_length", where);
  if (padding == "max_length")
    eo.padding = text::Padding::max_length;
  else if (padding == "longest")
    eo.padding = text::Padding::longest;
  else if (padding == "none")
    eo.padding = text::Padding::none;
  else
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: padding must be max_length, longest or none, not '" +
                                             padding + "'");
  eo.truncation = option<bool>(o, "truncation", true, where);
  eo.add_special_tokens = option<bool>(o, "add_special_tokens", true, where);
  if (o.contains("max_length") && !o["max_length"].is_null()) {
    const auto n = option<std::int64_t>(o, "max_length", 0, where);
    if (n <= 0) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: max_length must be positive");
    eo.max_length = n;
  }
  const auto enc = c.tokenizer().encode_batch(texts, eo);
  const std::size_t len = enc.front().input_ids.size();
  for (const auto& e : enc)
    if (e.input_ids.size() != len)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: the rows have different lengths with padding '" +
                                               padding + "'; use \"padding\": \"longest\" or \"max_length\"");
  const auto b = static_cast<std::int64_t>(enc.size());
  at::Tensor ids = at::empty({b, static_cast<std::int64_t>(len)}, at::kLong);
  at::Tensor mask = at::empty({b, static_cast<std::int64_t>(len)}, at::kLong);
  for (std::int64_t i = 0; i < b; ++i) {
    std::copy(enc[i].input_ids.begin(), enc[i].input_ids.end(), ids[i].data_ptr<std::int64_t>());
    std::copy(enc[i].attention_mask.begin(), enc[i].attention_mask.end(), mask[i].data_ptr<std::int64_t>());
  }
  return {{"input_ids", ids}, {"attention_mask", mask}};
}

Named scheduler_forward(schedulers::Scheduler& s, const Named& in, const json& o, const std::string& where) {
  const std::string method = method_of(o, "", where);
  if (method == "set_timesteps") {
    schedulers::SetTimestepsArgs a;
    if (o.contains("num_inference_steps") && !o["num_inference_steps"].is_null())
      a.num_inference_steps = option<std::int64_t>(o, "num_inference_steps", 0, where);
    if (o.contains("sigmas") && !o["sigmas"].is_null())
      a.sigmas = option<std::vector<double>>(o, "sigmas", {}, where);
    if (o.contains("mu") && !o["mu"].is_null()) a.mu = option<double>(o, "mu", 0.0, where);
    if (!a.num_inference_steps && !a.sigmas)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " set_timesteps: give \"num_inference_steps\" or \"sigmas\"");
    s.set_timesteps(a);
    Named out = {{"timesteps", s.timesteps()}};
    if (s.sigmas().defined()) out.emplace_back("sigmas", s.sigmas());
    return out;
  }
  if (method == "step") {
    const std::string w = where + " step";
    return {{"prev_sample", s.step(need(in, "model_output", w), need(in, "timestep", w), need(in, "sample", w))}};
  }
  if (method == "training_batch") {
    const std::string w = where + " training_batch";
    const auto b = s.training_batch(need(in, "x0", w), need(in, "noise", w), need(in, "indices", w));
    return {{"noisy", b.noisy},     {"target", b.target},   {"timesteps", b.timesteps},
            {"alpha_t", b.alpha_t}, {"sigma_t", b.sigma_t}, {"snr", b.snr}};
  }
  if (method == "add_noise") {
    const std::string w = where + " add_noise";
    return {{"noisy", s.add_noise(need(in, "original", w), need(in, "noise", w), need(in, "timesteps", w))}};
  }
  unknown_method(where, method, {"add_noise", "set_timesteps", "step", "training_batch"});
}

// ---- the C table --------------------------------------------------------------------------------

struct HostBox {
  yeto_component_v1 table{};
  std::string class_name;
  std::shared_ptr<io::Component> component;
};

void host_destroy(void* self) { delete static_cast<HostBox*>(self); }

Named dispatch(HostBox& box, const Named& in, const json& o) {
  const std::string where = "host component " + box.class_name;
  io::Component* c = box.component.get();
  // Frozen host modules: no graph unless asked for ({"grad": true}).
  const bool grad = option<bool>(o, "grad", false, where);
  std::optional<torch::NoGradGuard> no_grad;
  if (!grad) no_grad.emplace();
  if (auto* v = dynamic_cast<models::AutoencoderKLComponent*>(c)) return vae_forward(*v, in, o, where);
  if (auto* t = dynamic_cast<models::CLIPTextComponent*>(c)) return clip_forward(*t, in, o, where);
  if (auto* t = dynamic_cast<models::T5EncoderComponent*>(c)) return t5_forward(*t, in, o, where);
  if (auto* t = dynamic_cast<text::TokenizerComponent*>(c)) return tokenizer_forward(*t, o, where);
  if (auto* s = dynamic_cast<schedulers::Scheduler*>(c)) return scheduler_forward(*s, in, o, where);
  sdk::fail(YETO_ERR_UNSUPPORTED, where + " has no forward() methods");
}

Named parameters_of(HostBox& box) {
  Named out;
  if (auto* m = dynamic_cast<io::ModuleComponent*>(box.component.get()))
    for (auto& [n, t] : nn::named_tensors(m->module())) out.emplace_back(n, t);
  return out;
}

void load_into(HostBox& box, const Named& weights, const json& o) {
  const std::string where = "host component " + box.class_name;
  const bool strict = option<bool>(o, "strict", true, where);
  auto* m = dynamic_cast<io::ModuleComponent*>(box.component.get());
  if (!m) {
    if (weights.empty()) return;
    sdk::fail(YETO_ERR_UNSUPPORTED, where + " has no weights to load");
  }
  std::map<std::string, at::Tensor> map;
  for (const auto& [n, t] : weights) map[n] = t;
  nn::LoadOptions lo;
  lo.strict = false;  // a batch holds only some of the names: missing ones are not an error here
  nn::LoadReport r;
  try {
    r = nn::load_named_tensors(m->module(), map, lo);
  } catch (const std::invalid_argument& e) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": " + e.what());
  }
  if (strict && !r.unexpected.empty())
    sdk::fail(YETO_ERR_NOT_FOUND, where + " has no parameter or buffer named " + join(r.unexpected, ", "));
}

struct HostCtor {
  const io::ComponentRegistry* registry;
};

}  // namespace

const yeto_component_v1* wrap_host_component(std::shared_ptr<io::Component> component) {
  if (!component) throw Error("wrap_host_component: no component");
  auto box = std::make_unique<HostBox>();
  box->class_name = component->class_name();
  box->component = std::move(component);
  yeto_component_v1& t = box->table;
  t.struct_size = sizeof t;
  t.abi_version = YETO_ABI_VERSION;
  t.self = box.get();
  t.class_name = box->class_name.c_str();
  t.forward = [](void* self, const yeto_named_tensors* in, const char* options, const yeto_named_tensors_out* out,
                 yeto_error* e) {
    return run(e, [&] {
      auto& b = *static_cast<HostBox*>(self);
      to_c(dispatch(b, from_c(in), parse_options(options, "host component " + b.class_name)), out);
    });
  };
  t.parameters = [](void* self, const yeto_named_tensors_out* out, yeto_error* e) {
    return run(e, [&] { to_c(parameters_of(*static_cast<HostBox*>(self)), out); });
  };
  t.load_weights = [](void* self, const yeto_named_tensors* w, const char* options, yeto_error* e) {
    return run(e, [&] {
      auto& b = *static_cast<HostBox*>(self);
      load_into(b, from_c(w), parse_options(options, "host component " + b.class_name));
    });
  };
  t.destroy = &host_destroy;
  return &box.release()->table;
}

std::shared_ptr<io::Component> host_component_of(const yeto_component_v1* table) {
  if (!table || table->destroy != &host_destroy || !table->self) return nullptr;
  auto* box = static_cast<HostBox*>(table->self);
  return &box->table == table ? box->component : nullptr;
}

void ensure_builtin_components() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& r = io::ComponentRegistry::global();
    if (!r.has("FlowMatchEulerDiscreteScheduler")) schedulers::register_scheduler_components(r);
    if (!r.has("CLIPTokenizer")) text::register_tokenizer_components(r);
    if (!r.has("AutoencoderKL")) models::register_model_components(r);
  });
}

void register_host_classes(plugin::ComponentRegistry& target, const io::ComponentRegistry& host) {
  static auto* ctx = new HostCtor{nullptr};  // one context per registry would do; the host has one
  ctx->registry = &host;
  for (const auto& cls : host.classes()) {
    if (target.has(cls)) continue;  // a plugin's own class (also one exposed to `host`) stays
    try {
      target.add(
          cls,
          [](void* c, const char* class_name, const char* config_json, const char* dir, const yeto_component_v1** out,
             yeto_error* e) -> yeto_status {
            return run(e, [&] {
              const auto* hc = static_cast<const HostCtor*>(c);
              io::ComponentSource src;
              src.class_name = class_name ? class_name : "";
              src.dir = dir ? dir : "";
              src.config = parse_options(config_json, "config of " + src.class_name);
              *out = wrap_host_component(hc->registry->create(src));
            });
          },
          ctx, "host");
    } catch (const Error&) {
      // registered concurrently by someone else: theirs stays
    }
  }
}

PluginComponent::PluginComponent(std::string class_name, std::string origin, const yeto_component_v1* table)
    : class_name_(std::move(class_name)), origin_(std::move(origin)), table_(table) {}

PluginComponent::~PluginComponent() {
  if (table_ && table_->destroy) table_->destroy(table_->self);
}

void expose_plugin_class(io::ComponentRegistry& host, const std::string& class_name, const std::string& kind,
                         plugin::ComponentRegistry& source) {
  const std::string origin = source.origin(class_name);
  if (origin.empty() || origin == "host") return;  // not a plugin class: the host's own stays
  host.add(
      class_name, kind,
      [class_name, &source](const io::ComponentSource& src) -> std::shared_ptr<io::Component> {
        const auto* t = source.create(class_name, src.config.dump(), src.dir.string());
        return std::make_shared<PluginComponent>(class_name, source.origin(class_name), t);
      });
}

void install_plugin_class_loader() {
  plugin::set_model_class_loader([](const config::Config& cfg, const std::string& /*spec*/,
                                    const io::DiffusersRepo& repo) {
    try {
      const plugin::LoaderOptions lo = plugin::LoaderOptions::from_config(cfg);
      const plugin::Catalog catalog = plugin::Catalog::scan(lo.dirs);
      const std::string name = plugin::select_plugin(cfg, catalog, lo, &repo.model_index()).name;
      if (name.empty()) return;
      plugin::HostApiOptions ho;
      ho.plugin_name = name;
      ho.config_values = plugin::config_values(cfg);
      const plugin::LoadedPlugin& loaded = plugin::load(name, lo, plugin::make_host_api(ho));
      plugin::Instance inst(loaded, ho.config_values.dump());
      auto& creg = plugin::ComponentRegistry::global();
      if (inst.has(YETO_CAP_COMPONENTS)) inst.register_components(creg);
      // Kinds: the plan's, else from the component names that use a class.
      std::map<std::string, std::string> kinds;
      for (const auto& c : repo.components())
        if (!c.name.empty()) kinds.emplace(c.class_name, kind_for_component_name(c.name));
      if (inst.has(YETO_CAP_PIPELINE)) {
        const json plan = json::parse(inst.load_pipeline(repo.dir().string(), repo.model_index().dump()), nullptr, false);
        if (plan.is_object() && plan.contains("components") && plan["components"].is_object())
          for (const auto& [n, e] : plan["components"].items())
            if (e.is_object() && e.contains("class") && e["class"].is_string())
              kinds[e["class"].get<std::string>()] =
                  e.contains("kind") && e["kind"].is_string() ? e["kind"].get<std::string>() : kind_for_component_name(n);
      }
      const std::string origin = "plugin " + loaded.manifest.name;
      for (const auto& cls : creg.names())
        if (creg.origin(cls) == origin)
          expose_plugin_class(io::ComponentRegistry::global(), cls, kinds.count(cls) ? kinds[cls] : "component", creg);
    } catch (const std::exception& e) {
      spdlog::warn("the model's plugin classes are not shown: {}", e.what());
    }
  });
}

std::string kind_for_component_name(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (starts("transformer") || starts("unet") || name == "prior" || name == "model") return "denoiser";
  if (starts("vae")) return "vae";
  if (starts("text_encoder")) return "text_encoder";
  if (starts("tokenizer")) return "tokenizer";
  if (starts("scheduler")) return "scheduler";
  return name;
}

}  // namespace yeto::pipeline
