// Idiomatic C++/LibTorch on top of the C ABI: derive from yeto::sdk::Plugin, override the
// hooks you declared as capabilities, and write YETO_PLUGIN(YourPlugin) once. The macro
// generates the exported entry point, the descriptor (from the manifest values that
// yeto_add_plugin generated into <yeto_plugin_info.h>) and the C glue; every exception a
// hook throws becomes a status and a message (c10::Error without its backtrace).
//
// Include this header only in plugins: it pulls in <ATen/core/Tensor.h>.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "yeto/plugin.h"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

namespace yeto::sdk {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Looks up a tensor by name; throws Failure(YETO_ERR_NOT_FOUND) naming the missing one.
inline const at::Tensor& get(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string have;
  for (const auto& nt : tensors) have += (have.empty() ? "" : ", ") + nt.first;
  fail(YETO_ERR_NOT_FOUND, "no tensor named '" + name + "' (have: " + (have.empty() ? "none" : have) + ")");
}
inline bool has(const NamedTensors& tensors, const std::string& name) {
  for (const auto& nt : tensors)
    if (nt.first == name) return true;
  return false;
}

// Exception translation including LibTorch's c10::Error (message without the backtrace).
template <class F>
yeto_status guard(yeto_error* error, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return YETO_OK;
  } catch (const c10::Error& e) {
    write_error(error, e.what_without_backtrace());
    return YETO_ERR_INVALID_ARGUMENT;
  } catch (...) {
    return detail::translate_current_exception(error);
  }
}

namespace detail {

// Borrowed C view of named tensors for one call; `tensors` must outlive it.
struct CView {
  std::vector<const char*> names;
  std::vector<yeto_tensor> handles;
  yeto_named_tensors view{};
  explicit CView(const NamedTensors& tensors) {
    names.reserve(tensors.size());
    handles.reserve(tensors.size());
    for (const auto& [n, t] : tensors) {
      names.push_back(n.c_str());
      handles.push_back(t.defined() ? reinterpret_cast<yeto_tensor>(t.unsafeGetTensorImpl()) : nullptr);
    }
    view.struct_size = sizeof view;
    view.abi_version = YETO_ABI_VERSION;
    view.count = tensors.size();
    view.names = names.data();
    view.tensors = handles.data();
  }
  CView(const CView&) = delete;
  CView& operator=(const CView&) = delete;
};

// A sink that adopts every pushed tensor into `tensors`.
struct CCollect {
  NamedTensors tensors;
  yeto_named_tensors_out sink{};
  CCollect() {
    sink.struct_size = sizeof sink;
    sink.abi_version = YETO_ABI_VERSION;
    sink.context = this;
    sink.push = [](void* ctx, const char* name, yeto_tensor t) -> yeto_status {
      at::Tensor owned = adopt(t);  // owned in every case, also when refused
      if (!name) return YETO_ERR_INVALID_ARGUMENT;
      static_cast<CCollect*>(ctx)->tensors.emplace_back(name, std::move(owned));
      return YETO_OK;
    };
  }
  CCollect(const CCollect&) = delete;
  CCollect& operator=(const CCollect&) = delete;
};

struct ComponentBox;
inline void box_destroy(void* self);

}  // namespace detail

class Component;

// A borrowed component (one of the pipeline's, from Host::component): valid until the
// plugin instance is destroyed. Never destroy it.
class ComponentRef {
 public:
  ComponentRef() = default;
  explicit ComponentRef(const yeto_component_v1* c) : c_(c) {}
  explicit operator bool() const { return c_ != nullptr; }
  const yeto_component_v1* get() const { return c_; }
  std::string class_name() const { return c_ && c_->class_name ? c_->class_name : ""; }

  // options_json: a JSON object; host components want {"method": ...} (docs/PLUGIN_SDK.md,
  // "Host components"). Throws Failure with the component's status and message.
  NamedTensors forward(const NamedTensors& inputs, const std::string& options_json = "{}") const {
    require();
    detail::CView in(inputs);
    detail::CCollect out;
    ErrorBuffer err;
    const yeto_status s = c_->forward(c_->self, &in.view, options_json.c_str(), &out.sink, err.get());
    if (s != YETO_OK) fail(s, "component " + class_name() + " forward failed: " + err.message());
    return std::move(out.tensors);
  }
  // Every parameter and buffer by Diffusers name (the live tensors, not copies).
  NamedTensors parameters() const {
    require();
    detail::CCollect out;
    ErrorBuffer err;
    const yeto_status s = c_->parameters(c_->self, &out.sink, err.get());
    if (s != YETO_OK) fail(s, "component " + class_name() + " parameters failed: " + err.message());
    return std::move(out.tensors);
  }

  // The plugin's own Component object behind a component of one of its own classes
  // (registered through sdk::ComponentRegistry in this library), or nullptr when this
  // component is of another class, of another library, or not a C. `expected_class` is the
  // Diffusers class name the plugin registered it under.
  template <class C>
  C* as(const std::string& expected_class) const;

 private:
  void require() const {
    if (!c_) fail(YETO_ERR_INVALID_ARGUMENT, "empty component reference");
  }
  const yeto_component_v1* c_ = nullptr;
};

// ---- typed host services (ABI 1.2) -----------------------------------------------------------

