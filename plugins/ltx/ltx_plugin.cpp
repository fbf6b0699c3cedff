// The LTX-Video family plugin: the LTXVideoTransformer3DModel and AutoencoderKLLTXVideo
// component classes and the LTXPipeline semantics as plugin hooks, written against the SDK only
// (yeto/plugin.hpp, sdk/nn, sdk/family). The host loads the T5 encoder, its tokenizer and the flow-match
// scheduler from the plan load_pipeline returns; this plugin reaches them through
// yeto_host_api.component_get and calls their documented forward() methods.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "ltx_family.hpp"
#include "ltx_latents.hpp"
#include "ltx_transformer.hpp"
#include "ltx_vae.hpp"
#include "yeto/family/diffusers_family.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/sampling.hpp"
#include "yeto/family/helper_call.hpp"

namespace yeto::ltx {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

// Empty option text means no options.
json parse_json(const std::string& text, const std::string& what) {
  return yeto::family::parse_json(text.empty() ? std::string("{}") : text, what);
}

json read_json_file(const std::string& path) { return parse_json(yeto::family::read_text_file(path), path); }

std::array<double, 3> rope_scale_from(const json& o) {
  const auto it = o.find("rope_interpolation_scale");
  if (it == o.end() || !it->is_array() || it->size() != 3)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT,
              "LTXVideoTransformer3DModel forward: option 'rope_interpolation_scale' must be "
              "three numbers (temporal, spatial, spatial)");
  std::array<double, 3> s{};
  for (std::size_t i = 0; i < 3; ++i) {
    if (!(*it)[i].is_number())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "rope_interpolation_scale: entries must be numbers");
    s[i] = (*it)[i].get<double>();
  }
  return s;
}

std::int64_t required_int(const json& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer())
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": option '" + key + "' (an integer) is required");
  return it->get<std::int64_t>();
}

// ---- component classes -------------------------------------------------------------------

class TransformerComponent
    : public yeto::family::ModelComponent<ltx::LtxVideoTransformer3DModel, ltx::LtxTransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {"LTXVideoTransformer3DModel", "is this an LTXVideoTransformer3DModel checkpoint?"}) {}

  // Inputs as the Diffusers forward names them: hidden_states (packed), encoder_hidden_states,
  // timestep, optional encoder_attention_mask; options num_frames, height, width (the token
  // grid) and rope_interpolation_scale.
  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    using yeto::sdk::get;
    using yeto::sdk::has;
    const auto o = parse_json(options, "LTXVideoTransformer3DModel forward options");
    const std::string where = "LTXVideoTransformer3DModel forward";
    const auto dtype = model_->proj_in->compute_dtype();
    const auto dev = model_->proj_in->weight.device();
    const at::Tensor mask = has(in, "encoder_attention_mask") ? get(in, "encoder_attention_mask").to(dev) : at::Tensor();
    try {
      auto out = model_->forward(get(in, "hidden_states").to(dev, dtype), get(in, "encoder_hidden_states").to(dev, dtype),
                                 get(in, "timestep").to(dev), mask, required_int(o, "num_frames", where),
                                 required_int(o, "height", where), required_int(o, "width", where), rope_scale_from(o));
      return {{"sample", out}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }
};

