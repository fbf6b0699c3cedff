// Runs `autoencoder`, `text_encoder` and the LTX-2 vocoders' `model` parity cases from their
// case.json alone: the module is
// built from the case's config.json and weights, each recorded call is recognised by what it
// calls (`encode(` / `decode(` / a text-encoder forward), its tensor arguments are taken from
// inputs.safetensors by name, and each expected output is located from its `from` description
// or its key. Where the case records a loss target and gradients, the same call runs with
// gradients, loss = mean((sample - loss_target)^2), and `loss` and every `grad.<name>` are
// compared.
#include "models/model_parity.hpp"

#include <fstream>
#include <regex>

#include <torch/torch.h>

#include "core/error.hpp"
#include "io/weight_source.hpp"
#include "models/model_components.hpp"
#include "parity/parity.hpp"

namespace yeto::models {
namespace {

using parity::CaseContext;
using parity::CaseResult;

nlohmann::json read_config(const CaseContext& ctx) {
  const auto path = ctx.dir() / "config.json";
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot read the model config of the case", ExitCode::bad_input);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what(), ExitCode::bad_input);
  }
}

std::shared_ptr<io::ModuleComponent> load_case_model(const CaseContext& ctx) {
  auto comp = build_model_component(ctx.class_name(), read_config(ctx), (ctx.dir() / "config.json").string());
  auto weights = io::WeightSource::open(ctx.dir());
  load_component_weights(comp->module(), ctx.class_name(), weights, true);
  comp->module().eval();
  return comp;
}

void missing_output(CaseResult& result, const std::string& name, const std::string& why) {
  parity::Comparison c;
  c.name = name;
  c.pass = false;
  c.note = why;
  result.comparisons.push_back(c);
}

std::vector<std::string> output_keys(const nlohmann::json& call) {
  std::vector<std::string> keys;
  if (call.contains("outputs") && call["outputs"].is_object()) {
    for (const auto& [k, v] : call["outputs"].items()) keys.push_back(k);
  }
  return keys;
}

std::vector<std::string> tensor_arg_names(const nlohmann::json& call) {
  std::vector<std::string> names;
  if (call.contains("tensor_args") && call["tensor_args"].is_object()) {
    for (const auto& [k, v] : call["tensor_args"].items()) names.push_back(k);
  }
  return names;
}

// Backward on `sample` when the case records one, comparing the loss and parameter gradients.
void compare_gradients(const CaseContext& ctx, torch::nn::Module& module, const at::Tensor& sample,
                       CaseResult& result) {
  const auto& target = ctx.expected("loss_target");
  auto loss = (sample - target.to(sample.scalar_type())).pow(2).mean();
  if (ctx.has_expected("loss")) ctx.compare("loss", loss.detach(), result);
  loss.backward();
  auto params = module.named_parameters(true);
  for (const auto& [key, t] : ctx.expected()) {
    if (key.rfind("grad.", 0) != 0) continue;
    const auto name = key.substr(5);
    auto* p = params.find(name);
    if (!p) {
      missing_output(result, key, "the module has no parameter " + name);
      continue;
    }
    if (!p->grad().defined()) {
      missing_output(result, key, "no gradient reached " + name);
      continue;
    }
    ctx.compare(key, p->grad(), result);
  }
}

bool wants_backward(const CaseContext& ctx) { return ctx.has_expected("loss_target"); }

void set_trainable(torch::nn::Module& m) {
  for (auto& p : m.parameters(true)) p.set_requires_grad(true);
}

// ---- autoencoder -------------------------------------------------------------------------------

void run_autoencoder_case(const CaseContext& ctx, CaseResult& result) {
  auto comp = load_case_model(ctx);
  auto& vae = std::dynamic_pointer_cast<AutoencoderKLComponent>(comp)->vae;
  const auto& calls = ctx.case_json().at("calls");
  at::Tensor backward_sample;
  for (const auto& call : calls) {
    const auto python = call.value("python", std::string());
    const auto args = tensor_arg_names(call);
    if (args.empty()) throw Error(ctx.case_name() + ": call `" + python + "` has no tensor argument", ExitCode::bad_input);
    const auto& x = ctx.input(args.front());
    const bool grad = wants_backward(ctx);
    at::AutoGradMode mode(grad);
    if (python.find(".encode(") != std::string::npos) {
      auto dist = vae->encode(x);
      for (const auto& key : output_keys(call)) {
        const auto field = key.substr(key.rfind('.') + 1);
        at::Tensor t = field == "mean" ? dist.mean : field == "std" ? dist.std : field == "logvar" ? dist.logvar
                       : field == "var" ? dist.var : at::Tensor();
        if (!t.defined()) {
          missing_output(result, key, "this handler cannot produce `" + field + "` of encode()");
          continue;
        }
        ctx.compare(key, t.detach(), result);
      }
    } else if (python.find(".decode(") != std::string::npos) {
      auto sample = vae->decode(x);
      for (const auto& key : output_keys(call)) ctx.compare(key, sample.detach(), result);
      if (grad) backward_sample = sample;
    } else {
      throw Error(ctx.case_name() + ": call `" + python + "` is neither encode nor decode", ExitCode::bad_input);
    }
  }
  if (wants_backward(ctx)) {
    if (!backward_sample.defined()) {
      missing_output(result, "loss", "the case records a loss target but no decode call");
      return;
    }
    set_trainable(*vae);
    // Recompute with trainable parameters so every gradient is tracked.
    for (const auto& call : calls) {
      if (call.value("python", std::string()).find(".decode(") == std::string::npos) continue;
      auto sample = vae->decode(ctx.input(tensor_arg_names(call).front()));
      compare_gradients(ctx, *vae, sample, result);
      break;
    }
  }
}

// ---- LTX-2 audio VAE ---------------------------------------------------------------------------
// Calls: `model.encode(x)` (the posterior), `model.decode(z)` (the mel) and LTX2Pipeline's
// audio-latent helpers around them, recognised by name: _pack_audio_latents (of the previous
// encode's mean when the call packs `dist.mean`, else of its first tensor argument),
// _normalize_audio_latents, _denormalize_audio_latents, _unpack_audio_latents (num_mel_bins from
// the call, else latent mel bins = mel_bins / 2^(levels - 1)). Each output is the value of the
// helper its name speaks of: ...unpacked / ...denormalized / ...normalized... / ...packed....

std::string tensor_arg(const CaseContext& ctx, const nlohmann::json& call, const std::string& suffix) {
  for (const auto& name : tensor_arg_names(call))
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return name;
  throw Error(ctx.case_name() + ": call `" + call.value("python", std::string()) + "` has no tensor argument *" +
                  suffix,
              ExitCode::bad_input);
}

void run_ltx2_audio_vae_case(const CaseContext& ctx, CaseResult& result) {
  auto comp = load_case_model(ctx);
  auto& vae = std::dynamic_pointer_cast<LTX2AudioVaeComponent>(comp)->vae;
  torch::NoGradGuard no_grad;
  AudioLatentDist last;
  static const std::regex mel_bins_arg(R"(num_mel_bins\s*=\s*(\d+))");
  for (const auto& call : ctx.case_json().at("calls")) {
    const auto python = call.value("python", std::string());
    const auto keys = output_keys(call);
    std::map<std::string, at::Tensor> got;  // by what the value is
    if (python.find("_pack_audio_latents(") != std::string::npos ||
        python.find("_denormalize_audio_latents(") != std::string::npos ||
        python.find("_normalize_audio_latents(") != std::string::npos ||
        python.find("_unpack_audio_latents(") != std::string::npos) {
      at::Tensor x;
      if (python.find("_pack_audio_latents(") != std::string::npos) {
        const auto& source = python.find("dist.mean") != std::string::npos ? last.mean : at::Tensor();
        if (!source.defined() && python.find("dist.mean") != std::string::npos)
          throw Error(ctx.case_name() + ": `" + python + "` packs dist.mean before any encode call", ExitCode::bad_input);
        x = got["packed"] = ltx2_pack_audio_latents(source.defined() ? source : ctx.input(tensor_arg_names(call).front()));
      } else {
        x = ctx.input(tensor_arg(ctx, call, "packed_latents"));
      }
      const bool stats = python.find("normalize_audio_latents(") != std::string::npos;
      const auto mean = stats ? ctx.input(tensor_arg(ctx, call, "latents_mean")) : at::Tensor();
      const auto std = stats ? ctx.input(tensor_arg(ctx, call, "latents_std")) : at::Tensor();
      if (python.find("_denormalize_audio_latents(") != std::string::npos)
        x = got["denormalized"] = ltx2_denormalize_audio_latents(x, mean, std);
      else if (python.find("_normalize_audio_latents(") != std::string::npos)
        x = got["normalized"] = ltx2_normalize_audio_latents(x, mean, std);
      if (python.find("_unpack_audio_latents(") != std::string::npos) {
        std::smatch m;
        const auto bins = std::regex_search(python, m, mel_bins_arg)
                              ? std::stoll(m[1])
                              : vae->config().mel_bins / vae->config().downsample_factor();
        got["unpacked"] = ltx2_unpack_audio_latents(x, bins);
      }
      for (const auto& key : keys) {
        const auto field = key.substr(key.rfind('.') + 1);
        const char* which = field.find("unpack") != std::string::npos     ? "unpacked"
                            : field.find("denormal") != std::string::npos ? "denormalized"
                            : field.find("normal") != std::string::npos   ? "normalized"
                            : field.find("pack") != std::string::npos     ? "packed"
                                                                          : "";
        if (!got.count(which)) {
          missing_output(result, key, "the helpers of `" + python + "` produce no value for it");
          continue;
        }
        ctx.compare(key, got[which], result);
      }
    } else if (python.find(".encode(") != std::string::npos) {
      last = vae->encode(ctx.input(tensor_arg_names(call).front()));
      for (const auto& key : keys) {
        const auto field = key.substr(key.rfind('.') + 1);
        const at::Tensor t = field == "mean"     ? last.mean
                             : field == "logvar" ? last.logvar
                             : field == "std"    ? at::exp(0.5 * last.logvar)
                                                 : at::Tensor();
        if (!t.defined()) missing_output(result, key, "encode() has no `" + field + "`");
        else ctx.compare(key, t, result);
      }
    } else if (python.find(".decode(") != std::string::npos) {
      const auto mel = vae->decode(ctx.input(tensor_arg_names(call).front()));
      for (const auto& key : keys) ctx.compare(key, mel, result);
    } else {
      throw Error(ctx.case_name() + ": call `" + python + "` is neither encode, decode nor an LTX2Pipeline audio helper",
                  ExitCode::bad_input);
    }
  }
}

// ---- LTX-2 vocoders ---------------------------------------------------------------------------
// A `model` case: `sample = model(<mel>)`; compares `sample` and every `intermediate.<module>`
// the model reports, then loss = mean((sample - loss_target)^2) and every `grad.<name>`.
void run_ltx2_vocoder_case(const CaseContext& ctx, CaseResult& result) {
  auto comp = load_case_model(ctx);
  auto& voc = *std::dynamic_pointer_cast<LTX2VocoderComponent>(comp);
  const auto& c = ctx.case_json();
  const nlohmann::json& call = c.contains("call") ? c.at("call") : c.at("calls").at(0);
  const auto args = tensor_arg_names(call);
  if (args.empty()) throw Error(ctx.case_name() + ": the call has no tensor argument", ExitCode::bad_input);
  const auto& mel = ctx.input(args.front());
  {
    torch::NoGradGuard no_grad;
    Intermediates inter;
    const auto sample = voc.forward(mel, &inter);
    for (const auto& key : ctx.compare_keys()) {
      if (key == "sample") {
        ctx.compare(key, sample, result);
      } else if (key.rfind("intermediate.", 0) == 0) {
        const auto it = inter.find(key.substr(13));
        if (it == inter.end()) missing_output(result, key, voc.class_name() + " reports no `" + key.substr(13) + "`");
        else ctx.compare(key, it->second, result);
      }
    }
  }
  if (!wants_backward(ctx)) return;
  set_trainable(voc.module());
  compare_gradients(ctx, voc.module(), voc.forward(mel), result);
}

// ---- text encoders -----------------------------------------------------------------------------

struct TextOutputs {
  at::Tensor last_hidden_state, pooler_output, text_embeds;
  std::vector<at::Tensor> hidden_states;
  std::vector<at::Tensor> position_bias;  // indexed by block (T5: only block 0)
};

TextOutputs run_text_encoder(io::ModuleComponent& comp, const at::Tensor& ids, const at::Tensor& mask) {
  TextOutputs o;
  if (auto* clip = dynamic_cast<CLIPTextComponent*>(&comp)) {
    auto out = clip->model->forward(ids, mask, true);
    o.last_hidden_state = out.last_hidden_state;
    o.pooler_output = out.pooler_output;
    o.text_embeds = out.text_embeds;
    o.hidden_states = out.hidden_states;
  } else if (auto* t5 = dynamic_cast<T5EncoderComponent*>(&comp)) {
    auto out = t5->model->forward(ids, mask, true);
    o.last_hidden_state = out.last_hidden_state;
    o.hidden_states = out.hidden_states;
    o.position_bias = out.position_bias;
  }
  return o;
}

at::Tensor pick_output(const TextOutputs& o, const std::string& key, const std::string& from, std::string& why) {
  static const std::regex hidden(R"(hidden_states\[(-?\d+)\])");
  static const std::regex block(R"(block\[(\d+)\])");
  static const std::regex dotted(R"(^(hidden_states|position_bias)\.(\d+)$)");
  std::smatch m;
  auto at_index = [&](const std::vector<at::Tensor>& v, long i) -> at::Tensor {
    const long n = static_cast<long>(v.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
      why = "index " + std::to_string(i) + " out of range (" + std::to_string(n) + " produced)";
      return {};
    }
    return v[static_cast<std::size_t>(i)];
  };
  if (from.find("position bias") != std::string::npos || key.rfind("position_bias", 0) == 0) {
    long i = 0;
    if (std::regex_search(from, m, block)) i = std::stol(m[1]);
    else if (std::regex_match(key, m, dotted)) i = std::stol(m[2]);
    return at_index(o.position_bias, i);
  }
  if (std::regex_search(from, m, hidden)) return at_index(o.hidden_states, std::stol(m[1]));
  if (from.find("text_embeds") != std::string::npos || key == "text_embeds") {
    if (!o.text_embeds.defined()) why = "the model has no text projection";
    return o.text_embeds;
  }
  if (from.find("pooler_output") != std::string::npos || key == "pooler_output") {
    if (!o.pooler_output.defined()) why = "the model has no pooled output";
    return o.pooler_output;
  }
  if (from.find("last_hidden_state") != std::string::npos || key.rfind("last_hidden_state", 0) == 0) {
    return o.last_hidden_state;
  }
  if (std::regex_match(key, m, dotted) && m[1] == "hidden_states") return at_index(o.hidden_states, std::stol(m[2]));
  why = "cannot tell which output `" + key + "` is (from: " + from + ")";
  return {};
}

void run_text_encoder_case(const CaseContext& ctx, CaseResult& result) {
  auto comp = load_case_model(ctx);
  at::Tensor backward_sample;
  const bool grad = wants_backward(ctx);
  if (grad) set_trainable(comp->module());
  for (const auto& call : ctx.case_json().at("calls")) {
    const auto args = tensor_arg_names(call);
    if (std::find(args.begin(), args.end(), "input_ids") == args.end()) {
      throw Error(ctx.case_name() + ": a text-encoder call needs input_ids", ExitCode::bad_input);
    }
    const auto& ids = ctx.input("input_ids");
    at::Tensor mask;
    if (std::find(args.begin(), args.end(), "attention_mask") != args.end()) mask = ctx.input("attention_mask");
    at::AutoGradMode mode(grad);
    auto out = run_text_encoder(*comp, ids, mask);
    for (const auto& key : output_keys(call)) {
      const auto from = call["outputs"][key].value("from", std::string());
      std::string why;
      auto t = pick_output(out, key, from, why);
      if (!t.defined()) {
        missing_output(result, key, why);
        continue;
      }
      ctx.compare(key, t.detach(), result);
    }
    if (grad && !backward_sample.defined()) backward_sample = out.last_hidden_state;
  }
  if (grad && backward_sample.defined()) compare_gradients(ctx, comp->module(), backward_sample, result);
}

}  // namespace

void register_model_parity_kinds() {
  parity::register_kind("autoencoder", parity::class_dispatcher("autoencoder"));
  parity::register_class("autoencoder", "AutoencoderKL", run_autoencoder_case);
  parity::register_class("autoencoder", "AutoencoderKLLTX2Audio", run_ltx2_audio_vae_case);
  // `model` cases are dispatched by class too (plugins serve the others).
  parity::register_kind("model", parity::class_dispatcher("model"));
  for (const char* cls : {"LTX2Vocoder", "LTX2VocoderWithBWE"}) parity::register_class("model", cls, run_ltx2_vocoder_case);
  parity::register_kind("text_encoder", parity::class_dispatcher("text_encoder"));
  for (const char* cls : {"CLIPTextModel", "CLIPTextModelWithProjection", "T5EncoderModel", "UMT5EncoderModel"}) {
    parity::register_class("text_encoder", cls, run_text_encoder_case);
  }
}

}  // namespace yeto::models
