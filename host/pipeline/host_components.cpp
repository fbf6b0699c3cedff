#include "pipeline/host_components.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "config/config.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/repository.hpp"
#include "models/model_components.hpp"
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

// ---- the typed calls of each host class (ABI 1.2 services; the 1.1 JSON form below uses them) ----

// Frozen host modules: no graph unless the caller asks for one.
using GradMode = c10::AutoGradMode;

at::Tensor need_tensor(const at::Tensor& t, const std::string& name, const std::string& where) {
  if (!t.defined()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": no '" + name + "' tensor given");
  return t;
}

std::pair<at::Tensor, at::Tensor> vae_encode(models::AutoencoderKLComponent& c, const at::Tensor& pixels, bool grad,
                                             const std::string& where) {
  GradMode g(grad);
  const auto dist = c.vae->encode(as_input(need_tensor(pixels, "sample", where + " encode"), module_options(*c.vae)));
  return {dist.mean, dist.logvar};
}

at::Tensor vae_decode(models::AutoencoderKLComponent& c, const at::Tensor& latents, bool grad,
                      const std::string& where) {
  GradMode g(grad);
  return c.vae->decode(as_input(need_tensor(latents, "latents", where + " decode"), module_options(*c.vae)));
}

void add_hidden_states(Named& out, const std::vector<at::Tensor>& hidden_states, bool wanted) {
  for (std::size_t i = 0; wanted && i < hidden_states.size(); ++i)
    out.emplace_back("hidden_states." + std::to_string(i), hidden_states[i]);
}

// CLIP and T5 encoders: token ids (and an optional mask) on the module's device.
Named text_encode(io::Component& component, const at::Tensor& input_ids, const at::Tensor& mask, bool hidden,
                  bool grad, const std::string& where) {
  GradMode g(grad);
  const auto ids = need_tensor(input_ids, "input_ids", where + " encode");
  if (auto* c = dynamic_cast<models::CLIPTextComponent*>(&component)) {
    const auto dev = module_options(*c->model).device();
    const auto r = c->model->forward(ids.to(dev, at::kLong), mask.defined() ? mask.to(dev) : mask, hidden);
    Named out = {{"last_hidden_state", r.last_hidden_state}};
    if (c->model->with_projection())
      out.emplace_back("text_embeds", r.text_embeds);
    else
      out.emplace_back("pooler_output", r.pooler_output);
    add_hidden_states(out, r.hidden_states, hidden);
    return out;
  }
  auto& t5 = dynamic_cast<models::T5EncoderComponent&>(component);
  const auto dev = module_options(*t5.model).device();
  const auto r = t5.model->forward(ids.to(dev, at::kLong), mask.defined() ? mask.to(dev) : mask, hidden);
  Named out = {{"last_hidden_state", r.last_hidden_state}};
  add_hidden_states(out, r.hidden_states, hidden);
  return out;
}

struct TokenizeArgs {
  text::EncodeOptions encode;
  bool prompt_clean = false;
};