namespace detail {
// A borrowed handle of `t` for one call (NULL for an undefined tensor).
inline yeto_tensor view(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<yeto_tensor>(t.unsafeGetTensorImpl()) : nullptr;
}
inline at::Tensor take(yeto_tensor t) { return t ? adopt(t) : at::Tensor(); }
}  // namespace detail

struct Posterior {
  at::Tensor mean, logvar;  // raw latents [B, C, h, w]
};

// A VAE of the pipeline (Host::vae): encode pixels in [-1, 1], decode raw latents. grad: keep
// the autograd graph (frozen host modules compute without one).
class VaeService {
 public:
  VaeService(const yeto_vae_service* s, std::string name) : s_(s), name_(std::move(name)) {}
  Posterior encode(const at::Tensor& pixels, bool grad = false) const {
    yeto_tensor mean = nullptr, logvar = nullptr;
    ErrorBuffer err;
    const yeto_status st = s_->encode(s_->self, detail::view(pixels), grad ? YETO_SERVICE_GRAD : 0u, &mean, &logvar,
                                      err.get());
    Posterior p{detail::take(mean), detail::take(logvar)};
    if (st != YETO_OK) fail(st, name_ + ": encode: " + err.message());
    return p;
  }
  // extra: the decoder's keyword tensors ("temb" for a timestep-conditioned decoder).
  at::Tensor decode(const at::Tensor& latents, const NamedTensors& extra = {}, bool grad = false) const {
    yeto_tensor sample = nullptr;
    ErrorBuffer err;
    detail::CView x(extra);
    const yeto_status st =
        s_->decode(s_->self, detail::view(latents), &x.view, grad ? YETO_SERVICE_GRAD : 0u, &sample, err.get());
    at::Tensor out = detail::take(sample);
    if (st != YETO_OK) fail(st, name_ + ": decode: " + err.message());
    return out;
  }

 private:
  const yeto_vae_service* s_;
  std::string name_;
};

// A text encoder of the pipeline (Host::text_encoder): "last_hidden_state", "pooler_output" or
// "text_embeds", and with hidden_states every "hidden_states.<i>".
class TextEncoderService {
 public:
  TextEncoderService(const yeto_text_encoder_service* s, std::string name) : s_(s), name_(std::move(name)) {}
  NamedTensors encode(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}, bool hidden_states = false,
                      bool grad = false) const {
    detail::CCollect out;
    ErrorBuffer err;
    const std::uint32_t flags = (hidden_states ? YETO_SERVICE_HIDDEN_STATES : 0u) | (grad ? YETO_SERVICE_GRAD : 0u);
    const yeto_status st = s_->encode(s_->self, detail::view(input_ids), detail::view(attention_mask), flags,
                                      &out.sink, err.get());
    if (st != YETO_OK) fail(st, name_ + ": encode: " + err.message());
    return std::move(out.tensors);
  }

 private:
  const yeto_text_encoder_service* s_;
  std::string name_;
};

struct TokenizeOptions {
  std::int64_t max_length = 0;  // 0: the tokenizer's model_max_length
  yeto_padding padding = YETO_PADDING_MAX_LENGTH;
  bool truncation = true;
  bool add_special_tokens = true;
  bool prompt_clean = false;  // Diffusers' prompt_clean before tokenizing
};
struct Tokens {
  at::Tensor input_ids;       // [B, L] int64
  at::Tensor attention_mask;  // [B, L] int64, 1 = token
};

// A tokenizer of the pipeline (Host::tokenizer).
class TokenizerService {
 public:
  TokenizerService(const yeto_tokenizer_service* s, std::string name) : s_(s), name_(std::move(name)) {}
  Tokens tokenize(const std::vector<std::string>& texts, const TokenizeOptions& options = {}) const {
    std::vector<const char*> c;
    c.reserve(texts.size());
    for (const auto& t : texts) c.push_back(t.c_str());
    yeto_tokenize_options o{};
    o.struct_size = sizeof o;
    o.abi_version = YETO_ABI_VERSION;
    o.max_length = options.max_length;
    o.padding = options.padding;
    o.clean = options.prompt_clean ? YETO_CLEAN_PROMPT : YETO_CLEAN_NONE;
    o.truncation = options.truncation ? 1u : 0u;
    o.add_special_tokens = options.add_special_tokens ? 1u : 0u;
    yeto_tensor ids = nullptr, mask = nullptr;
    ErrorBuffer err;
    const yeto_status st = s_->tokenize(s_->self, c.size(), c.data(), &o, &ids, &mask, err.get());
    Tokens t{detail::take(ids), detail::take(mask)};
    if (st != YETO_OK) fail(st, name_ + ": tokenize: " + err.message());
    return t;
  }

 private:
  const yeto_tokenizer_service* s_;
  std::string name_;
};

// What set_timesteps is asked: a step count, or explicit sigmas; mu for dynamic shifting.
struct TimestepRequest {
  std::int64_t num_inference_steps = 0;
  std::vector<double> sigmas;
  std::optional<double> mu;
};
struct Timesteps {
  at::Tensor timesteps;  // [N]
  at::Tensor sigmas;     // [N + 1] float32; undefined for a scheduler without sigmas
};

