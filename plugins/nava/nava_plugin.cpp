// The NAVA joint audio-video family plugin, written against the SDK only: the WanAVModel
// component class (registered under its name, its upstream module path and the class the recorded
// reference cases name), NAVA's rotary helpers as a component the rope reference case calls, and
// the family's pipeline: repository plan (pipeline layout from nava.family.json, or the release
// layout config.json + NAVA.safetensors with keys under "backbone."),
// presets, LoRA (or full) tuning of the denoiser, and NAVA's training loss as loss_step.
//
// A training row (loss_step) carries cached tensors, stacked by the host per micro batch:
//   latents        [F, H, W, C_v]  the clip's video latents, channel-last as NAVA's batches hold
//                                  them (Wan 2.2 VAE: 48 channels, 4x temporal / 16x spatial)
//   audio_latents  [L, C_a]        the sound's latents (LTX-2 audio VAE: 128 channels, 25 tokens/s)
//   prompt_embeds  [L_text, D]     the umT5 output of the caption (L_text <= text_len; zero rows
//                                  past the caption are what the model pads with anyway)
//   speaker_embeds [n, 192]        optional speaker (timbre) embeddings (ReDimNet), with
//   speaker_positions [n]          the caption rows they replace in the audio context
// Per row, from the row's seed, in NAVA's order: two uniform draws (row 0's decide the micro
// batch's masking_modality at 0.2 and i2v mode at 0.5, configs/nava.yaml; training rows only), the
// timestep id in [0, 1000), the caption dropout (0.1: a zero caption without its speakers; never
// every row), the audio noise, then the video noise. The loss is NAVA's (nava_train.hpp); its
// per-modality terms are the step's metrics.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "nava_family.hpp"
#include "nava_model.hpp"
#include "nava_sampler.hpp"
#include "nava_train.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/wan_vae_component.hpp"

namespace yeto::nava {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sdk::NamedTensors;

constexpr const char* kModel = "WanAVModel";
constexpr const char* kModelModule = "nava_src.models.nava.modules.model_mm.WanAVModel";
constexpr const char* kRecordedModel =
    "nava_src.models.nava.modules.model_mm.WanAVModel (inside nava_src.model_nava.NAVA as .backbone)";
constexpr const char* kSampler =
    "nava_src.pipeline_nava.AudioVideoPipeline.sample + nava_src.model_nava.NAVA.predict_eps + "
    "wan.utils.fm_solvers_unipc.FlowUniPCMultistepScheduler";
constexpr const char* kRope =
    "nava_src.models.nava.modules.model_mm: rope_params, WanAVModel.set_rope_params, rope_apply_3d, rope_apply_1d, "
    "rope_apply_joint";
constexpr double kMaskingModalityProb = 0.2;  // configs/nava.yaml masking_modality_prob
constexpr double kI2vModeProb = 0.5;          // configs/nava.yaml i2v_mode_prob
constexpr double kTextDropProb = 0.1;         // AudioVideoPipeline.forward's caption dropout
// Clip timing of NAVA's latents: Wan 2.2 VAE 4x temporal at 24 fps, LTX-2 audio 25 tokens/s.
constexpr double kVideoFps = 24.0, kAudioTokensPerSecond = 25.0;
constexpr std::int64_t kTemporalCompression = 4;

const at::Tensor* find(const NamedTensors& in, const std::string& name) {
  for (const auto& [n, t] : in)
    if (n == name && t.defined()) return &t;
  return nullptr;
}

// The recorded case's tensor `name` (fails naming it).
const at::Tensor& input(const NamedTensors& in, const std::string& name) {
  const auto* t = find(in, name);
  if (!t) sdk::fail(YETO_ERR_NOT_FOUND, "recorded case: no input tensor '" + name + "'");
  return *t;
}

class ModelComponent : public family::ModelComponent<WanAVModel, NavaConfig> {
 public:
  ModelComponent(const std::string& config_json, const std::string& dir)
      : family::ModelComponent<WanAVModel, NavaConfig>(
            config_json, dir,
            {kModel, "is this a NAVA WanAVModel state dict (NAVA.safetensors without 'backbone.') of this config?",
             /*with_buffers=*/false}) {}