std::pair<at::Tensor, at::Tensor> tokenize(text::TokenizerComponent& c, std::vector<std::string> texts,
                                           const TokenizeArgs& args, const std::string& where) {
  if (texts.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: no text given");
  if (args.prompt_clean)
    for (auto& t : texts) t = text::prompt_clean(t);
  const auto enc = c.tokenizer().encode_batch(texts, args.encode);
  // A cut prompt is said, as Diffusers pipelines say it: the model never sees the rest. Once per
  // component and text length (a training run encodes the same long caption every epoch).
  for (std::size_t i = 0; i < enc.size(); ++i) {
    if (enc[i].truncated <= 0) continue;
    const auto kept = static_cast<std::int64_t>(std::count(enc[i].attention_mask.begin(), enc[i].attention_mask.end(), 1));
    static std::mutex mu;
    static std::set<std::pair<std::string, std::int64_t>> said;
    std::lock_guard lock(mu);
    if (!said.insert({where, kept}).second) continue;
    std::size_t from = texts[i].size() > 40 ? texts[i].size() - 40 : 0;  // not inside a UTF-8 sequence
    while (from < texts[i].size() && (static_cast<unsigned char>(texts[i][from]) & 0xC0) == 0x80) ++from;
    spdlog::warn("{}: a text of {} bytes was cut to {} tokens, {} token(s) dropped (the text length is "
                   "model.max_sequence_length or the tokenizer's maximum); the model never sees its end: \"...{}\" "
                   "(said once per tokenizer and length)",
                   where, texts[i].size(), kept, enc[i].truncated, texts[i].substr(from));
  }
  const std::size_t len = enc.front().input_ids.size();
  for (const auto& e : enc)
    if (e.input_ids.size() != len)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, where +
                                               " tokenize: the rows have different lengths without padding; pad to "
                                               "the longest row or to max_length");
  const auto b = static_cast<std::int64_t>(enc.size());
  at::Tensor ids = at::empty({b, static_cast<std::int64_t>(len)}, at::kLong);
  at::Tensor mask = at::empty({b, static_cast<std::int64_t>(len)}, at::kLong);
  for (std::int64_t i = 0; i < b; ++i) {
    std::copy(enc[i].input_ids.begin(), enc[i].input_ids.end(), ids[i].data_ptr<std::int64_t>());
    std::copy(enc[i].attention_mask.begin(), enc[i].attention_mask.end(), mask[i].data_ptr<std::int64_t>());
  }
  return {ids, mask};
}

std::pair<at::Tensor, at::Tensor> set_timesteps(schedulers::Scheduler& s, const schedulers::SetTimestepsArgs& a,
                                                const std::string& where) {
  if (!a.num_inference_steps && !a.sigmas)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " set_timesteps: give num_inference_steps or sigmas");
  if (a.num_inference_steps && *a.num_inference_steps <= 0)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " set_timesteps: num_inference_steps must be positive, got " +
                                             std::to_string(*a.num_inference_steps));
  s.set_timesteps(a);
  return {s.timesteps(), s.sigmas()};
}

Named training_batch(schedulers::Scheduler& s, const at::Tensor& x0, const at::Tensor& noise,
                     const at::Tensor& indices, const std::string& where) {
  const std::string w = where + " training_batch";
  const auto b = s.training_batch(need_tensor(x0, "x0", w), need_tensor(noise, "noise", w),
                                  need_tensor(indices, "indices", w));
  return {{"noisy", b.noisy},     {"target", b.target},   {"timesteps", b.timesteps},
          {"alpha_t", b.alpha_t}, {"sigma_t", b.sigma_t}, {"snr", b.snr}};
}

// ---- the ABI 1.1 form: forward() with options {"method": ...} ---------------------------------

Named vae_forward(models::AutoencoderKLComponent& c, const Named& in, const json& o, bool grad,
                  const std::string& where) {
  const std::string method = method_of(o, "", where);
  if (method == "encode") {
    const auto [mean, logvar] = vae_encode(c, need(in, "sample", where + " encode"), grad, where);
    return {{"mean", mean}, {"logvar", logvar}};
  }
  if (method == "decode") return {{"sample", vae_decode(c, need(in, "latents", where + " decode"), grad, where)}};
  unknown_method(where, method, {"decode", "encode"});
}