// The scheduler of the pipeline (Host::scheduler). Its schedule is its state.
class SchedulerService {
 public:
  SchedulerService(const yeto_scheduler_service* s, std::string name) : s_(s), name_(std::move(name)) {}
  Timesteps set_timesteps(const TimestepRequest& r) const {
    yeto_tensor ts = nullptr, sg = nullptr;
    ErrorBuffer err;
    const yeto_status st = s_->set_timesteps(s_->self, r.num_inference_steps, r.sigmas.empty() ? nullptr : r.sigmas.data(),
                                             r.sigmas.size(), r.mu ? &*r.mu : nullptr, &ts, &sg, err.get());
    Timesteps t{detail::take(ts), detail::take(sg)};
    if (st != YETO_OK) fail(st, name_ + ": set_timesteps: " + err.message());
    return t;
  }
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) const {
    yeto_tensor prev = nullptr;
    ErrorBuffer err;
    const yeto_status st = s_->step(s_->self, detail::view(model_output), detail::view(timestep), detail::view(sample),
                                    &prev, err.get());
    at::Tensor out = detail::take(prev);
    if (st != YETO_OK) fail(st, name_ + ": step: " + err.message());
    return out;
  }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const {
    yeto_tensor noisy = nullptr;
    ErrorBuffer err;
    const yeto_status st = s_->add_noise(s_->self, detail::view(original), detail::view(noise), detail::view(timesteps),
                                         &noisy, err.get());
    at::Tensor out = detail::take(noisy);
    if (st != YETO_OK) fail(st, name_ + ": add_noise: " + err.message());
    return out;
  }
  // "noisy", "target", "timesteps", "alpha_t", "sigma_t", "snr".
  NamedTensors training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const {
    detail::CCollect out;
    ErrorBuffer err;
    const yeto_status st = s_->training_batch(s_->self, detail::view(x0), detail::view(noise), detail::view(indices),
                                              &out.sink, err.get());
    if (st != YETO_OK) fail(st, name_ + ": training_batch: " + err.message());
    return std::move(out.tensors);
  }

 private:
  const yeto_scheduler_service* s_;
  std::string name_;
};

// ---- the host, as seen from a plugin ---------------------------------------------------

class Host {
 public:
  static const yeto_host_api* api() { return api_ref(); }
  static void log(yeto_log_level level, const std::string& message) {
    if (api() && api()->log) api()->log(api()->host, level, message.c_str());
  }
  static void info(const std::string& m) { log(YETO_LOG_INFO, m); }
  static void warn(const std::string& m) { log(YETO_LOG_WARN, m); }
  // The value of a run-configuration key as JSON text.
  static std::string config_json(const std::string& key) {
    std::string out;
    yeto_text_out sink = text_sink(out);
    ErrorBuffer err;
    check(api()->config_get(api()->host, key.c_str(), &sink, err.get()), err, "config_get(" + key + ")");
    return out;
  }
  // The seed of the named deterministic stream (for a LibTorch generator).
  static std::uint64_t rng_seed(const std::string& name) {
    yeto_rng rng = nullptr;
    ErrorBuffer err;
    check(api()->rng_create(api()->host, name.c_str(), &rng, err.get()), err, "rng_create(" + name + ")");
    const std::uint64_t seed = api()->rng_seed(api()->host, rng);
    api()->rng_release(api()->host, rng);
    return seed;
  }

  // A component of the pipeline the host loaded for this plugin, by its model_index.json
  // name ("vae", "text_encoder", "tokenizer", "scheduler", "transformer"). Throws
  // Failure(YETO_ERR_NOT_FOUND) naming the pipeline's components when there is none.
  static ComponentRef component(const std::string& name) {
    if (!api() || !YETO_HAS_FIELD(yeto_host_api, api(), component_get) || !api()->component_get)
      fail(YETO_ERR_UNSUPPORTED, "the host's API is older than ABI 1.1 and offers no component_get; "
                                 "run this plugin with a newer yeto-host");
    const yeto_component_v1* c = nullptr;
    ErrorBuffer err;
    const yeto_status s = api()->component_get(api()->host, name.c_str(), &c, err.get());
    if (s != YETO_OK) fail(s, "host component_get(" + name + ") failed: " + err.message());
    if (!c) fail(YETO_ERR_INTERNAL, "host component_get(" + name + ") returned no component");
    return ComponentRef(c);
  }
  // The typed services of pipeline components by name (ABI 1.2): Failure(YETO_ERR_NOT_FOUND)
  // when there is no such component, YETO_ERR_UNSUPPORTED when it is of another kind.
  static VaeService vae(const std::string& name) {
    return VaeService(service<yeto_vae_service>(name, "vae_get", typed_getter(&yeto_host_api::vae_get)), name);
  }
  static TextEncoderService text_encoder(const std::string& name) {
    return TextEncoderService(
        service<yeto_text_encoder_service>(name, "text_encoder_get", typed_getter(&yeto_host_api::text_encoder_get)),
        name);
  }
  static TokenizerService tokenizer(const std::string& name) {
    return TokenizerService(
        service<yeto_tokenizer_service>(name, "tokenizer_get", typed_getter(&yeto_host_api::tokenizer_get)), name);
  }
  static SchedulerService scheduler(const std::string& name) {
    return SchedulerService(
        service<yeto_scheduler_service>(name, "scheduler_get", typed_getter(&yeto_host_api::scheduler_get)), name);
  }