  // PEFT LoRA tensors (a recorded lora case's adapter_model.safetensors) are kept for the case.
  void load_weights(const NamedTensors& weights, bool strict) override {
    NamedTensors plain;
    for (const auto& [n, t] : weights) {
      if (n.find(".lora_A.") != std::string::npos || n.find(".lora_B.") != std::string::npos)
        lora_[n] = t;
      else
        plain.emplace_back(n, t);
    }
    family::ModelComponent<WanAVModel, NavaConfig>::load_weights(plain, strict);
  }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    const json o = options.empty() ? json::object() : family::parse_json(options, "WanAVModel forward options");
    try {
      if (o.contains("recorded_case")) return recorded(o["recorded_case"], in);
      return plain_forward(o, in);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

 private:
  // Inputs video.<i> [C_v, F, H, W], audio.<i> [L, C_a], t [B], context.<i> (or video_context.<i>
  // / audio_context.<i>), speaker [n, 192]; options speaker_positions [[...], ...],
  // masking_modality, first_frame_is_clean. Outputs video.<i>, audio.<i>.
  NamedTensors plain_forward(const json& o, const NamedTensors& in) {
    Inputs x;
    auto list = [&](const std::string& prefix) {
      std::vector<at::Tensor> out;
      for (std::size_t i = 0;; ++i) {
        const auto* t = find(in, prefix + "." + std::to_string(i));
        if (!t) break;
        out.push_back(*t);
      }
      return out;
    };
    x.video = list("video");
    x.audio = list("audio");
    x.t = sdk::get(in, "t");
    x.video_context = find(in, "video_context.0") ? list("video_context") : list("context");
    x.audio_context = find(in, "audio_context.0") ? list("audio_context") : list("context");
    if (const auto* s = find(in, "speaker")) x.speaker = *s;
    if (o.contains("speaker_positions")) x.speaker_positions = o["speaker_positions"].get<std::vector<std::vector<std::int64_t>>>();
    x.masking_modality = o.value("masking_modality", false);
    x.first_frame_is_clean = o.value("first_frame_is_clean", false);
    at::NoGradGuard no_grad;
    const auto out = model_->forward(x);
    NamedTensors r;
    for (std::size_t i = 0; i < out.video.size(); ++i) r.emplace_back("video." + std::to_string(i), out.video[i]);
    for (std::size_t i = 0; i < out.audio.size(); ++i) r.emplace_back("audio." + std::to_string(i), out.audio[i]);
    return r;
  }

  // The LoRA of a recorded lora case (adapter_config r / lora_alpha), attached once.
  void attach_adapter(const json& cfg) {
    if (adapter_attached_) return;
    nn::LoraConfig lc;
    lc.r = cfg.value("r", std::int64_t{4});
    lc.alpha = cfg.value("lora_alpha", static_cast<double>(lc.r));
    lc.init = "zeros";
    std::map<std::string, at::Tensor> tensors(lora_.begin(), lora_.end());
    if (tensors.empty()) throw std::invalid_argument("recorded lora case: no LoRA tensors among its model_files");
    nn::load_lora_state_dict(*model_, tensors, lc);
    adapter_attached_ = true;
  }

  StepBatch recorded_batch(const json& call, const NamedTensors& in) {
    const json& batch = call.at("batch");
    StepBatch sb;
    const auto thw = batch.at("t_h_w_list");
    const auto captions = batch.at("captions");
    const auto b = thw.size();
    std::vector<at::Tensor> speakers;
    for (std::size_t i = 0; i < b; ++i) {
      const auto si = std::to_string(i);
      sb.video.push_back(input(in, "video_latents." + si));
      sb.audio.push_back(input(in, "audio_latents." + si));
      const auto caption = captions.at(i).get<std::string>();
      const json& enc = batch.at("text_encoder").at(caption);
      sb.text.push_back(input(in, enc.at("embeddings").get<std::string>()));
      sb.speaker_positions.push_back(enc.value("spk_pos", std::vector<std::int64_t>()));
      for (const auto& name : batch.at("spk_embs").at(i)) speakers.push_back(input(in, name.get<std::string>()));
    }
    if (!speakers.empty()) sb.speaker = at::cat(speakers, 0);
    return sb;
  }

  // A recorded nava-sampler case: the schedulers' tables and AudioVideoPipeline.sample's loop
  // from the recorded initial latents.
  NamedTensors recorded_sampler(const json& c, const NamedTensors& in) {
    NamedTensors out;
    auto put = [&](const std::string& name, const at::Tensor& t) { out.emplace_back(name, t.detach().cpu()); };
    const json& call = c.at("calls").at(0);
    const std::string python = call.value("python", std::string());
    auto number = [&](const std::string& key) {
      const auto at = python.find(key + "=");
      if (at == std::string::npos) throw std::invalid_argument("recorded case: the call does not give '" + key + "'");
      return std::stod(python.substr(at + key.size() + 1));
    };
    FlowUniPC scheduler;
    put("sample_scheduler.init.sigmas", scheduler.init_sigmas());
    for (const std::int64_t n : {3, 25, 50})
      for (const char* name : {"sample_scheduler", "sample_scheduler_audio"}) {
        scheduler.set_timesteps(n);
        const auto p = std::string(name) + ".set_timesteps.N" + std::to_string(n) + ".";
        put(p + "timesteps", scheduler.timesteps());
        put(p + "sigmas", scheduler.sigmas());
      }
    const json& batch = call.at("batch");
    const auto grid = batch.at("t_h_w_list").at(0).get<std::vector<std::int64_t>>();
    const json& enc = call.at("text_encoder");
    SampleRequest r;
    r.video_grid = grid;
    r.steps = static_cast<std::int64_t>(number("num_steps"));
    r.video_guidance = number("video_guidance_scale");
    r.video_align_guidance = number("video_align_guidance_scale");
    r.audio_guidance = number("audio_guidance_scale");
    r.audio_align_guidance = number("audio_align_guidance_scale");
    r.timbre_guidance = number("timbre_align_guidance_scale");
    const auto caption = batch.at("captions").at(0).get<std::string>();
    r.text = input(in, enc.at(caption).at("embeddings").get<std::string>());
    r.speaker_positions = enc.at(caption).value("spk_pos", std::vector<std::int64_t>());
    for (const auto& [key, value] : enc.items()) {
      if (key.find("video negative prompt") != std::string::npos) r.negative_video = input(in, value.at("embeddings"));
      if (key.find("audio negative prompt") != std::string::npos) r.negative_audio = input(in, value.at("embeddings"));
    }
    if (!r.negative_video.defined() || !r.negative_audio.defined())
      throw std::invalid_argument("recorded case: the text encoder entries name no negative prompts");
    std::vector<at::Tensor> speakers;
    for (const auto& name : batch.at("spk_embs").at(0)) speakers.push_back(input(in, name.get<std::string>()));
    if (!speakers.empty()) r.speaker = at::cat(speakers, 0);
    const auto& video = input(in, "init.latents_vision");
    const auto& audio = input(in, "init.latents_audio");
    r.audio_len = audio.size(0);
    at::NoGradGuard no_grad;
    const bool was_training = model_->is_training();
    model_->eval();
    const auto [v, a] = nava::sample(model_, r, video, audio, put);
    model_->train(was_training);
    put("decoded.video_latent.0", v.view({grid[0], grid[1], grid[2], -1}));
    put("decoded.audio_latent.0", a.narrow(0, 0, r.audio_len).permute({1, 0}).unsqueeze(0));
    return out;
  }

  NamedTensors recorded(const json& c, const NamedTensors& in) {
    if (c.value("kind", std::string()) == "sampler") return recorded_sampler(c, in);
    if (c.contains("adapter_config")) attach_adapter(c["adapter_config"]);
    NamedTensors out;
    auto put = [&](const std::string& name, const at::Tensor& t) { out.emplace_back(name, t.detach().cpu()); };
    const auto schedule = training_schedule();
    put("schedule.timesteps", schedule.timesteps);
    put("schedule.sigmas", schedule.sigmas);
    put("schedule.linear_timesteps_weights", schedule.weights);
    const json calls = c.value("calls", json::array());
    const json* train_call = nullptr;
    for (const auto& call : calls)
      if (call.value("name", "") == "train_step") train_call = &call;
    if (!train_call) throw std::invalid_argument("recorded case: no train_step call");
    auto sb = recorded_batch(*train_call, in);
    // The step's draws in NAVA's order from torch.manual_seed(seed); the recorded noises are used.
    const auto seed = c.at("seeds").at("train_step_rng").get<std::uint64_t>();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    draw_step(gen, sb);
    for (std::size_t i = 0; i < sb.video.size(); ++i) {
      if (const auto* n = find(in, "noise.video." + std::to_string(i))) sb.video_noise[i] = *n;
      if (const auto* n = find(in, "noise.audio." + std::to_string(i))) sb.audio_noise[i] = *n;
    }
    // Training: every parameter (or, with an adapter, every LoRA tensor) gets its gradient.
    const json grads = c.contains("backward") ? c["backward"].value("grad_keys", json::object()) : json::object();
    {
      at::AutoGradMode grad(true);
      for (auto& p : model_->named_parameters()) {
        const bool lora = p.key().find(".lora_") != std::string::npos;
        p.value().set_requires_grad(adapter_attached_ ? lora : true);
        p.value().mutable_grad() = at::Tensor();
      }
      const bool was_training = model_->is_training();
      model_->train(true);
      auto r = train_step(model_, schedule, sb, LossWeights{});
      r.loss.backward();
      model_->train(was_training);
      put("loss", r.loss);
      for (const auto& [n, v] : r.losses) put("losses." + n, v);
      put("train.timestep_id", sb.timestep_id);
      put("train.timesteps", r.timesteps);
      put("train.sigma", r.sigma);
      put("train.loss_reweight", r.weight);
      for (std::size_t i = 0; i < r.video_input.size(); ++i) {
        const auto si = std::to_string(i);
        put("train.video_input." + si, r.video_input[i]);
        put("train.video_target." + si, r.video_target[i]);
        put("train.pred_video." + si, r.pred_video[i]);
      }
      for (std::size_t i = 0; i < r.audio_input.size(); ++i) {
        const auto si = std::to_string(i);
        put("train.audio_input." + si, r.audio_input[i]);
        put("train.audio_target." + si, r.audio_target[i]);
        put("train.pred_audio." + si, r.pred_audio[i]);
      }
      std::map<std::string, at::Tensor> params;
      for (const auto& p : model_->named_parameters()) params[p.key()] = p.value();
      for (const auto& [key, name] : grads.items()) {
        const auto it = params.find(name.get<std::string>());
        if (it != params.end() && it->second.grad().defined()) put(key, it->second.grad());
      }
      for (auto& p : model_->named_parameters()) p.value().mutable_grad() = at::Tensor();
    }
    at::NoGradGuard no_grad;
    for (const auto& call : calls) {
      if (call.value("name", "") != "loss_other_weights") continue;
      LossWeights w;
      w.audio = 0.5;
      w.vision = 2.0;
      const auto r = train_step(model_, schedule, sb, w);
      put("loss_coff_0.5_2.0", r.loss);
      for (const auto& [n, v] : r.losses) put("losses_coff_0.5_2.0." + n, v);
    }
    // The backbone calls: the recorded noisy inputs in eval mode, with the variants.
    const json* backbone = nullptr;
    for (const auto& call : calls)
      if (call.value("name", "") == "backbone") backbone = &call;
    if (!backbone) return out;
    const json& sa = backbone->at("scalar_args");
    Inputs base;
    const auto b = sb.video.size();
    for (std::size_t i = 0; i < b; ++i) {
      const auto si = std::to_string(i);
      base.video.push_back(input(in, "backbone_in.vid." + si));
      base.audio.push_back(input(in, "backbone_in.audio." + si));
      base.video_context.push_back(input(in, "backbone_in.context." + si));
    }
    base.audio_context = base.video_context;
    base.t = input(in, "backbone_in.t");
    base.speaker = input(in, "backbone_in.spk_embed");
    base.speaker_positions = sa.value("spk_pos", std::vector<std::vector<std::int64_t>>());
    base.video_seq_len = sa.value("vid_seq_len", std::int64_t{0});
    base.audio_seq_len = sa.value("audio_seq_len", std::int64_t{0});
    const bool was_training = model_->is_training();
    model_->eval();
    auto emit = [&](const std::string& variant, const Outputs& o) {
      for (std::size_t i = 0; i < o.video.size(); ++i) put("backbone." + variant + ".video." + std::to_string(i), o.video[i]);
      for (std::size_t i = 0; i < o.audio.size(); ++i) put("backbone." + variant + ".audio." + std::to_string(i), o.audio[i]);
    };
    emit("joint", model_->forward(base, [&](const std::string& n, const at::Tensor& t) { put(n, t); }));
    json variants = json::object();
    for (const auto& call : calls)
      if (call.value("name", "") == "backbone_variants" && call.contains("python") && call["python"].is_object())
        variants = call["python"];
    for (const auto& [variant, _] : variants.items()) {
      Inputs v = base;
      if (variant == "masking_modality") {
        v.masking_modality = true;
      } else if (variant == "first_frame_is_clean") {
        v.first_frame_is_clean = true;
      } else if (variant == "no_speaker") {
        v.speaker = at::Tensor();
        v.speaker_positions.clear();
      } else if (variant == "audio_only") {
        v.video.clear();
        v.video_context.clear();
        v.video_seq_len = 0;
      } else if (variant == "video_only") {
        v.audio.clear();
        v.audio_context.clear();
        v.audio_seq_len = 0;
        v.speaker = at::Tensor();
        v.speaker_positions.clear();
      } else {
        throw std::invalid_argument("recorded case: unknown backbone variant '" + variant + "'");
      }
      emit(variant, model_->forward(v));
    }
    model_->train(was_training);
    return out;
  }

  std::map<std::string, at::Tensor> lora_;
  bool adapter_attached_ = false;
};

// NAVA's RoPE helpers for the nava-rope case: options {"recorded_case": case.json} gives, for
// each `tables.d<head_dim>_s<scale>` call, the tables at the rows of input `rows`, and for each
// `apply<k>` call the three rotations of its inputs.
class RopeComponent : public sdk::Component {
 public:
  RopeComponent(const std::string&, const std::string&) {}
  NamedTensors parameters() override { return {}; }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    const json o = family::parse_json(options, "NAVA rope options");
    if (!o.is_object() || !o.contains("recorded_case"))
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "NAVA rope: options must be {\"recorded_case\": <case.json>}");
    try {
      return recorded(o["recorded_case"], in);
    } catch (const std::exception& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("NAVA rope: ") + e.what());
    }
  }

 private:
  static NamedTensors recorded(const json& c, const NamedTensors& in) {
    NamedTensors out;
    const auto& rows = input(in, "rows");
    for (const auto& call : c.at("calls")) {
      const auto name = call.at("name").get<std::string>();
      if (name.rfind("tables.", 0) == 0) {
        // tables.d<head_dim>_s<scale>: read both from the python text of the call.
        const auto python = call.at("python").get<std::string>();
        const auto d = number_after(python, "dim // num_heads = ");
        const auto s = number_after(python, "temporal_rope_scaling_factor = ");
        const auto [video, audio] = rope_tables(static_cast<std::int64_t>(d), s, rows.to(at::kLong));
        out.emplace_back(name + ".freqs_video", video);
        out.emplace_back(name + ".freqs_audio", audio);
        const auto hd = static_cast<std::int64_t>(d);
        out.emplace_back(name + ".inv_freq_temporal", rope_inv_freq(hd - 4 * (hd / 6)));
        out.emplace_back(name + ".inv_freq_spatial", rope_inv_freq(2 * (hd / 6)));
        continue;
      }
      const json& sa = call.at("scalar_args");
      const auto head_dim = sa.at("head_dim").get<std::int64_t>();
      const auto scale = sa.at("temporal_rope_scaling_factor").get<double>();
      const auto vid_len = sa.at("vid_seq_len").get<std::int64_t>();
      const auto& xv = input(in, name + ".x_video");
      const auto& xa = input(in, name + ".x_audio");
      const auto& xj = input(in, name + ".x_joint");
      const auto gv = input(in, name + ".grid_sizes_video").to(at::kLong);
      const auto ga = input(in, name + ".grid_sizes_audio").to(at::kLong);
      std::vector<std::vector<std::int64_t>> grids;
      std::vector<std::int64_t> lengths;
      for (std::int64_t i = 0; i < gv.size(0); ++i)
        grids.push_back({gv[i][0].item<std::int64_t>(), gv[i][1].item<std::int64_t>(), gv[i][2].item<std::int64_t>()});
      for (std::int64_t i = 0; i < ga.size(0); ++i) lengths.push_back(ga[i][0].item<std::int64_t>());
      const auto rv = video_rotation(head_dim, grids, xv.size(1));
      const auto ra = audio_rotation(head_dim, scale, lengths, xa.size(1));
      out.emplace_back(name + ".rope_apply_3d", apply_rotation(xv, rv));
      out.emplace_back(name + ".rope_apply_1d", apply_rotation(xa, ra));
      const auto joint = join(video_rotation(head_dim, grids, vid_len),
                              audio_rotation(head_dim, scale, lengths, xj.size(1) - vid_len));
      out.emplace_back(name + ".rope_apply_joint", apply_rotation(xj, joint));
    }
    return out;
  }

  static double number_after(const std::string& text, const std::string& marker) {
    const auto at = text.find(marker);
    if (at == std::string::npos) throw std::invalid_argument("the call `" + text + "` does not say '" + marker + "'");
    return std::stod(text.substr(at + marker.size()));
  }
};