// The typed VAE service: sample [B, 3, F, H, W] in [-1, 1] -> mean, logvar (the latent
// distribution, raw: no normalisation); raw latents [B, C, F, H, W] and, for timestep-conditioned
// decoders, "temb" [B] -> sample.
class VaeComponent : public yeto::family::ModelComponent<ltx::AutoencoderKLLTXVideo, ltx::LtxVaeConfig>,
                     public yeto::sdk::Vae {
 public:
  VaeComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {"AutoencoderKLLTXVideo", "is this an AutoencoderKLLTXVideo checkpoint?"}) {}

  yeto::sdk::Posterior encode(const at::Tensor& pixels) override {
    const auto& w = model_->encoder->conv_in->conv->weight;
    try {
      const auto d = model_->encode(pixels.to(w.device(), w.scalar_type()));
      return {d.mean, d.logvar};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("AutoencoderKLLTXVideo encode: ") + e.what());
    }
  }
  at::Tensor decode(const at::Tensor& latents, const NamedTensors& extra) override {
    const auto& w = model_->encoder->conv_in->conv->weight;
    at::Tensor temb;
    for (const auto& [name, t] : extra) {
      if (name != "temb")
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "AutoencoderKLLTXVideo decode: takes no '" + name + "' tensor (only temb)");
      temb = t.to(w.device(), w.scalar_type());
    }
    try {
      return model_->decode(latents.to(w.device(), w.scalar_type()), temb);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("AutoencoderKLLTXVideo decode: ") + e.what());
    }
  }
};

// LTXPipeline's static latent helpers as a component (kind pipeline_helpers), so parity cases
// recorded against `LTXPipeline._pack_latents(...)` run the plugin's own code. Options:
// a helper call as yeto/family/helper_call.hpp reads it.
class PipelineHelpersComponent : public yeto::family::PipelineHelpers {
 public:
  PipelineHelpersComponent(const std::string&, const std::string&)
      : PipelineHelpers("LTXPipeline", "_pack_latents, _unpack_latents, _normalize_latents, _denormalize_latents") {}

 protected:
  at::Tensor run(const yeto::family::HelperCall& call) override {
    const std::string& method = call.method();
    if (method == "_pack_latents")
      return ltx::pack_latents(call.tensor(0, "latents"), call.integer(1, "patch_size", 1),
                               call.integer(2, "patch_size_t", 1));
    if (method == "_unpack_latents")
      return ltx::unpack_latents(call.tensor(0, "latents"), call.integer(1, "num_frames", 0),
                                 call.integer(2, "height", 0), call.integer(3, "width", 0),
                                 call.integer(4, "patch_size", 1), call.integer(5, "patch_size_t", 1));
    if (method == "_normalize_latents")
      return ltx::normalize_latents(call.tensor(0, "latents"), call.tensor(1, "latents_mean"),
                                    call.tensor(2, "latents_std"), call.number(3, "scaling_factor", 1.0));
    if (method == "_denormalize_latents")
      return ltx::denormalize_latents(call.tensor(0, "latents"), call.tensor(1, "latents_mean"),
                                      call.tensor(2, "latents_std"), call.number(3, "scaling_factor", 1.0));
    return {};
  }
};

// ---- the plugin ----------------------------------------------------------------------------

struct Conditioning {
  at::Tensor ids, mask, embeds;
};

// The kit's base gives prepare (then prepare_run below), trainable_parameters,
// encode_conditioning (through conditioning()) and align; LTX-Video encodes media with its own
// video VAE (encode_media below).
class LtxPlugin : public yeto::family::DiffusersFamily {
 public:
  LtxPlugin() : DiffusersFamily(ltx::description()) {}