  // train.shard = "fsdp" (ABI 1.3): this rank and the island's rank count when the run shards
  // the frozen base over its ranks; nullopt when it keeps whole weights (or the host is older).
  struct ShardRanks {
    int rank = 0;
    int world_size = 1;
  };
  static std::optional<ShardRanks> shard_group() {
    const yeto_host_api* a = api();
    if (!a || !YETO_HAS_FIELD(yeto_host_api, a, shard_all_gather) || !a->shard_group) return std::nullopt;
    int32_t rank = 0, world = 1;
    ErrorBuffer err;
    const yeto_status s = a->shard_group(a->host, &rank, &world, err.get());
    if (s == YETO_ERR_NOT_FOUND) return std::nullopt;
    check(s, err, "shard_group");
    return ShardRanks{rank, world};
  }
  // Every rank's `shard` (contiguous uint8, n bytes) into `out` (contiguous uint8, n x world
  // size bytes): yeto_host_api.shard_all_gather. Throws Failure with the host's message.
  static void shard_all_gather(const at::Tensor& shard, const at::Tensor& out) {
    const yeto_host_api* a = api();
    if (!a || !YETO_HAS_FIELD(yeto_host_api, a, shard_all_gather) || !a->shard_all_gather)
      fail(YETO_ERR_UNSUPPORTED, "the host's API is older than ABI 1.3 and has no shard_all_gather");
    ErrorBuffer err;
    const yeto_status s = a->shard_all_gather(a->host, reinterpret_cast<yeto_tensor>(shard.unsafeGetTensorImpl()),
                                              reinterpret_cast<yeto_tensor>(out.unsafeGetTensorImpl()), err.get());
    check(s, err, "shard_all_gather");
  }

  // True when the pipeline has a component of that name.
  static bool has_component(const std::string& name) {
    if (!api() || !YETO_HAS_FIELD(yeto_host_api, api(), component_get) || !api()->component_get) return false;
    const yeto_component_v1* c = nullptr;
    return api()->component_get(api()->host, name.c_str(), &c, nullptr) == YETO_OK && c != nullptr;
  }

  static yeto_text_out text_sink(std::string& out) {
    yeto_text_out s{};
    s.struct_size = sizeof s;
    s.abi_version = YETO_ABI_VERSION;
    s.context = &out;
    s.write = [](void* ctx, const char* data, std::size_t n) { static_cast<std::string*>(ctx)->append(data, n); };
    return s;
  }
  static void check(yeto_status s, ErrorBuffer& err, const std::string& what) {
    if (s != YETO_OK) fail(s, "host " + what + " failed: " + err.message());
  }

  template <class S>
  using Getter = yeto_status (*)(void*, const char*, const S**, yeto_error*);
  // The host's getter `member`, or nullptr when the host's table is older than ABI 1.2.
  template <class S>
  static Getter<S> typed_getter(Getter<S> yeto_host_api::*member) {
    const yeto_host_api* a = api();
    if (!a || !YETO_HAS_FIELD(yeto_host_api, a, scheduler_get)) return nullptr;
    return a->*member;
  }
  template <class S>
  static const S* service(const std::string& name, const char* call, Getter<S> get) {
    if (!get)
      fail(YETO_ERR_UNSUPPORTED, std::string("the host's API is older than ABI 1.2 and has no ") + call +
                                     "; run this plugin with a newer yeto-host");
    const S* s = nullptr;
    ErrorBuffer err;
    const yeto_status st = get(api()->host, name.c_str(), &s, err.get());
    if (st != YETO_OK) fail(st, "host " + std::string(call) + "(" + name + ") failed: " + err.message());
    if (!s) fail(YETO_ERR_INTERNAL, "host " + std::string(call) + "(" + name + ") returned no service");
    return s;
  }

  static const yeto_host_api*& api_ref() {
    static const yeto_host_api* api = nullptr;
    return api;
  }
};

// ---- components -------------------------------------------------------------------------

class Component {
 public:
  virtual ~Component() = default;
  // The component's own call with named inputs and options; a class reached only through a
  // typed service (a Vae) need not have one.
  virtual NamedTensors forward(const NamedTensors& inputs, const std::string& options_json) {
    (void)inputs, (void)options_json;
    unsupported("forward");
  }
  // Every parameter and buffer by Diffusers name, in a deterministic order.
  virtual NamedTensors parameters() = 0;
  virtual void load_weights(const NamedTensors& weights, bool strict) {
    (void)weights;
    (void)strict;
    unsupported("load_weights");
  }
};

// A component class that is a VAE also derives from Vae: its table then offers the typed VAE
// service (yeto_component_v1.vae), so the host (check-parity) and the plugin itself call it as
// they call the host's AutoencoderKL (Host::vae). The calls run without an autograd graph
// unless the caller asks for one.
class Vae {
 public:
  virtual ~Vae() = default;
  // pixels in [-1, 1] -> the raw latent posterior (mean, logvar).
  virtual Posterior encode(const at::Tensor& pixels) = 0;
  // raw latents (plus the decoder's keyword tensors, e.g. "temb") -> the sample.
  virtual at::Tensor decode(const at::Tensor& latents, const NamedTensors& extra) = 0;
};