// The pipeline's denoiser, by either of its registered names.
WanAVModel& denoiser() {
  const auto c = sdk::Host::component("transformer");
  for (const char* cls : {kModel, kModelModule, kRecordedModel})
    if (auto* impl = c.as<ModelComponent>(cls)) return impl->model();
  return family::plugin_model<ModelComponent>("transformer", kModel, "nava");
}

// x with three decimals, for logs.
std::string decimal(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

// A row's field as a clear error.
[[noreturn]] void row_fail(const json& rows, std::int64_t i, const std::string& what) {
  const auto& r = rows[static_cast<std::size_t>(i)];
  const std::string where = r.contains("row") ? "row " + r["row"].dump() : "row " + std::to_string(i);
  sdk::fail(YETO_ERR_INVALID_ARGUMENT, "nava: " + where + ": " + what);
}

// Captions through the repository's umT5 (tokenizer + text_encoder), as NAVA's text model gives
// them: [B, text_len, D], the rows past each caption's tokens zero (Wan's T5EncoderModel returns
// the first seq_len rows, and the model pads with zero rows again). Null when the repository has
// no text encoder.
at::Tensor encode_captions(const std::vector<std::string>& prompts, std::int64_t text_len) {
  if (!sdk::Host::has_component("text_encoder") || !sdk::Host::has_component("tokenizer")) return at::Tensor();
  family::TextEncoderCall call;
  call.max_length = text_len;
  call.with_mask = true;
  call.tokenize.prompt_clean = true;
  at::NoGradGuard no_grad;
  const auto t = family::encode_text(prompts, call);
  const auto hidden = t.output("last_hidden_state");
  const auto keep = t.attention_mask.gt(0).to(hidden.device()).unsqueeze(-1).to(hidden.scalar_type());
  return (hidden * keep).detach();
}

class NavaPlugin : public sdk::Plugin {
 public:
  void register_components(sdk::ComponentRegistry& registry) override {
    registry.add<ModelComponent>(kModel);
    registry.add<ModelComponent>(kModelModule);
    registry.add<ModelComponent>(kRecordedModel);
    registry.add<ModelComponent>(kSampler);
    registry.add<RopeComponent>(kRope);
    registry.add<wan::VaeComponent>("AutoencoderKLWan");
  }

  // A repository in the family file's layout (model_index.json with transformer), or, without
  // model_index.json, NAVA's release layout: config.json (NAVA_6B.json layout) and
  // NAVA.safetensors (bf16), every key under "backbone.".
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) override {
    const auto index = family::parse_json(model_index_json, model_dir + "/model_index.json");
    try {
      auto plan = index.is_object() && index.empty() ? release_plan(model_dir) : description().plan(model_dir, index);
      plan["inputs"] = declared_inputs(model_dir, plan);
      return plan.dump();
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  // Media -> NAVA's latents through the repository's encoders (what `yeto-host cache` stores):
  // "pixel_values" [B, 3, F, H, W] in [-1, 1] (F = 4k + 1, H and W multiples of 16) -> "latents"
  // [B, F', H / 16, W / 16, C_v] (channel-last, normalised as Wan2_2_VAE.encode), and with
  // "audio" [B, channels, samples] at the audio VAE's rate -> "audio_latents" [B, L, C_a].
  // Options {"sample": bool, "seed": n} as every family's (the posterior's mean by default).
  NamedTensors encode_media(const NamedTensors& media, const std::string& options_json) override {
    const auto o = family::parse_json(options_json, "encode_media options");
    NamedTensors out;
    try {
      out.emplace_back("latents", encode_video(sdk::get(media, "pixel_values"), o));
      if (const auto* audio = find(media, "audio")) out.emplace_back("audio_latents", encode_audio(*audio, o));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("nava encode_media: ") + e.what());
    }
    return out;
  }

  std::string presets() override { return description().presets().dump(); }

  // LoRA (targets auto = the attention projections of both modalities; all-linear without the
  // two output heads) or full tuning, placed by the run's device and precision, with the run's
  // per-block activation checkpointing.
  void prepare(const std::string& options_json) override {
    const auto o = family::parse_json(options_json, "prepare options");
    family::TuningSpec spec;
    spec.resolve_targets = [](const json& t) { return description().lora_targets(t); };
    spec.all_linear_excludes = {"head.head", "head_audio.head"};
    tuning_ = family::prepare_denoisers({&family::plugin_module("transformer", "nava")}, o, spec);
  }

  NamedTensors trainable_parameters() override {
    return family::trainable_parameters({{"transformer", &family::plugin_module("transformer", "nava")}}, tuning_);
  }

  at::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics) override {
    const json rows = family::parse_json(rows_json, "loss_step rows");
    if (!rows.is_array() || rows.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "nava loss_step: no rows");
    auto& model = denoiser();
    const auto& cfg = model->config();
    const auto b = static_cast<std::int64_t>(rows.size());
    const auto cv = std::to_string(cfg.vid_in_dim), ca = std::to_string(cfg.audio_in_dim),
               td = std::to_string(cfg.text_dim);
    // Rows of media: the clip and its sound through the repository's encoders.
    at::Tensor encoded_video, encoded_audio;
    const auto* latents = find(batch, "latents");
    if (const auto* px = find(batch, "pixel_values")) {
      try {
        encoded_video = encode_video(*px, json::object());
      } catch (const std::invalid_argument& e) {
        row_fail(rows, 0, e.what());
      }
      latents = &encoded_video;
    }
    if (!find(batch, "audio_latents"))
      if (const auto* wave = find(batch, "audio")) {
        try {
          encoded_audio = encode_audio(*wave, json::object());
        } catch (const std::invalid_argument& e) {
          row_fail(rows, 0, e.what());
        }
      }
    if (!latents)
      row_fail(rows, 0, "no cached video 'latents' [F, H, W, " + cv +
                            "] (channel-last Wan 2.2 VAE latents); add them to the row's tensors");
    const auto* audio = encoded_audio.defined() ? &encoded_audio : find(batch, "audio_latents");
    if (!audio)
      row_fail(rows, 0, "no cached 'audio_latents' [L, " + ca +
                            "] (LTX-2 audio VAE latents of the clip's sound, 25 tokens/s); add them to the row's "
                            "tensors, e.g. \"tensors\": {\"audio_latents\": \"clip.audio.safetensors\"}");
    const auto* text = find(batch, "prompt_embeds");
    at::Tensor encoded;
    if (!text) {
      std::vector<std::string> prompts;
      for (const auto& r : rows) prompts.push_back(r.value("prompt", std::string()));
      const bool captioned = std::none_of(prompts.begin(), prompts.end(), [](const auto& p) { return p.empty(); });
      if (captioned) encoded = encode_captions(prompts, cfg.text_len);
      if (!encoded.defined())
        row_fail(rows, 0, std::string(captioned ? "the repository has no umT5 text encoder for the captions; give "
                                                 : "no caption and no ") +
                              "cached 'prompt_embeds' [L_text <= " + std::to_string(cfg.text_len) + ", " + td +
                              "] (the umT5 encoding of the caption) in the row's tensors");
      text = &encoded;
    }
    if (latents->dim() != 5 || latents->size(0) != b || latents->size(4) != cfg.vid_in_dim)
      row_fail(rows, 0, "'latents' must be [F, H, W, " + cv + "] per row (channel-last), got a batch of " +
                            c10::str(latents->sizes()) + " for " + std::to_string(b) + " rows");
    if (audio->dim() != 3 || audio->size(0) != b || audio->size(2) != cfg.audio_in_dim)
      row_fail(rows, 0, "'audio_latents' must be [L, " + ca + "] per row, got a batch of " +
                            c10::str(audio->sizes()) + " for " + std::to_string(b) + " rows");
    if (text->dim() != 3 || text->size(0) != b || text->size(2) != cfg.text_dim || text->size(1) > cfg.text_len)
      row_fail(rows, 0, "'prompt_embeds' must be [L_text <= " + std::to_string(cfg.text_len) + ", " + td +
                            "] per row, got a batch of " + c10::str(text->sizes()) + " for " + std::to_string(b) +
                            " rows");
    const auto frames = latents->size(1);
    const auto clip_tokens = static_cast<std::int64_t>(
        std::floor(kAudioTokensPerSecond * static_cast<double>((frames - 1) * kTemporalCompression + 1) / kVideoFps));
    if (audio->size(1) < clip_tokens)
      row_fail(rows, 0, "the audio is shorter than the clip: " + std::to_string(audio->size(1)) +
                            " audio latent tokens for " + std::to_string(frames) + " latent frames (" +
                            std::to_string((frames - 1) * kTemporalCompression + 1) +
                            " video frames at 24 fps need at least " + std::to_string(clip_tokens) +
                            " tokens at 25/s); re-encode the row's sound over the whole clip");
    const auto* speakers = find(batch, "speaker_embeds");
    const auto* positions = find(batch, "speaker_positions");
    if ((speakers == nullptr) != (positions == nullptr))
      row_fail(rows, 0, "'speaker_embeds' [n, 192] and 'speaker_positions' [n] (caption rows) come together");
    if (speakers && (speakers->dim() != 3 || speakers->size(0) != b || speakers->size(2) != NavaConfig::kSpeakerDim ||
                     positions->dim() != 2 || positions->size(0) != b || positions->size(1) != speakers->size(1)))
      row_fail(rows, 0, "'speaker_embeds' must be [n, 192] and 'speaker_positions' [n] per row, got " +
                            c10::str(speakers->sizes()) + " and " + c10::str(positions->sizes()));

    StepBatch sb;
    std::vector<at::Tensor> spk;
    bool training = false;
    double mask_vote = 1.0, i2v_vote = 1.0;
    std::vector<at::Tensor> ids;
    std::vector<bool> dropped;
    for (std::int64_t i = 0; i < b; ++i) {
      const auto& r = rows[static_cast<std::size_t>(i)];
      if (!r.contains("seed") || !r["seed"].is_number_unsigned()) row_fail(rows, i, "has no seed");
      training = training || r.value("training", false);
    }
    for (std::int64_t i = 0; i < b; ++i) {
      const auto& r = rows[static_cast<std::size_t>(i)];
      sb.video.push_back((*latents)[i].to(at::kFloat));
      sb.audio.push_back((*audio)[i].to(at::kFloat));
      // NAVA's draws in its order, from the row's own seed: masking_modality, i2v (row 0's decide
      // the micro batch's), the timestep id, the caption dropout, the audio noise, the video noise.
      auto gen = at::make_generator<at::CPUGeneratorImpl>(r["seed"].get<std::uint64_t>());
      const auto u_mask = at::rand({1}, gen, at::kFloat).item<double>();
      const auto u_i2v = at::rand({1}, gen, at::kFloat).item<double>();
      if (i == 0) mask_vote = u_mask, i2v_vote = u_i2v;
      ids.push_back(at::randint(0, 1000, {1}, gen, at::kLong));
      dropped.push_back(training && at::rand({1}, gen, at::kFloat).item<double>() < kTextDropProb);
      sb.audio_noise.push_back(at::randn(sb.audio.back().sizes(), gen, at::kFloat));
      sb.video_noise.push_back(at::randn(sb.video.back().sizes(), gen, at::kFloat));
    }
    if (std::all_of(dropped.begin(), dropped.end(), [](bool d) { return d; })) dropped[0] = false;
    for (std::int64_t i = 0; i < b; ++i) {
      const bool drop = dropped[static_cast<std::size_t>(i)];
      // A dropped caption is all zeros, without its speakers (AudioVideoPipeline.forward).
      const auto caption = (*text)[i].to(at::kFloat);
      sb.text.push_back(drop ? at::zeros_like(caption) : caption);
      if (speakers && drop) {
        sb.speaker_positions.emplace_back();
      } else if (speakers) {
        spk.push_back((*speakers)[i].to(at::kFloat));
        std::vector<std::int64_t> pos;
        const auto p = (*positions)[i].to(at::kLong).cpu();
        for (std::int64_t k = 0; k < p.size(0); ++k) {
          const auto v = p[k].item<std::int64_t>();
          if (v < 0 || v >= text->size(1))
            row_fail(rows, i, "speaker position " + std::to_string(v) + " is outside its caption's " +
                                  std::to_string(text->size(1)) + " rows");
          pos.push_back(v);
        }
        sb.speaker_positions.push_back(pos);
      } else {
        sb.speaker_positions.emplace_back();
      }
    }
    sb.timestep_id = at::cat(ids);
    if (!spk.empty()) sb.speaker = at::cat(spk, 0);
    sb.masking_modality = training && mask_vote < kMaskingModalityProb;
    sb.i2v = training && i2v_vote < kI2vModeProb;
    const bool was_training = model->is_training();
    model->train(training);
    StepResult r;
    try {
      r = train_step(model, schedule_, sb, LossWeights{});
    } catch (const std::invalid_argument& e) {
      model->train(was_training);
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("nava loss_step: ") + e.what());
    }
    model->train(was_training);
    json m = json::object();
    for (const char* k : {"ddpm_vid", "ddpm_audio", "ddpm_vid_noreweight", "ddpm_audio_noreweight"})
      m[k] = r.losses.at(k).item<double>();
    m["masking_modality"] = sb.masking_modality ? 1.0 : 0.0;
    m["i2v"] = sb.i2v ? 1.0 : 0.0;
    m["captions_dropped"] = static_cast<double>(std::count(dropped.begin(), dropped.end(), true));
    m["t_mean"] = r.timesteps.mean().item<double>();
    metrics = m.dump();
    return r.loss;
  }

  // Request: {"prompts": [a .safetensors prompt], "seed", "steps", "guidance" (the video guidance,
  // also its align scale; configs/nava.yaml: 3), "audio_guidance" (2, also the align scale),
  // "timbre_guidance" (3), "num_frames" (video frames, 4k + 1; 121 by default), "height" /
  // "width" (pixels, multiples of 16), "fps" (24)}. The prompt file's tensors: `prompt_embeds`
  // [L, text_dim] (the caption's umT5 output), optionally `negative_prompt_embeds` (video) and
  // `negative_audio_prompt_embeds` (zeros of the caption's shape when absent: NAVA's
  // negative_prompt_mode off), `speaker_embeds` [n, 192] with `speaker_positions` [n]. The
  // initial noise: randn of the packed video latents [t h w, C_v], then of the audio latents
  // [L, C_a], from a CPU generator seeded with the seed. Outputs the latents the VAEs receive:
  // `video_latents` [t, h, w, C_v] and `audio_latents` [1, C_a, L] (latent scale 1, shift 0).
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto req = family::parse_json(request_json, "generate request");
    auto& model = denoiser();
    const auto& cfg = model->config();
    SampleRequest r;
    std::int64_t frames = 121, height = 704, width = 1280;
    double fps = 24.0;
    std::uint64_t seed = 0;
    try {
      const family::ConfigReader in(req, "nava generate request");
      r.steps = in.integer("steps", 50);
      r.video_guidance = r.video_align_guidance = in.number("guidance", r.video_guidance);
      r.audio_guidance = r.audio_align_guidance = in.number("audio_guidance", r.audio_guidance);
      r.timbre_guidance = in.number("timbre_guidance", r.timbre_guidance);
      frames = in.integer("num_frames", frames);
      height = in.integer("height", height);
      width = in.integer("width", width);
      fps = in.number("fps", fps);
      if (req.contains("seed")) {
        if (!req["seed"].is_number_integer() || req["seed"].get<std::int64_t>() < 0) in.fail("seed", "must be a non-negative integer");
        seed = req["seed"].get<std::uint64_t>();
      }
      if (r.steps < 1) in.fail("steps", "must be at least 1");
      if (frames < 1) in.fail("num_frames", "must be at least 1");
      if (!(fps > 0)) in.fail("fps", "must be positive");
      const auto spatial = 8 * cfg.patch_size[1];  // the Wan 2.2 VAE's 16x, in units the patch divides
      if (height < spatial || width < spatial) in.fail("height", "height and width must be at least " + std::to_string(spatial));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    // Shape rules: 4k + 1 frames (the VAE's 4x temporal compression), 16-pixel latent cells, 25
    // audio tokens per second of the clip.
    const auto latent_frames = (frames - 1) / kTemporalCompression + 1;
    const auto used_frames = (latent_frames - 1) * kTemporalCompression + 1;
    const std::int64_t cell = 16;
    r.video_grid = {latent_frames, height / cell, width / cell};
    r.audio_len = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::floor(kAudioTokensPerSecond * static_cast<double>(used_frames) / fps)));
    sdk::Host::info("nava generate: " + std::to_string(used_frames) + " frames (" + std::to_string(frames) +
                    " asked; 4k + 1) of " + std::to_string(r.video_grid[1] * cell) + "x" +
                    std::to_string(r.video_grid[2] * cell) + " px -> video latents " + std::to_string(latent_frames) +
                    "x" + std::to_string(r.video_grid[1]) + "x" + std::to_string(r.video_grid[2]) + ", " +
                    std::to_string(r.audio_len) + " audio tokens (" + std::to_string(used_frames) + " frames at " +
                    decimal(fps) + " fps, 25 tokens/s), " + std::to_string(r.steps) + " steps");
    const auto* text = find(inputs, "prompt_embeds");
    at::Tensor encoded;
    const auto prompts = req.value("prompts", json::array());
    if (!text && prompts.size() == 1 && prompts[0].is_string()) {
      // A text prompt through the repository's umT5; negative prompts likewise, else zeros.
      encoded = encode_captions({prompts[0].get<std::string>()}, cfg.text_len);
      const auto negatives = req.value("negative_prompts", json::array());
      if (encoded.defined() && !negatives.empty() && negatives[0].is_string()) {
        const auto video_neg = negatives[0].get<std::string>();
        const auto audio_neg = negatives.size() > 1 && negatives[1].is_string() ? negatives[1].get<std::string>() : video_neg;
        const auto neg = encode_captions({video_neg, audio_neg}, cfg.text_len).to(at::kFloat).cpu();
        r.negative_video = neg[0];
        r.negative_audio = neg[1];
      }
      if (encoded.defined()) text = &encoded;
    }
    if (!text)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "nava generate: give the caption as text (the repository's umT5 encodes it; this repository has "
                "none) or as a .safetensors prompt holding 'prompt_embeds' [L, " +
                    std::to_string(cfg.text_dim) + "] (its umT5 encoding)");
    auto flat = [&](const at::Tensor& t) { return t.dim() == 3 && t.size(0) == 1 ? t[0] : t; };
    r.text = flat(*text).to(at::kFloat).cpu();
    if (r.text.dim() != 2 || r.text.size(1) != cfg.text_dim || r.text.size(0) > cfg.text_len)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "nava generate: 'prompt_embeds' must be [L <= " +
                                               std::to_string(cfg.text_len) + ", " + std::to_string(cfg.text_dim) +
                                               "], got " + c10::str(text->sizes()));
    const auto* neg_v = find(inputs, "negative_prompt_embeds");
    const auto* neg_a = find(inputs, "negative_audio_prompt_embeds");
    if (neg_v) r.negative_video = flat(*neg_v).to(at::kFloat);
    if (neg_a) r.negative_audio = flat(*neg_a).to(at::kFloat);
    if (!r.negative_video.defined()) r.negative_video = at::zeros_like(r.text);
    if (!r.negative_audio.defined()) r.negative_audio = at::zeros_like(r.text);
    const auto* spk = find(inputs, "speaker_embeds");
    const auto* pos = find(inputs, "speaker_positions");
    if ((spk == nullptr) != (pos == nullptr))
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "nava generate: 'speaker_embeds' [n, 192] and 'speaker_positions' [n] come together");
    if (spk) {
      r.speaker = flat(*spk).to(at::kFloat);
      const auto p = flat(*pos).to(at::kLong).flatten();
      for (std::int64_t k = 0; k < p.size(0); ++k) r.speaker_positions.push_back(p[k].item<std::int64_t>());
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto tokens = r.video_grid[0] * r.video_grid[1] * r.video_grid[2];
    const auto video = at::randn({tokens, cfg.vid_in_dim}, gen, at::kFloat);
    const auto audio = at::randn({r.audio_len, cfg.audio_in_dim}, gen, at::kFloat);
    family::GenerationTrace trace(req.value("trace", false));
    const bool was_training = model->is_training();
    model->eval();
    std::pair<at::Tensor, at::Tensor> out;
    try {
      out = nava::sample(model, r, video, audio, [&](const std::string& n, const at::Tensor& t) { trace(n, t); });
    } catch (const std::invalid_argument& e) {
      model->train(was_training);
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("nava generate: ") + e.what());
    }
    model->train(was_training);
    NamedTensors result = {
        {"video_latents", out.first.cpu().view({r.video_grid[0], r.video_grid[1], r.video_grid[2], cfg.vid_in_dim})},
        {"audio_latents", out.second.cpu().permute({1, 0}).unsqueeze(0).contiguous()}};
    decode_clip(result, used_frames, fps);
    return trace.outputs(std::move(result));
  }

 private:
  // What the rows of this repository may hold, for the loader and `data check`: cached `latents`
  // [F, H, W, C_v] and `audio_latents` [L, C_a] (with cached latents, always), and, when the
  // repository has LTX-2's audio VAE, the sound of every video row at its rate and channel count.
  static json declared_inputs(const std::string& model_dir, const json& plan) {
    const fs::path dir(model_dir);
    const json& comps = plan.at("components");
    json tcfg = comps.contains("transformer") && comps["transformer"].contains("config")
                    ? comps["transformer"]["config"]
                    : family::read_json_file((dir / "transformer" / "config.json").string());
    const auto c = NavaConfig::from_json(tcfg);
    json in = {{"tensors",
                {{"latents", {{"shape", {-1, -1, -1, c.vid_in_dim}}}},
                 {"audio_latents", {{"shape", {-1, c.audio_in_dim}}, {"with_latents", true}}}}}};
    if (comps.contains("audio_vae") && !comps["audio_vae"].is_null()) {
      const auto path = dir / "audio_vae" / "config.json";
      const json a = fs::exists(path) ? family::read_json_file(path.string()) : json::object();
      in["audio"] = {{"sample_rate", a.value("sample_rate", 16000)}, {"channels", a.value("in_channels", 2)}};
    }
    return in;
  }

  // Pixels [B, 3, F, H, W] (or images [B, 3, H, W]) in [-1, 1] -> the Wan 2.2 VAE's normalised
  // latents, channel-last [B, F', H', W', C_v] as NAVA's batches hold them. Throws
  // std::invalid_argument saying what to change.
  static at::Tensor encode_video(at::Tensor px, const json& options) {
    if (!sdk::Host::has_component("vae"))
      throw std::invalid_argument(
          "raw video needs the repository's Wan 2.2 VAE (component 'vae', AutoencoderKLWan), which it has not; give the "
          "clip as cached 'latents' [F, H, W, C_v] and 'audio_latents' [L, C_a], or use a repository with its encoders "
          "(init-model --preset tiny-av)");
    auto* vae = sdk::Host::component("vae").as<wan::VaeComponent>("AutoencoderKLWan");
    if (!vae) throw std::invalid_argument("the repository's vae is not an AutoencoderKLWan (the Wan 2.2 VAE)");
    const auto& vc = vae->model()->config();
    if (px.dim() == 4) px = px.unsqueeze(2);
    if (px.dim() != 5 || px.size(1) != 3)
      throw std::invalid_argument("'pixel_values' must be a video batch [B, 3, F, H, W] in [-1, 1], got " +
                                  c10::str(px.sizes()));
    const auto tf = vc.temporal_factor(), sf = vc.spatial_factor();
    if ((px.size(2) - 1) % tf != 0)
      throw std::invalid_argument("the Wan 2.2 VAE encodes 1 + " + std::to_string(tf) + "k frames, got " +
                                  std::to_string(px.size(2)) + " (set data.num_frames to 1, 5, 9, 13, ...)");
    if (px.size(3) % sf != 0 || px.size(4) % sf != 0)
      throw std::invalid_argument("height and width must be multiples of " + std::to_string(sf) + ", got " +
                                  std::to_string(px.size(3)) + "x" + std::to_string(px.size(4)) +
                                  " (set data.height / data.width)");
    at::NoGradGuard no_grad;
    const auto d = sdk::Host::vae("vae").encode(px.to(at::kFloat));
    const auto z = family::posterior_latent(d.mean.to(at::kFloat), d.logvar.to(at::kFloat), options);
    return wan::normalize_latents(vc, z).permute({0, 2, 3, 4, 1}).contiguous();
  }

  // Waveforms [B, channels, samples] at the audio VAE's rate -> LTX-2's normalised packed audio
  // latents [B, L, C_a] (ltx-core's AudioProcessor + AudioEncoder: log-mel, the posterior, packed
  // [B, T, C * M], normalised with the VAE's per-channel statistics). A mono track is duplicated.
  static at::Tensor encode_audio(at::Tensor wave, const json& options) {
    if (!sdk::Host::has_component("audio_vae"))
      throw std::invalid_argument(
          "the row's sound needs the repository's LTX-2 audio VAE (component 'audio_vae'), which it has not; give "
          "cached 'audio_latents' [L, C_a] instead");
    if (wave.dim() != 3 || wave.size(1) < 1 || wave.size(1) > 2)
      throw std::invalid_argument("'audio' must be waveforms [B, 1 or 2, samples], got " + c10::str(wave.sizes()));
    if (wave.size(1) == 1) wave = wave.expand({-1, 2, -1});
    at::NoGradGuard no_grad;
    const auto codec = sdk::Host::component("audio_vae");
    auto call = [&](const std::string& method, const NamedTensors& in, const std::string& output) {
      const auto o = codec.forward(in, json{{"method", method}}.dump());
      const auto* t = find(o, output);
      if (!t) throw std::invalid_argument("the audio VAE's " + method + " returned no '" + output + "'");
      return *t;
    };
    const auto mel = call("log_mel", {{"waveform", wave.to(at::kFloat).contiguous()}}, "sample");
    const auto posterior = codec.forward({{"sample", mel}}, json{{"method", "encode"}}.dump());
    const auto* mean = find(posterior, "mean");
    const auto* logvar = find(posterior, "logvar");
    if (!mean || !logvar) throw std::invalid_argument("the audio VAE's encode returned no mean / logvar");
    const auto z = family::posterior_latent(mean->to(at::kFloat), logvar->to(at::kFloat), options);
    const auto packed = call("pack", {{"latents", z}}, "packed");
    return call("normalize", {{"packed", packed}}, "packed").contiguous();
  }

  static json release_plan(const std::string& model_dir) {
    const fs::path dir(model_dir);
    const auto config_path = dir / "config.json";
    // NAVA.safetensors (bf16), or NAVA_fp8.safetensors (the block Linears as e4m3 codes with their
    // weight_scale, read as they are by the host's loader): the fp8 file when it is the only one,
    // or when both are there and model.storage = "fp8".
    const auto bf16 = dir / "NAVA.safetensors", fp8 = dir / "NAVA_fp8.safetensors";
    const bool want_fp8 =
        fs::exists(fp8) && (!fs::exists(bf16) || family::host_config_string("model.storage", "auto") == "fp8");
    const auto weights = want_fp8 ? fp8 : bf16;
    if (!fs::exists(config_path) || !fs::exists(weights))
      throw std::invalid_argument("'" + model_dir + "' is neither a repository in the family file's layout (no "
                                  "model_index.json) nor NAVA's release layout (config.json with NAVA.safetensors or "
                                  "NAVA_fp8.safetensors)");
    auto config = family::read_json_file(config_path.string());
    try {
      NavaConfig::from_json(config);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(config_path.string() + ": " + e.what());
    }
    config["_class_name"] = kModel;
    sdk::Host::info("nava: release layout " + model_dir + " (config.json, " + weights.filename().string() + ")");
    json comps = json::object();
    comps["transformer"] = {{"class", kModel}, {"config", config}, {"weights", weights.string()},
                            {"weights_prefix", "backbone."}};
    return {{"components", comps}, {"family", "nava"}};
  }

  // The clip the latents decode to, added to `out` when the repository has the decoders: the video
  // latents [t, h, w, C_v] through the Wan 2.2 VAE (`vae`: channel-first, denormalised with its
  // latents_mean / latents_std as Wan2_2_VAE.decode does) to `video` [1, 3, F, H, W] in [0, 1];
  // the audio latents [1, C_a, L] through LTX-2's audio VAE (`audio_vae`: the packed tokens
  // [1, L, C_a] denormalised with its per-channel statistics, unpacked to [1, C, L, M] and decoded
  // to a mel [1, 2, 4L - 3, mel_bins], as ltx-core's AudioDecoder) and the vocoder (`vocoder`) to
  // `audio` [1, 2, samples] with `audio_sample_rate`. What is absent leaves its latents alone,
  // logged.
  static void decode_clip(NamedTensors& out, std::int64_t frames, double fps) {
    at::NoGradGuard no_grad;
    const auto video_latents = sdk::get(out, "video_latents");
    const auto audio_latents = sdk::get(out, "audio_latents");
    if (sdk::Host::has_component("vae")) {
      auto* vae = sdk::Host::component("vae").as<wan::VaeComponent>("AutoencoderKLWan");
      if (!vae)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "nava generate: the repository's vae is not an AutoencoderKLWan (the Wan 2.2 VAE NAVA's video "
                  "latents belong to)");
      const auto& vc = vae->model()->config();
      if (vc.z_dim != video_latents.size(3))
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "nava generate: the vae has z_dim " + std::to_string(vc.z_dim) +
                                                 " but the denoiser makes " + std::to_string(video_latents.size(3)) +
                                                 "-channel video latents; use the VAE of the model's latents");
      const auto z = wan::denormalize_latents(vc, video_latents.permute({3, 0, 1, 2}).unsqueeze(0).to(at::kFloat));
      const auto video = sdk::Host::vae("vae").decode(z).to(at::kFloat);
      if (video.size(2) != frames)
        sdk::fail(YETO_ERR_INTERNAL, "nava generate: the vae decoded " + std::to_string(video.size(2)) +
                                         " frames, expected " + std::to_string(frames));
      out.emplace_back("video", (video / 2 + 0.5).clamp(0, 1));
      sdk::Host::info("nava generate: video latents decoded by the Wan 2.2 VAE to " + std::to_string(frames) +
                      " frames of " + std::to_string(video.size(4)) + "x" + std::to_string(video.size(3)) + " px (" +
                      decimal(static_cast<double>(frames) / fps) + " s at " + decimal(fps) + " fps)");
    } else {
      sdk::Host::info("nava generate: the repository has no vae (Wan 2.2 VAE); returning the video latents");
    }
    const bool audio_vae = sdk::Host::has_component("audio_vae"), vocoder = sdk::Host::has_component("vocoder");
    if (audio_vae && vocoder) {
      const auto codec = sdk::Host::component("audio_vae");
      const auto packed = audio_latents.permute({0, 2, 1}).to(at::kFloat).contiguous();
      auto call = [&](const sdk::ComponentRef& c, const std::string& method, const NamedTensors& in,
                      const std::string& output) {
        const auto o = c.forward(in, json{{"method", method}}.dump());
        const auto* t = find(o, output);
        if (!t) sdk::fail(YETO_ERR_INTERNAL, "nava generate: the audio " + method + " returned no '" + output + "'");
        return *t;
      };
      const auto denormalized = call(codec, "denormalize", {{"packed", packed}}, "packed");
      const auto latents = call(codec, "unpack", {{"packed", denormalized}}, "latents");
      const auto mel = call(codec, "decode", {{"latents", latents}}, "sample");
      const auto vocoded = sdk::Host::component("vocoder").forward({{"mel", mel}}, json{{"method", "vocode"}}.dump());
      const auto* wave = find(vocoded, "waveform");
      const auto* sample_rate = find(vocoded, "sample_rate");
      if (!wave || !sample_rate) sdk::fail(YETO_ERR_INTERNAL, "nava generate: the vocoder returned no waveform / sample_rate");
      // NAVA's _audio_post_process: clamped to +-0.99.
      const auto waveform = wave->to(at::kFloat).clamp(-0.99, 0.99).contiguous();
      const auto rate = sample_rate->to(at::kLong).item<std::int64_t>();
      out.emplace_back("audio", waveform);
      out.emplace_back("audio_sample_rate", at::scalar_tensor(rate, at::kLong));
      const auto samples = waveform.size(-1);
      sdk::Host::info("nava generate: " + std::to_string(audio_latents.size(2)) +
                      " audio latent tokens decoded by the audio VAE to " + std::to_string(mel.size(2)) +
                      " mel frames and by the vocoder to " + std::to_string(waveform.size(1)) + " channel(s) of " +
                      std::to_string(samples) + " samples at " + std::to_string(rate) + " Hz (" +
                      decimal(static_cast<double>(samples) / static_cast<double>(rate)) + " s; the clip is " +
                      decimal(static_cast<double>(frames) / fps) + " s)");
    } else if (audio_vae || vocoder) {
      sdk::Host::info(std::string("nava generate: the repository has ") + (audio_vae ? "an audio_vae but no vocoder" : "a vocoder but no audio_vae") +
                      "; returning the audio latents");
    } else {
      sdk::Host::info("nava generate: the repository has no audio_vae / vocoder (LTX-2's); returning the audio latents");
    }
  }

  std::string tuning_ = "lora";
  TrainSchedule schedule_ = training_schedule();
};

}  // namespace
}  // namespace yeto::nava

YETO_PLUGIN(yeto::nava::NavaPlugin)