  void pipeline_loaded(const std::string& model_dir, const json& /*model_index*/, const json& /*plan*/) override {
    try {
      vae_config_ = ltx::LtxVaeConfig::from_json(read_json_file(model_dir + "/vae/config.json"));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, model_dir + "/vae/config.json: " + e.what());
    }
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>("LTXVideoTransformer3DModel");
    registry.add<VaeComponent>("AutoencoderKLLTXVideo");
    registry.add<PipelineHelpersComponent>("LTXPipeline");
  }

  // Pixels [B, 3, H, W] (one frame) or [B, 3, F, H, W] in [-1, 1] -> normalised latents
  // [B, C, F', H', W'] = (z - latents_mean) * scaling_factor / latents_std, as LTX-Video training
  // prepares them.
  NamedTensors encode_media(const NamedTensors& media, const std::string& options_json) override {
    auto px = yeto::sdk::get(media, "pixel_values");
    if (px.dim() == 4) px = px.unsqueeze(2);
    const auto st = vae_config_.spatial_ratio(), tt = vae_config_.temporal_ratio();
    if (px.dim() != 5 || px.size(1) != 3)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "ltx encode_media: 'pixel_values' must be [B, 3, F, H, W] (or an image batch "
                "[B, 3, H, W]) in [-1, 1], got " +
                    c10::str(px.sizes()));
    if ((px.size(2) - 1) % tt != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "ltx encode_media: " + std::to_string(px.size(2)) +
                                               " frames; LTX-Video's VAE takes 1 + " + std::to_string(tt) +
                                               "k frames (set data.num_frames to 1, " + std::to_string(1 + tt) + ", " +
                                               std::to_string(1 + 2 * tt) + ", ...)");
    if (px.size(3) % st != 0 || px.size(4) % st != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "ltx encode_media: " + std::to_string(px.size(3)) + "x" +
                                               std::to_string(px.size(4)) +
                                               " pixels; height and width must be multiples "
                                               "of " +
                                               std::to_string(st) + " (data.height, data.width)");
    const auto o = parse_json(options_json, "encode_media options");
    at::NoGradGuard no_grad;  // the VAE is frozen: latents are data
    auto& v = vae();
    const auto dev = v->latents_mean.device();
    const auto dist = v->encode(px.to(dev, v->latents_mean.scalar_type()));
    const auto z = yeto::family::posterior_latent(dist.mean, dist.logvar, o);
    return {{"latents", ltx::normalize_latents(z.to(at::kFloat), v->latents_mean.to(at::kFloat),
                                               v->latents_std.to(at::kFloat), vae_config_.scaling_factor)}};
  }

  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& /*step_json*/) override {
    check_latents(yeto::sdk::get(batch, "noisy"), "noisy");
    return {};
  }

  // hidden_states [B, C, F, H, W] (the scheduler's noisy latents), timesteps [B] (0..1000),
  // prompt_embeds [B, T, D], optional prompt_attention_mask [B, T] -> the velocity prediction in
  // the same [B, C, F, H, W] layout, float32.
  at::Tensor denoise(const NamedTensors& in, const std::string& /*step_json*/) override {
    using yeto::sdk::get;
    using yeto::sdk::has;
    const auto& x = get(in, "hidden_states");
    check_latents(x, "hidden_states");
    const auto& cfg = transformer()->config();
    const auto f = x.size(2) / cfg.patch_size_t, h = x.size(3) / cfg.patch_size, w = x.size(4) / cfg.patch_size;
    const at::Tensor mask = has(in, "prompt_attention_mask") ? get(in, "prompt_attention_mask") : at::Tensor();
    const auto scale = ltx::rope_interpolation_scale(vae_config_.temporal_ratio(), vae_config_.spatial_ratio(),
                                                     train_frame_rate_);
    const auto pred = run_transformer(ltx::pack_latents(x, cfg.patch_size, cfg.patch_size_t), get(in, "prompt_embeds"),
                                      get(in, "timesteps").to(at::kFloat), mask, f, h, w, scale);
    return ltx::unpack_latents(pred, f, h, w, cfg.patch_size, cfg.patch_size_t).to(at::kFloat);
  }

  // LTXPipeline.__call__ (Diffusers v0.33.1): T5 without its mask, masks to the transformer,
  // classifier-free guidance as one batch [negative, positive], seeded CPU noise, dynamic shift
  // from the video sequence length, the scheduler's shift_terminal stretch, denormalised decode.
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    auto r = yeto::family::parse_request(request_json, ltx::parse_generate_request);
    yeto::family::GenerationTrace record(r.trace);
    const auto& cfg = transformer()->config();
    const auto batch = static_cast<std::int64_t>(r.prompts.size());
    const auto st = vae_config_.spatial_ratio(), tt = vae_config_.temporal_ratio();
    const bool cfg_on = r.guidance > 1.0;

    // 1. Text conditioning.
    const auto cond = encode_prompts(r.prompts, r.max_sequence_length);
    record("input_ids", cond.ids);
    record("attention_mask", cond.mask);
    at::Tensor embeds = cond.embeds, mask = cond.mask;
    at::Tensor neg_embeds;
    if (cfg_on) {
      std::vector<std::string> negative = r.negative_prompts;
      if (negative.empty()) negative.assign(r.prompts.size(), "");
      const auto neg = encode_prompts(negative, r.max_sequence_length);
      record("negative_input_ids", neg.ids);
      record("negative_attention_mask", neg.mask);
      neg_embeds = neg.embeds;
      embeds = at::cat({neg.embeds, cond.embeds});
      mask = at::cat({neg.mask, cond.mask});
    }
    record("prompt_embeds", cond.embeds);
    if (cfg_on) record("negative_prompt_embeds", neg_embeds);

    // 2. Latents: the VAE's frame rule decides the clip length.
    const auto lf = ltx::latent_frames(r.num_frames, tt);
    const auto lh = r.height / st, lw = r.width / st;
    if (lh < 1 || lw < 1)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: height and width must be at least " + std::to_string(st));
    const auto frames = ltx::decoded_frames(r.num_frames, tt);
    if (frames != r.num_frames)
      sdk::Host::info("ltx: " + std::to_string(r.num_frames) + " frames requested; LTX-Video's VAE decodes 1 + " +
                      std::to_string(tt) + "k frames, so the clip has " + std::to_string(frames));
    if (lh * st != r.height || lw * st != r.width)
      sdk::Host::info("ltx: " + std::to_string(r.width) + "x" + std::to_string(r.height) + " requested; the clip is " +
                      std::to_string(lw * st) + "x" + std::to_string(lh * st) + " (multiples of " + std::to_string(st) +
                      ")");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(r.seed);
    at::Tensor noise;
    const std::vector<std::int64_t> shape = {batch, cfg.in_channels, lf, lh, lw};
    if (yeto::sdk::has(inputs, "latents")) {
      noise = yeto::sdk::get(inputs, "latents").to(at::kFloat);
      if (noise.sizes() != at::IntArrayRef(shape))
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: input 'latents' must be " + c10::str(at::IntArrayRef(shape)) +
                                                 ", got " + c10::str(noise.sizes()));
    } else {
      noise = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
    }
    record("noise", noise);
    const auto pf = lf / cfg.patch_size_t, ph = lh / cfg.patch_size, pw = lw / cfg.patch_size;
    auto latents = ltx::pack_latents(noise, cfg.patch_size, cfg.patch_size_t);
    record("initial_latents", latents);

    // 3. Schedule: sigmas linspace(1, 1/N, N), mu from the video sequence length.
    const auto sigmas_in = ltx::linspace(1.0, 1.0 / static_cast<double>(r.steps), r.steps);
    const auto& sc = configs_;
    const double mu =
        ltx::calculate_shift(static_cast<double>(latents.size(1)), sc.scheduler_number("base_image_seq_len", 256),
                             sc.scheduler_number("max_image_seq_len", 4096), sc.scheduler_number("base_shift", 0.5),
                             sc.scheduler_number("max_shift", 1.15));
    const auto schedule = yeto::family::set_timesteps({0, sigmas_in, mu}, record);
    record("mu", at::scalar_tensor(mu, at::kDouble));
    const auto scale = ltx::rope_interpolation_scale(tt, st, r.frame_rate);
    record("rope_interpolation_scale", at::tensor(std::vector<double>(scale.begin(), scale.end()), at::kDouble));

    // 4. Denoising loop with classifier-free guidance.
    yeto::family::SamplingHooks hooks;
    hooks.guidance = r.guidance;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& timestep, std::int64_t) {
      return run_transformer(x, embeds, timestep.to(at::kFloat), mask, pf, ph, pw, scale);
    };
    latents = yeto::family::denoise_loop(latents, schedule, hooks, record);

    // 5. Decode.
    auto& v = vae();
    const auto unpacked = ltx::unpack_latents(latents, pf, ph, pw, cfg.patch_size, cfg.patch_size_t);
    record("final_latents_unpacked", unpacked);
    auto vae_input = ltx::denormalize_latents(unpacked, v->latents_mean.to(at::kFloat), v->latents_std.to(at::kFloat),
                                              vae_config_.scaling_factor);
    at::Tensor temb;
    if (vae_config_.timestep_conditioning) {
      const auto decode_noise = at::randn(vae_input.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
      const double noise_scale = r.decode_noise_scale.value_or(r.decode_timestep);
      temb = at::full({batch}, r.decode_timestep, at::kFloat);
      vae_input = (1 - noise_scale) * vae_input + noise_scale * decode_noise;
    }
    record("vae_input", vae_input);
    const auto dev = v->latents_mean.device();
    const auto dtype = v->latents_mean.scalar_type();
    const auto video = v->decode(vae_input.to(dev, dtype), temb.defined() ? temb.to(dev, dtype) : temb).to(at::kFloat);
    record("video", video);
    const auto clip = (video / 2 + 0.5).clamp(0, 1);
    record("video_postprocessed", clip.permute({0, 2, 1, 3, 4}));

    return record.outputs({{"video", clip}});
  }

 protected:
  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_prompts(prompts, max_sequence_length_);
    return {{"prompt_embeds", c.embeds}, {"prompt_attention_mask", c.mask}};
  }

  void prepare_run(const json& /*options*/) override {
    const auto fps = family::host_config("data.fps");
    train_frame_rate_ = fps.is_number() && fps.get<double>() > 0 ? fps.get<double>() : 25.0;
  }

 private:
  ltx::LtxVideoTransformer3DModel& transformer() {
    return family::plugin_model<TransformerComponent>("transformer", "LTXVideoTransformer3DModel", "ltx", "an");
  }

  ltx::AutoencoderKLLTXVideo& vae() {
    return family::plugin_model<VaeComponent>("vae", "AutoencoderKLLTXVideo", "ltx", "an");
  }

  at::Tensor run_transformer(const at::Tensor& packed, const at::Tensor& embeds, const at::Tensor& timestep,
                             const at::Tensor& mask, std::int64_t f, std::int64_t h, std::int64_t w,
                             const std::array<double, 3>& scale) {
    auto& model = transformer();
    const auto dtype = model->proj_in->compute_dtype();
    const auto dev = model->proj_in->weight.device();
    try {
      return model->forward(packed.to(dev, dtype), embeds.to(dev, dtype), timestep.to(dev),
                            mask.defined() ? mask.to(dev) : mask, f, h, w, scale);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  // LTXPipeline._get_t5_prompt_embeds: max_length padding with truncation, the encoder called
  // with the ids only, the mask kept for the transformer.
  Conditioning encode_prompts(const std::vector<std::string>& prompts, std::int64_t max_sequence_length) {
    // LTXPipeline encodes from the ids alone; the mask goes to the transformer's cross-attention.
    family::TextEncoderCall call;
    call.max_length = max_sequence_length;
    const auto t = family::encode_text(prompts, call);
    Conditioning c;
    c.ids = t.input_ids;
    c.mask = t.attention_mask;
    c.embeds = t.output("last_hidden_state");
    return c;
  }

  void check_latents(const at::Tensor& x, const std::string& name) {
    const auto& cfg = transformer()->config();
    if (x.dim() != 5 || x.size(1) != cfg.in_channels || x.size(2) % cfg.patch_size_t != 0 ||
        x.size(3) % cfg.patch_size != 0 || x.size(4) % cfg.patch_size != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "ltx: '" + name + "' must be video latents [B, " +
                                               std::to_string(cfg.in_channels) +
                                               ", F, H, W] divisible by the patch "
                                               "sizes, got " +
                                               c10::str(x.sizes()));
  }

  ltx::LtxVaeConfig vae_config_;
  double train_frame_rate_ = 25.0;
};

}  // namespace
}  // namespace yeto::ltx

YETO_PLUGIN(yeto::ltx::LtxPlugin)