namespace detail {

inline NamedTensors from_c(const yeto_named_tensors* in) {
  NamedTensors out;
  if (!in) return out;
  out.reserve(in->count);
  for (std::size_t i = 0; i < in->count; ++i) out.emplace_back(in->names[i], borrow(in->tensors[i]));
  return out;
}

// Hands every tensor over to the sink (which takes ownership of each, even on failure).
inline void to_c(NamedTensors tensors, const yeto_named_tensors_out* out) {
  if (!out || !out->push) fail(YETO_ERR_INVALID_ARGUMENT, "no output sink given");
  for (auto& [name, t] : tensors) {
    const yeto_status s = out->push(out->context, name.c_str(), to_handle(std::move(t)));
    if (s != YETO_OK) fail(s, "the host refused output tensor '" + name + "'");
  }
}

inline void write_text(const std::string& text, const yeto_text_out* out) {
  if (out && out->write) out->write(out->context, text.data(), text.size());
}

struct ComponentBox {
  yeto_component_v1 table{};
  yeto_vae_service vae{};
  std::string class_name;
  std::unique_ptr<Component> impl;
};

inline Vae& vae_of(void* self) { return dynamic_cast<Vae&>(*static_cast<ComponentBox*>(self)->impl); }

// The typed VAE service of a box whose component is a Vae.
inline void fill_vae_service(ComponentBox& box) {
  yeto_vae_service& v = box.vae;
  v.struct_size = sizeof v;
  v.abi_version = YETO_ABI_VERSION;
  v.self = &box;
  v.encode = [](void* self, yeto_tensor pixels, std::uint32_t flags, yeto_tensor* mean, yeto_tensor* logvar,
                yeto_error* err) {
    return guard(err, [&] {
      if (!pixels || !mean || !logvar) fail(YETO_ERR_INVALID_ARGUMENT, "VAE encode: null pixels or result pointer");
      c10::AutoGradMode grad((flags & YETO_SERVICE_GRAD) != 0);
      auto p = vae_of(self).encode(borrow(pixels));
      *mean = to_handle(std::move(p.mean));
      *logvar = to_handle(std::move(p.logvar));
    });
  };
  v.decode = [](void* self, yeto_tensor latents, const yeto_named_tensors* extra, std::uint32_t flags,
                yeto_tensor* sample, yeto_error* err) {
    return guard(err, [&] {
      if (!latents || !sample) fail(YETO_ERR_INVALID_ARGUMENT, "VAE decode: null latents or result pointer");
      c10::AutoGradMode grad((flags & YETO_SERVICE_GRAD) != 0);
      *sample = to_handle(vae_of(self).decode(borrow(latents), from_c(extra)));
    });
  };
  box.table.vae = &v;
}

inline const yeto_component_v1* box_component(std::unique_ptr<Component> impl, const std::string& class_name) {
  auto box = std::make_unique<ComponentBox>();
  box->class_name = class_name;
  box->impl = std::move(impl);
  yeto_component_v1& t = box->table;
  t.struct_size = sizeof(yeto_component_v1);
  t.abi_version = YETO_ABI_VERSION;
  t.self = box.get();
  t.class_name = box->class_name.c_str();
  t.forward = [](void* self, const yeto_named_tensors* in, const char* options, const yeto_named_tensors_out* out,
                 yeto_error* err) {
    return guard(err, [&] {
      to_c(static_cast<ComponentBox*>(self)->impl->forward(from_c(in), options ? options : "{}"), out);
    });
  };
  t.parameters = [](void* self, const yeto_named_tensors_out* out, yeto_error* err) {
    return guard(err, [&] { to_c(static_cast<ComponentBox*>(self)->impl->parameters(), out); });
  };
  t.load_weights = [](void* self, const yeto_named_tensors* w, const char* options, yeto_error* err) {
    return guard(err, [&] {
      const std::string o = options ? options : "";
      const bool strict = o.find("\"strict\": false") == std::string::npos && o.find("\"strict\":false") == std::string::npos;
      static_cast<ComponentBox*>(self)->impl->load_weights(from_c(w), strict);
    });
  };
  t.destroy = &box_destroy;
  if (dynamic_cast<Vae*>(box->impl.get())) fill_vae_service(*box);
  return &box.release()->table;
}

// A named function (not a lambda) so ComponentRef::as can recognise this library's boxes.
inline void box_destroy(void* self) { delete static_cast<ComponentBox*>(self); }

}  // namespace detail

template <class C>
C* ComponentRef::as(const std::string& expected_class) const {
  if (!c_ || class_name() != expected_class || c_->destroy != &detail::box_destroy || !c_->self) return nullptr;
  auto* box = static_cast<detail::ComponentBox*>(c_->self);
  if (&box->table != c_) return nullptr;
  return dynamic_cast<C*>(box->impl.get());
}

// Registers component classes with the host. A class is any Component subclass
// constructible from (config_json, component_dir) where component_dir may be empty.
class ComponentRegistry {
 public:
  explicit ComponentRegistry(const yeto_component_registry* r) : r_(r) {}

  using Factory = std::function<std::unique_ptr<Component>(const std::string& config_json, const std::string& dir)>;