// LTX-2's audio VAE: encode (log-mel "sample" -> "mean", "logvar"), decode ("latents" -> the mel
// "sample"), log_mel ("waveform" [B, 2, samples] at the VAE's sample rate -> the log-mel "sample"
// it encodes), and LTX2Pipeline's helpers around it: pack ("latents" [B, C, T, M] -> "packed"
// [B, T, C * M]), unpack ("packed" -> "latents"; option num_mel_bins, default the VAE's latent mel
// bins), normalize / denormalize ("packed" with the VAE's latents_mean / latents_std buffers, or
// the given "latents_mean" / "latents_std" tensors).
Named audio_vae_forward(models::LTX2AudioVaeComponent& c, const Named& in, const json& o, const std::string& where) {
  const std::string method = method_of(o, "", where);
  auto& vae = c.vae;
  if (method == "encode") {
    const auto d = vae->encode(need(in, "sample", where + " encode"));
    return {{"mean", d.mean}, {"logvar", d.logvar}};
  }
  if (method == "decode") return {{"sample", vae->decode(need(in, "latents", where + " decode"))}};
  if (method == "log_mel") return {{"sample", vae->log_mel(need(in, "waveform", where + " log_mel"))}};
  if (method == "pack") return {{"packed", models::ltx2_pack_audio_latents(need(in, "latents", where + " pack"))}};
  if (method == "unpack") {
    const auto bins = option<std::int64_t>(o, "num_mel_bins", vae->config().mel_bins / vae->config().downsample_factor(),
                                           where);
    return {{"latents", models::ltx2_unpack_audio_latents(need(in, "packed", where + " unpack"), bins)}};
  }
  if (method == "normalize" || method == "denormalize") {
    const std::string w = where + " " + method;
    const at::Tensor* mean = find(in, "latents_mean");
    const at::Tensor* std = find(in, "latents_std");
    const auto& packed = need(in, "packed", w);
    const auto& m = mean ? *mean : vae->latents_mean;
    const auto& s = std ? *std : vae->latents_std;
    return {{"packed", method == "normalize" ? models::ltx2_normalize_audio_latents(packed, m, s)
                                             : models::ltx2_denormalize_audio_latents(packed, m, s)}};
  }
  unknown_method(where, method, {"decode", "denormalize", "encode", "log_mel", "normalize", "pack", "unpack"});
}

// An LTX-2 vocoder: vocode ("mel" [B, C, frames, mel_bins] -> "waveform" [B, C, samples] and
// "sample_rate", an int64 scalar).
Named vocoder_forward(models::LTX2VocoderComponent& c, const Named& in, const json& o, const std::string& where) {
  const std::string method = method_of(o, "vocode", where);
  if (method != "vocode") unknown_method(where, method, {"vocode"});
  return {{"waveform", c.forward(need(in, "mel", where + " vocode"))},
          {"sample_rate", at::scalar_tensor(c.sampling_rate(), at::kLong)}};
}

Named text_encoder_forward(io::Component& c, const Named& in, const json& o, bool grad, const std::string& where) {
  const std::string method = method_of(o, "encode", where);
  if (method != "encode") unknown_method(where, method, {"encode"});
  const at::Tensor* mask = find(in, "attention_mask");
  return text_encode(c, need(in, "input_ids", where + " encode"), mask ? *mask : at::Tensor(),
                     option<bool>(o, "output_hidden_states", false, where), grad, where);
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
  TokenizeArgs args;
  const std::string clean = option<std::string>(o, "clean", "none", where);
  if (clean != "none" && clean != "prompt_clean")
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: clean must be none or prompt_clean, not '" + clean + "'");
  args.prompt_clean = clean == "prompt_clean";
  const std::string padding = option<std::string>(o, "padding", "max_length", where);
  if (padding == "max_length")
    args.encode.padding = text::Padding::max_length;
  else if (padding == "longest")
    args.encode.padding = text::Padding::longest;
  else if (padding == "none")
    args.encode.padding = text::Padding::none;
  else
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: padding must be max_length, longest or none, not '" +
                                             padding + "'");
  args.encode.truncation = option<bool>(o, "truncation", true, where);
  args.encode.add_special_tokens = option<bool>(o, "add_special_tokens", true, where);
  if (o.contains("max_length") && !o["max_length"].is_null()) {
    const auto n = option<std::int64_t>(o, "max_length", 0, where);
    if (n <= 0) sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + " tokenize: max_length must be positive");
    args.encode.max_length = n;
  }
  const auto [ids, mask] = tokenize(c, std::move(texts), args, where);
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
    const auto [timesteps, sigmas] = set_timesteps(s, a, where);
    Named out = {{"timesteps", timesteps}};
    if (sigmas.defined()) out.emplace_back("sigmas", sigmas);
    return out;
  }
  if (method == "step") {
    const std::string w = where + " step";
    return {{"prev_sample", s.step(need(in, "model_output", w), need(in, "timestep", w), need(in, "sample", w))}};
  }
  if (method == "training_batch")
    return training_batch(s, need(in, "x0", where), need(in, "noise", where), need(in, "indices", where), where);
  if (method == "add_noise") {
    const std::string w = where + " add_noise";
    return {{"noisy", s.add_noise(need(in, "original", w), need(in, "noise", w), need(in, "timesteps", w))}};
  }
  unknown_method(where, method, {"add_noise", "set_timesteps", "step", "training_batch"});
}