  void add(const std::string& class_name, Factory factory) {
    auto* ctx = new Factory(std::move(factory));  // lives for the process, like the plugin
    ErrorBuffer err;
    const yeto_status s = r_->add(
        r_->context, class_name.c_str(),
        [](void* c, const char* cls, const char* config, const char* dir, const yeto_component_v1** out,
           yeto_error* e) {
          return guard(e, [&] {
            auto impl = (*static_cast<Factory*>(c))(config ? config : "{}", dir ? dir : "");
            *out = detail::box_component(std::move(impl), cls);
          });
        },
        ctx, err.get());
    if (s != YETO_OK) fail(s, "registering component class '" + class_name + "' failed: " + err.message());
  }

  template <class C>
  void add(const std::string& class_name) {
    add(class_name, [](const std::string& config, const std::string& dir) -> std::unique_ptr<Component> {
      return std::make_unique<C>(config, dir);
    });
  }

 private:
  const yeto_component_registry* r_;
};

// ---- the plugin base class --------------------------------------------------------------

// One instance per run. Override the hooks of the capabilities you declare in
// yeto_add_plugin(... CAPABILITIES ...); the others are never called.
class Plugin {
 public:
  virtual ~Plugin() = default;

  // Called once, right after construction and before any hook, with the run configuration: a
  // JSON object of every resolved key and its value ({"model.precision": "bf16", "lora.r": 16,
  // ...}), the same values Host::config_get answers. A throw fails create.
  virtual void configure(const std::string& config_json) { (void)config_json; }

  virtual std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) {
    (void)model_dir, (void)model_index_json;
    unsupported("load_pipeline");
  }
  virtual void prepare(const std::string& options_json) { (void)options_json; }
  virtual void register_components(ComponentRegistry& registry) { (void)registry; }
  virtual NamedTensors trainable_parameters() { unsupported("trainable_parameters"); }
  virtual NamedTensors encode_media(const NamedTensors& media, const std::string& options_json) {
    (void)media, (void)options_json;
    unsupported("encode_media");
  }
  virtual NamedTensors encode_conditioning(const std::string& prompts_json, const NamedTensors& extra) {
    (void)prompts_json, (void)extra;
    unsupported("encode_conditioning");
  }
  virtual NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& step_json) {
    (void)batch, (void)step_json;
    return {};
  }
  virtual at::Tensor denoise(const NamedTensors& inputs, const std::string& step_json) {
    (void)inputs, (void)step_json;
    unsupported("denoise");
  }
  virtual std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                                  const std::string& step_json) {
    (void)step_json;
    return {prediction, target};
  }
  // Returns the loss; may set metrics_json to a JSON object of scalars.
  virtual at::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics_json) {
    (void)rows_json, (void)batch, (void)metrics_json;
    unsupported("loss_step");
  }
  virtual void save_artifact(const std::string& dir, const std::string& metadata_json) {
    (void)dir, (void)metadata_json;
    unsupported("save_artifact");
  }
  virtual std::string load_artifact(const std::string& dir) {
    (void)dir;
    unsupported("load_artifact");
  }
  virtual NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) {
    (void)request_json, (void)inputs;
    unsupported("generate");
  }
  // ABI 1.1, capability "presets": the documented model shapes for `yeto-host init-model`,
  // a JSON object {"<preset>": {"description", "model_index", "components": {name: {"config"}}}}.
  virtual std::string presets() { unsupported("presets"); }
};

namespace detail {

inline Plugin& self(void* instance) { return *static_cast<Plugin*>(instance); }
inline std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// Fills the hook table; only the hooks of declared capabilities are set.
template <class P>
void fill_hooks(yeto_plugin_v1& t, std::uint64_t caps) {
  t.create = [](const char* config_json, void** instance, yeto_error* err) {
    return guard(err, [&] {
      std::unique_ptr<Plugin> p(new P());
      const std::string config = str(config_json);
      p->configure(config.empty() ? "{}" : config);
      *instance = p.release();
    });
  };
  t.destroy = [](void* instance) { delete static_cast<Plugin*>(instance); };
  if (caps & YETO_CAP_PIPELINE) {
    t.load_pipeline = [](void* i, const char* dir, const char* index, const yeto_text_out* plan, yeto_error* err) {
      return guard(err, [&] { write_text(self(i).load_pipeline(str(dir), str(index)), plan); });
    };
    t.prepare = [](void* i, const char* options, yeto_error* err) {
      return guard(err, [&] { self(i).prepare(options ? options : "{}"); });
    };
  }
  if (caps & YETO_CAP_COMPONENTS) {
    t.register_components = [](void* i, const yeto_component_registry* r, yeto_error* err) {
      return guard(err, [&] {
        ComponentRegistry reg(r);
        self(i).register_components(reg);
      });
    };
  }
  if (caps & YETO_CAP_TRAINABLE) {
    t.trainable_parameters = [](void* i, const yeto_named_tensors_out* out, yeto_error* err) {
      return guard(err, [&] { to_c(self(i).trainable_parameters(), out); });
    };
  }
  if (caps & YETO_CAP_ENCODE_MEDIA) {
    t.encode_media = [](void* i, const yeto_named_tensors* media, const char* options, const yeto_named_tensors_out* out,
                        yeto_error* err) {
      return guard(err, [&] { to_c(self(i).encode_media(from_c(media), options ? options : "{}"), out); });
    };
  }
  if (caps & YETO_CAP_ENCODE_CONDITIONING) {
    t.encode_conditioning = [](void* i, const char* prompts, const yeto_named_tensors* extra,
                               const yeto_named_tensors_out* out, yeto_error* err) {
      return guard(err, [&] { to_c(self(i).encode_conditioning(str(prompts), from_c(extra)), out); });
    };
  }
  if (caps & YETO_CAP_DENOISER) {
    t.denoiser_kwargs = [](void* i, const yeto_named_tensors* batch, const char* step, const yeto_named_tensors_out* out,
                           yeto_error* err) {
      return guard(err, [&] { to_c(self(i).denoiser_kwargs(from_c(batch), step ? step : "{}"), out); });
    };
    t.denoise = [](void* i, const yeto_named_tensors* inputs, const char* step, yeto_tensor* prediction,
                   yeto_error* err) {
      return guard(err, [&] { *prediction = to_handle(self(i).denoise(from_c(inputs), step ? step : "{}")); });
    };
  }
  if (caps & YETO_CAP_ALIGN) {
    t.align = [](void* i, yeto_tensor pred, yeto_tensor target, const char* step, yeto_tensor* pred_out,
                 yeto_tensor* target_out, yeto_error* err) {
      return guard(err, [&] {
        auto [p, q] = self(i).align(borrow(pred), borrow(target), step ? step : "{}");
        *pred_out = to_handle(std::move(p));
        *target_out = to_handle(std::move(q));
      });
    };
  }
  if (caps & YETO_CAP_LOSS_STEP) {
    t.loss_step = [](void* i, const char* rows, const yeto_named_tensors* batch, yeto_tensor* loss,
                     const yeto_text_out* metrics, yeto_error* err) {
      return guard(err, [&] {
        std::string m;
        *loss = to_handle(self(i).loss_step(rows ? rows : "[]", from_c(batch), m));
        write_text(m.empty() ? "{}" : m, metrics);
      });
    };
  }
  if (caps & YETO_CAP_ARTIFACTS) {
    t.save_artifact = [](void* i, const char* dir, const char* meta, yeto_error* err) {
      return guard(err, [&] { self(i).save_artifact(str(dir), meta ? meta : "{}"); });
    };
    t.load_artifact = [](void* i, const char* dir, const yeto_text_out* meta, yeto_error* err) {
      return guard(err, [&] { write_text(self(i).load_artifact(str(dir)), meta); });
    };
  }
  if (caps & YETO_CAP_GENERATE) {
    t.generate = [](void* i, const char* request, const yeto_named_tensors* inputs, const yeto_named_tensors_out* out,
                    yeto_error* err) {
      return guard(err, [&] { to_c(self(i).generate(str(request), from_c(inputs)), out); });
    };
  }
  if (caps & YETO_CAP_PRESETS) {
    t.presets = [](void* i, const yeto_text_out* out, yeto_error* err) {
      return guard(err, [&] { write_text(self(i).presets(), out); });
    };
  }
}

// ---- capabilities, stated once ----
// A C++ plugin states its capabilities in one place (yeto_add_plugin's CAPABILITIES or the
// family file's "capabilities"); the descriptor and the signed manifest are generated from it,
// fill_hooks sets exactly those hooks, and CapabilityCheck (instantiated by YETO_PLUGIN) holds the
// class against it at compile time: a declared capability whose hook the class (or a base between
// it and Plugin, such as the kit's DiffusersFamily) does not override, or an overridden hook whose
// capability is not declared, stops the build with a message naming both.
enum class HookState { inherited, overridden, hidden };

#define YETO_DETAIL_HOOK_STATE(hook)                                                                     \
  template <class P, class = void>                                                                       \
  struct hook_state_##hook {                                                                             \
    static constexpr HookState value = HookState::hidden; /* a non-public override: cannot be told */    \
  };                                                                                                     \
  template <class P>                                                                                     \
  struct hook_state_##hook<P, std::void_t<decltype(&P::hook)>> {                                         \
    static constexpr HookState value =                                                                   \
        std::is_same_v<decltype(&P::hook), decltype(&Plugin::hook)> ? HookState::inherited              \
                                                                     : HookState::overridden;            \
  };
YETO_DETAIL_HOOK_STATE(load_pipeline)
YETO_DETAIL_HOOK_STATE(prepare)
YETO_DETAIL_HOOK_STATE(register_components)
YETO_DETAIL_HOOK_STATE(trainable_parameters)
YETO_DETAIL_HOOK_STATE(encode_media)
YETO_DETAIL_HOOK_STATE(encode_conditioning)
YETO_DETAIL_HOOK_STATE(denoiser_kwargs)
YETO_DETAIL_HOOK_STATE(denoise)
YETO_DETAIL_HOOK_STATE(align)
YETO_DETAIL_HOOK_STATE(loss_step)
YETO_DETAIL_HOOK_STATE(save_artifact)
YETO_DETAIL_HOOK_STATE(load_artifact)
YETO_DETAIL_HOOK_STATE(generate)
YETO_DETAIL_HOOK_STATE(presets)
#undef YETO_DETAIL_HOOK_STATE