// ---- the C table --------------------------------------------------------------------------------

struct HostBox {
  yeto_component_v1 table{};
  yeto_vae_service vae{};
  yeto_text_encoder_service text_encoder{};
  yeto_tokenizer_service tokenizer{};
  yeto_scheduler_service scheduler{};
  std::string class_name;
  std::string where;  // "host component <class>", what every message starts with
  std::shared_ptr<io::Component> component;
};

void host_destroy(void* self) { delete static_cast<HostBox*>(self); }

Named dispatch(HostBox& box, const Named& in, const json& o) {
  const std::string& where = box.where;
  io::Component* c = box.component.get();
  // Frozen host modules: no graph unless asked for ({"grad": true}).
  const bool grad = option<bool>(o, "grad", false, where);
  GradMode g(grad);
  if (auto* v = dynamic_cast<models::AutoencoderKLComponent*>(c)) return vae_forward(*v, in, o, grad, where);
  if (auto* a = dynamic_cast<models::LTX2AudioVaeComponent*>(c)) return audio_vae_forward(*a, in, o, where);
  if (auto* v = dynamic_cast<models::LTX2VocoderComponent*>(c)) return vocoder_forward(*v, in, o, where);
  if (box.table.text_encoder) return text_encoder_forward(*c, in, o, grad, where);
  if (auto* t = dynamic_cast<text::TokenizerComponent*>(c)) return tokenizer_forward(*t, o, where);
  if (auto* s = dynamic_cast<schedulers::Scheduler*>(c)) return scheduler_forward(*s, in, o, where);
  sdk::fail(YETO_ERR_UNSUPPORTED, where + " has no forward() methods");
}

HostBox& box_of(void* self) { return *static_cast<HostBox*>(self); }

at::Tensor borrowed(yeto_tensor t) { return t ? sdk::borrow(t) : at::Tensor(); }

void set_out(yeto_tensor* out, at::Tensor t, const std::string& what) {
  if (!out) sdk::fail(YETO_ERR_INVALID_ARGUMENT, what + ": no result pointer given");
  *out = t.defined() ? sdk::to_handle(std::move(t)) : nullptr;
}