// Both ways for a hook the capability needs; only "overridden => declared" for a hook whose
// default is harmless (prepare, denoiser_kwargs).
#define YETO_DETAIL_NEEDS(cap, cap_name, hook)                                                           \
  static_assert(!(Caps & (cap)) || hook_state_##hook<P>::value != HookState::inherited,                  \
                "capability '" cap_name "' is declared (CAPABILITIES or the family file's capabilities) " \
                "but the plugin class does not override " #hook "()");                                  \
  YETO_DETAIL_USES(cap, cap_name, hook)
#define YETO_DETAIL_USES(cap, cap_name, hook)                                                            \
  static_assert((Caps & (cap)) || hook_state_##hook<P>::value != HookState::overridden,                  \
                "the plugin class overrides " #hook "() but capability '" cap_name "' is not declared, "  \
                "so the host would never call it: add it to CAPABILITIES or the family file's capabilities");

template <class P, std::uint64_t Caps>
struct CapabilityCheck {
  YETO_DETAIL_NEEDS(YETO_CAP_PIPELINE, "pipeline", load_pipeline)
  YETO_DETAIL_USES(YETO_CAP_PIPELINE, "pipeline", prepare)
  YETO_DETAIL_NEEDS(YETO_CAP_COMPONENTS, "components", register_components)
  YETO_DETAIL_NEEDS(YETO_CAP_TRAINABLE, "trainable", trainable_parameters)
  YETO_DETAIL_NEEDS(YETO_CAP_ENCODE_MEDIA, "encode_media", encode_media)
  YETO_DETAIL_NEEDS(YETO_CAP_ENCODE_CONDITIONING, "encode_conditioning", encode_conditioning)
  YETO_DETAIL_NEEDS(YETO_CAP_DENOISER, "denoiser", denoise)
  YETO_DETAIL_USES(YETO_CAP_DENOISER, "denoiser", denoiser_kwargs)
  YETO_DETAIL_NEEDS(YETO_CAP_ALIGN, "align", align)
  YETO_DETAIL_NEEDS(YETO_CAP_LOSS_STEP, "loss_step", loss_step)
  YETO_DETAIL_NEEDS(YETO_CAP_ARTIFACTS, "artifacts", save_artifact)
  YETO_DETAIL_NEEDS(YETO_CAP_ARTIFACTS, "artifacts", load_artifact)
  YETO_DETAIL_NEEDS(YETO_CAP_GENERATE, "generate", generate)
  YETO_DETAIL_NEEDS(YETO_CAP_PRESETS, "presets", presets)
  static constexpr bool ok = true;
};
#undef YETO_DETAIL_NEEDS
#undef YETO_DETAIL_USES

// The entry point's body: checks the host, publishes the descriptor and the hook table.
template <class P>
yeto_status entry(const yeto_host_api* host, const yeto_plugin_v1** out, const yeto_plugin_descriptor* descriptor,
                  yeto_error* err) {
  return guard(err, [&] {
    if (!host || YETO_ABI_MAJOR(host->abi_version) != YETO_ABI_VERSION_MAJOR)
      fail(YETO_ERR_UNSUPPORTED, "host ABI major " + std::to_string(host ? YETO_ABI_MAJOR(host->abi_version) : 0) +
                                     " does not match this plugin's " + std::to_string(YETO_ABI_VERSION_MAJOR));
    if (!YETO_HAS_FIELD(yeto_host_api, host, component_create))
      fail(YETO_ERR_UNSUPPORTED, "the host's API table is older than this plugin needs");
    Host::api_ref() = host;
    static yeto_plugin_v1 table = [&] {
      yeto_plugin_v1 t{};
      t.struct_size = sizeof t;
      t.abi_version = YETO_ABI_VERSION;
      t.descriptor = descriptor;
      fill_hooks<P>(t, descriptor->capabilities);
      return t;
    }();
    *out = &table;
  });
}

}  // namespace detail
}  // namespace yeto::sdk

#if defined(__has_include)
#if __has_include(<yeto_plugin_info.h>)
#include <yeto_plugin_info.h>
#endif
#endif

// Defines the plugin's exported entry point for the Plugin subclass `PluginClass`, with the
// descriptor taken from the manifest values in <yeto_plugin_info.h>.
#define YETO_PLUGIN(PluginClass)                                                                         \
  extern "C" YETO_PLUGIN_EXPORT yeto_status yeto_plugin_entry(const yeto_host_api* host,                 \
                                                              const yeto_plugin_v1** out, yeto_error* err) { \
    static const char* const families[] = {YETO_PLUGIN_INFO_FAMILIES nullptr};                           \
    static const char* const aliases[] = {YETO_PLUGIN_INFO_ALIASES nullptr};                             \
    static const yeto_plugin_descriptor descriptor = {sizeof(yeto_plugin_descriptor),                    \
                                                      YETO_ABI_VERSION,                                  \
                                                      YETO_PLUGIN_INFO_NAME,                             \
                                                      YETO_PLUGIN_INFO_VERSION,                          \
                                                      families,                                          \
                                                      aliases,                                           \
                                                      YETO_PLUGIN_INFO_CAPABILITIES,                     \
                                                      YETO_PLUGIN_INFO_TORCH_VERSION,                    \
                                                      YETO_PLUGIN_INFO_LICENSE_NOTICE,                   \
                                                      YETO_PLUGIN_INFO_LICENSE_MUST_ACKNOWLEDGE};        \
    static_assert(::yeto::sdk::detail::CapabilityCheck<PluginClass, YETO_PLUGIN_INFO_CAPABILITIES>::ok,   \
                  "the plugin class agrees with its declared capabilities");                             \
    return ::yeto::sdk::detail::entry<PluginClass>(host, out, &descriptor, err);                         \
  }