// The typed services of a host component: the ones of its kind are set, the others stay NULL.
void fill_services(HostBox& box) {
  io::Component* c = box.component.get();
  yeto_component_v1& t = box.table;
  const auto head = [&box](auto& service) {
    service.struct_size = sizeof service;
    service.abi_version = YETO_ABI_VERSION;
    service.self = &box;
  };
  if (dynamic_cast<models::AutoencoderKLComponent*>(c)) {
    head(box.vae);
    box.vae.encode = [](void* self, yeto_tensor pixels, uint32_t flags, yeto_tensor* mean, yeto_tensor* logvar,
                        yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        auto [m, v] = vae_encode(static_cast<models::AutoencoderKLComponent&>(*b.component), borrowed(pixels),
                                 (flags & YETO_SERVICE_GRAD) != 0, b.where);
        if (!logvar) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " encode: no logvar result pointer given");
        set_out(mean, std::move(m), b.where + " encode");
        *logvar = sdk::to_handle(std::move(v));
      });
    };
    box.vae.decode = [](void* self, yeto_tensor latents, const yeto_named_tensors* extra, uint32_t flags,
                        yeto_tensor* sample, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        if (extra && extra->count > 0)
          sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " decode: takes no '" +
                                                   std::string(extra->names[0] ? extra->names[0] : "") +
                                                   "' tensor (only the latents)");
        set_out(sample,
                vae_decode(static_cast<models::AutoencoderKLComponent&>(*b.component), borrowed(latents),
                           (flags & YETO_SERVICE_GRAD) != 0, b.where),
                b.where + " decode");
      });
    };
    t.vae = &box.vae;
  } else if (dynamic_cast<models::CLIPTextComponent*>(c) || dynamic_cast<models::T5EncoderComponent*>(c)) {
    head(box.text_encoder);
    box.text_encoder.encode = [](void* self, yeto_tensor ids, yeto_tensor mask, uint32_t flags,
                                 const yeto_named_tensors_out* out, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        to_c(text_encode(*b.component, borrowed(ids), borrowed(mask), (flags & YETO_SERVICE_HIDDEN_STATES) != 0,
                         (flags & YETO_SERVICE_GRAD) != 0, b.where),
             out);
      });
    };
    t.text_encoder = &box.text_encoder;
  } else if (dynamic_cast<text::TokenizerComponent*>(c)) {
    head(box.tokenizer);
    box.tokenizer.tokenize = [](void* self, size_t count, const char* const* texts, const yeto_tokenize_options* o,
                                yeto_tensor* input_ids, yeto_tensor* attention_mask, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        if (count > 0 && !texts) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: no texts given");
        std::vector<std::string> v;
        for (size_t i = 0; i < count; ++i) {
          if (!texts[i]) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: text " + std::to_string(i) + " is NULL");
          v.emplace_back(texts[i]);
        }
        TokenizeArgs args;
        if (!YETO_HAS_FIELD(yeto_tokenize_options, o, add_special_tokens))
          sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: no options, or options older than ABI 1.2");
        if (o->max_length < 0) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: max_length must not be negative");
        if (o->max_length > 0) args.encode.max_length = o->max_length;
        switch (o->padding) {
          case YETO_PADDING_MAX_LENGTH: args.encode.padding = text::Padding::max_length; break;
          case YETO_PADDING_LONGEST: args.encode.padding = text::Padding::longest; break;
          case YETO_PADDING_NONE: args.encode.padding = text::Padding::none; break;
          default:
            sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: unknown padding " + std::to_string(o->padding));
        }
        if (o->clean != YETO_CLEAN_NONE && o->clean != YETO_CLEAN_PROMPT)
          sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: unknown clean " + std::to_string(o->clean));
        args.prompt_clean = o->clean == YETO_CLEAN_PROMPT;
        args.encode.truncation = o->truncation != 0;
        args.encode.add_special_tokens = o->add_special_tokens != 0;
        auto [ids, mask] = tokenize(static_cast<text::TokenizerComponent&>(*b.component), std::move(v), args, b.where);
        if (!attention_mask) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " tokenize: no mask result pointer given");
        set_out(input_ids, std::move(ids), b.where + " tokenize");
        *attention_mask = sdk::to_handle(std::move(mask));
      });
    };
    t.tokenizer = &box.tokenizer;
  } else if (dynamic_cast<schedulers::Scheduler*>(c)) {
    head(box.scheduler);
    box.scheduler.set_timesteps = [](void* self, int64_t steps, const double* sigmas, size_t sigma_count,
                                     const double* mu, yeto_tensor* timesteps, yeto_tensor* sigmas_out,
                                     yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        schedulers::SetTimestepsArgs a;
        if (steps != 0) a.num_inference_steps = steps;
        if (sigma_count > 0) {
          if (!sigmas) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " set_timesteps: sigma_count without sigmas");
          a.sigmas = std::vector<double>(sigmas, sigmas + sigma_count);
        }
        if (mu) a.mu = *mu;
        torch::NoGradGuard no_grad;
        auto [ts, sg] = set_timesteps(static_cast<schedulers::Scheduler&>(*b.component), a, b.where);
        if (!sigmas_out) sdk::fail(YETO_ERR_INVALID_ARGUMENT, b.where + " set_timesteps: no sigmas result pointer");
        set_out(timesteps, std::move(ts), b.where + " set_timesteps");
        *sigmas_out = sg.defined() ? sdk::to_handle(sg.to(at::kFloat)) : nullptr;
      });
    };
    box.scheduler.step = [](void* self, yeto_tensor model_output, yeto_tensor timestep, yeto_tensor sample,
                            yeto_tensor* prev_sample, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        const std::string w = b.where + " step";
        torch::NoGradGuard no_grad;
        set_out(prev_sample,
                static_cast<schedulers::Scheduler&>(*b.component)
                    .step(need_tensor(borrowed(model_output), "model_output", w),
                          need_tensor(borrowed(timestep), "timestep", w), need_tensor(borrowed(sample), "sample", w)),
                w);
      });
    };
    box.scheduler.add_noise = [](void* self, yeto_tensor original, yeto_tensor noise, yeto_tensor timesteps,
                                 yeto_tensor* noisy, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        const std::string w = b.where + " add_noise";
        torch::NoGradGuard no_grad;
        set_out(noisy,
                static_cast<schedulers::Scheduler&>(*b.component)
                    .add_noise(need_tensor(borrowed(original), "original", w), need_tensor(borrowed(noise), "noise", w),
                               need_tensor(borrowed(timesteps), "timesteps", w)),
                w);
      });
    };
    box.scheduler.training_batch = [](void* self, yeto_tensor x0, yeto_tensor noise, yeto_tensor indices,
                                      const yeto_named_tensors_out* out, yeto_error* e) {
      return run(e, [&] {
        auto& b = box_of(self);
        torch::NoGradGuard no_grad;
        to_c(training_batch(static_cast<schedulers::Scheduler&>(*b.component), borrowed(x0), borrowed(noise),
                            borrowed(indices), b.where),
             out);
      });
    };
    t.scheduler = &box.scheduler;
  }
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
  box->where = "host component " + box->class_name;
  box->component = std::move(component);
  fill_services(*box);
  yeto_component_v1& t = box->table;
  t.struct_size = sizeof t;
  t.abi_version = YETO_ABI_VERSION;
  t.self = box.get();
  t.class_name = box->class_name.c_str();
  t.forward = [](void* self, const yeto_named_tensors* in, const char* options, const yeto_named_tensors_out* out,
                 yeto_error* e) {
    return run(e, [&] {
      auto& b = *static_cast<HostBox*>(self);
      to_c(dispatch(b, from_c(in), parse_options(options, b.where)), out);
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
  register_host_classes(plugin::ComponentRegistry::global(), io::ComponentRegistry::global());
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
          ctx, "host", host.kind(cls));
    } catch (const Error&) {
      // registered concurrently by someone else: theirs stays
    }
  }
}

void load_model_classes(const config::Config& cfg, const io::DiffusersRepo& repo) {
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
      if (creg.origin(cls) == origin) creg.set_kind(cls, kinds.count(cls) ? kinds[cls] : "component");
  } catch (const std::exception& e) {
    spdlog::warn("the model's plugin classes are not shown: {}", e.what());
  }
}

std::string kind_for_component_name(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (starts("transformer") || starts("unet") || name == "prior" || name == "model") return "denoiser";
  if (starts("audio_vae")) return "audio_vae";
  if (starts("vocoder")) return "vocoder";
  if (starts("vae")) return "vae";
  if (starts("text_encoder")) return "text_encoder";
  if (starts("tokenizer")) return "tokenizer";
  if (starts("scheduler")) return "scheduler";
  return name;
}

}  // namespace yeto::pipeline
