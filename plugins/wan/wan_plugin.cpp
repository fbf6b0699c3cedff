// The Wan family plugin (Wan 2.1 T2V, Wan 2.2 A14B T2V with two denoisers, Wan 2.2 TI2V-5B
// text-to-video with 48-channel latents and per-token timesteps): the
// WanTransformer3DModel component class (AutoencoderKLWan is the kit's, yeto/family/wan_vae_component.hpp) and the WanPipeline semantics
// as plugin hooks, written against the SDK only (yeto/plugin.hpp, sdk/nn, sdk/family). The host loads the
// UMT5 encoder, the tokenizer and the UniPC scheduler from the plan; this plugin reaches them
// through sdk::Host::component and their documented forward() methods.
//
// Two denoisers: the plan carries model_index.json's boundary_ratio, so the host learner routes
// training samples by timestep (samples at or above boundary_ratio x num_train_timesteps to
// `transformer`, the others to `transformer_2`) and calls denoise with the step's "denoiser";
// generation switches at the same boundary with one UniPC history across the switch.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "wan_family.hpp"
#include "wan_transformer.hpp"
#include "yeto/family/wan_vae_component.hpp"
#include "yeto/family/diffusers_family.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/sampling.hpp"

namespace yeto::wan {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

// ---- components -------------------------------------------------------------------------

class TransformerComponent
    : public yeto::family::ModelComponent<wan::WanTransformer3DModel, wan::WanTransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {"WanTransformer3DModel", "is this a Wan checkpoint?"}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    using yeto::sdk::get;
    // The dtype the layers compute in (under fp8 storage the weights are uint8 codes).
    const auto device = model_->proj_out->weight.device();
    const auto dtype = model_->proj_out->compute_dtype();
    try {
      return {{"sample", model_->forward(get(in, "hidden_states").to(device, dtype), get(in, "timestep").to(device),
                                         get(in, "encoder_hidden_states").to(device, dtype))}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }
};

// ---- the plugin ---------------------------------------------------------------------------

struct TextConditioning {
  at::Tensor ids, mask, hidden, embeds;
};

class WanPlugin : public yeto::family::DiffusersFamily {
 public:
  WanPlugin() : DiffusersFamily(wan::description()) {}

  json plan(const std::string& model_dir, const json& model_index) override {
    return wan::plan_from_model_index(model_dir, model_index);
  }

  // A repository whose vae is null (cached latents) keeps the default VAE layout; nothing encodes.
  void pipeline_loaded(const std::string& /*model_dir*/, const json& /*model_index*/, const json& plan) override {
    if (!configs_.vae().empty()) {
      try {
        vae_config_ = wan::WanVaeConfig::from_json(configs_.vae());
      } catch (const std::invalid_argument& e) {
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "vae/config.json: " + std::string(e.what()));
      }
    }
    denoisers_ = {"transformer"};
    if (plan["components"].contains("transformer_2")) denoisers_.push_back("transformer_2");
    boundary_ratio_ = plan.contains("boundary_ratio") ? plan["boundary_ratio"].get<double>() : 0.0;
    expand_timesteps_ = plan.value("expand_timesteps", false);
    num_train_timesteps_ = configs_.scheduler_int("num_train_timesteps", 1000);
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>("WanTransformer3DModel");
    registry.add<wan::VaeComponent>("AutoencoderKLWan");
  }

  // Pixels [B, 3, T, H, W] (or an image batch [B, 3, H, W]) in [-1, 1] -> normalised latents
  // (z - latents_mean) / latents_std, [B, 16, 1 + (T - 1) / 4, H / 8, W / 8].
  NamedTensors encode_media(const NamedTensors& media, const std::string& options_json) override {
    auto px = yeto::sdk::get(media, "pixel_values");
    if (px.dim() == 4) px = px.unsqueeze(2);
    if (px.dim() != 5 || px.size(1) != 3)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "wan encode_media: 'pixel_values' must be a video batch [B, 3, T, H, W] (or "
                "images [B, 3, H, W]) in [-1, 1], got " +
                    c10::str(px.sizes()));
    const auto tf = vae_config_.temporal_factor();
    if ((px.size(2) - 1) % tf != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "wan encode_media: the causal VAE encodes 1 + " + std::to_string(tf) +
                                               "k frames, got " + std::to_string(px.size(2)) +
                                               " (set data.num_frames to 1, 5, 9, 13, ...)");
    const auto multiple = vae_config_.spatial_factor() * 2;  // VAE factor x the transformer's 2x2 patches
    if (px.size(3) % multiple != 0 || px.size(4) % multiple != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "wan encode_media: height and width must be multiples of " +
                                               std::to_string(multiple) + ", got " + std::to_string(px.size(3)) + "x" +
                                               std::to_string(px.size(4)) + " (set data.height / data.width)");
    const auto o = family::parse_json(options_json, "encode_media options");
    const auto d = yeto::sdk::Host::vae("vae").encode(px);
    const auto z = yeto::family::posterior_latent(d.mean.to(at::kFloat), d.logvar.to(at::kFloat), o);
    return {{"latents", wan::normalize_latents(vae_config_, z)}};
  }

  NamedTensors denoiser_kwargs(const NamedTensors& /*batch*/, const std::string& /*step_json*/) override {
    return {};
  }

  at::Tensor denoise(const NamedTensors& in, const std::string& step_json) override {
    using yeto::sdk::get;
    const auto step = family::parse_json(step_json, "denoise step");
    const auto name = step.value("denoiser", std::string("transformer"));
    if (std::find(denoisers_.begin(), denoisers_.end(), name) == denoisers_.end())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "wan denoise: the pipeline has no denoiser '" + name + "'");
    const auto& x = get(in, "hidden_states");
    if (x.dim() != 5)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "wan denoise: 'hidden_states' must be latents [B, C, t, h, w], got " + c10::str(x.sizes()));
    return run_transformer(name, x, get(in, "timesteps"), get(in, "prompt_embeds")).to(at::kFloat);
  }

  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    auto r = yeto::family::parse_request(request_json, wan::parse_generate_request);
    yeto::family::GenerationTrace record(r.trace);
    const auto batch = static_cast<std::int64_t>(r.prompts.size());
    const auto sf = vae_config_.spatial_factor() * 2;  // VAE x patch: WanPipeline wants multiples of 16
    if (r.height % sf != 0 || r.width % sf != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: height and width must be multiples of " + std::to_string(sf) +
                                               ", got " + std::to_string(r.height) + "x" + std::to_string(r.width));
    const auto tf = vae_config_.temporal_factor();
    const std::int64_t frames = wan::valid_num_frames(r.num_frames, tf);  // 1 + 4k, as WanPipeline
    if (frames != r.num_frames && sdk::Host::api())
      sdk::Host::log(YETO_LOG_INFO, "wan: num_frames " + std::to_string(r.num_frames) + " is not 1 + " +
                                        std::to_string(tf) + "k; generating " + std::to_string(frames) + " frames");

    // 1. Text: the prompt and the negative prompt ("" by default), cleaned, masked UMT5,
    //    padding rows zeroed.
    std::vector<std::string> negative = r.negative_prompts;
    if (negative.empty()) negative.assign(r.prompts.size(), "");
    const double g_high = r.guidance;
    const double g_low = r.guidance_2.value_or(r.guidance);
    // WanPipeline.do_classifier_free_guidance: decided by the first guidance scale for every
    // step (a low-noise step then mixes with guidance_2, whatever its value).
    const bool cfg = g_high > 1.0;
    const auto cond = encode_text(r.prompts, r.max_sequence_length);
    record("input_ids", cond.ids);
    record("attention_mask", cond.mask);
    record("text_encoder_last_hidden_state", cond.hidden);
    record("prompt_embeds", cond.embeds);
    TextConditioning uncond;
    if (cfg) {
      uncond = encode_text(negative, r.max_sequence_length);
      record("negative_input_ids", uncond.ids);
      record("negative_attention_mask", uncond.mask);
      record("negative_text_encoder_last_hidden_state", uncond.hidden);
      record("negative_prompt_embeds", uncond.embeds);
    }

    // 2. Latents.
    const auto& tcfg = transformer("transformer")->config();
    const std::vector<std::int64_t> shape = {batch, tcfg.in_channels, (frames - 1) / tf + 1,
                                             r.height / vae_config_.spatial_factor(),
                                             r.width / vae_config_.spatial_factor()};
    yeto::family::Trace untraced(false);  // recorded as "noise", WanPipeline's name
    auto latents = yeto::family::initial_latents(inputs, shape, r.seed, untraced);
    record("noise", latents);

    // Image-to-video of Wan 2.2 TI2V (WanImageToVideoPipeline with expand_timesteps): the
    // image's normalised latent (the posterior's mode) is the clean first latent frame, blended
    // into every model input and into the result, with timestep 0 on its tokens.
    at::Tensor condition, keep;  // keep: 0 on the first latent frame, 1 elsewhere, [1, 1, t, h, w]
    if (yeto::sdk::has(inputs, "image")) {
      const auto* image = &yeto::sdk::get(inputs, "image");
      if (!expand_timesteps_)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "generate: an image conditions the first frame only for Wan 2.2 TI2V (expand_timesteps in "
                  "model_index.json); this model generates from text alone");
      auto img = image->to(at::kFloat);
      if (img.dim() == 3) img = img.unsqueeze(0);
      if (img.dim() != 4 || img.size(1) != 3 || (img.size(0) != 1 && img.size(0) != batch))
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: 'image' must be [1, 3, H, W] in [-1, 1], got " + c10::str(image->sizes()));
      if (img.size(2) != r.height || img.size(3) != r.width)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: the image is " + std::to_string(img.size(3)) + "x" +
                                                 std::to_string(img.size(2)) + " but the video is " +
                                                 std::to_string(r.width) + "x" + std::to_string(r.height) +
                                                 "; give an image of the video's size (--width / --height)");
      const auto d = yeto::sdk::Host::vae("vae").encode(img.unsqueeze(2));
      condition = wan::normalize_latents(vae_config_, d.mean.to(at::kFloat)).expand({batch, -1, -1, -1, -1});
      keep = at::ones({1, 1, shape[2], shape[3], shape[4]}, at::kFloat);
      keep.narrow(2, 0, 1).zero_();
      record("latent_condition", condition);
      record("first_frame_mask", keep);
    }

    // 3. Schedule (the host's UniPC; its flow-sigma rule is the run's model.scheduler_timesteps).
    const auto scheduler = yeto::sdk::Host::scheduler("scheduler");
    const auto schedule = scheduler.set_timesteps({r.steps, {}, {}});
    const auto timesteps = schedule.timesteps.to(at::kLong);
    record("timesteps", timesteps);
    if (schedule.sigmas.defined()) record("sigmas", schedule.sigmas);
    const bool two = denoisers_.size() > 1;
    const double boundary = boundary_ratio_ * static_cast<double>(num_train_timesteps_);
    if (two) record("boundary_timestep", at::scalar_tensor(boundary, at::kDouble));

    // 4. Denoising loop: each step's denoiser and guidance from the boundary; one scheduler
    //    history across the switch.
    for (std::int64_t i = 0; i < timesteps.size(0); ++i) {
      const auto p = "step." + std::to_string(i) + ".";
      const auto t = timesteps[i];
      const bool high = !two || static_cast<double>(t.item<std::int64_t>()) >= boundary;
      const std::string name = high ? "transformer" : "transformer_2";
      const double g = high ? g_high : g_low;
      // expand_timesteps (Wan 2.2 TI2V): one float32 value per latent token (here all t, as
      // WanPipeline's text-to-video call), else t per sample.
      const auto timestep = condition.defined()  ? first_frame_timesteps(t, keep, tcfg.patch_size, batch)
                            : expand_timesteps_ ? per_token_timesteps(t, latents, tcfg.patch_size)
                                                : t.expand({batch});
      const auto model_input = condition.defined() ? (1 - keep) * condition + keep * latents : latents;
      record(p + "latents", latents);
      if (condition.defined()) record(p + "latent_model_input", model_input);
      record(p + "timestep", timestep);
      if (two) {
        record(p + "denoiser", at::full({1}, high ? 0 : 1, at::kLong));
        record(p + "guidance_scale", at::full({1}, g, at::kDouble));
      }
      const auto pred_cond = run_transformer(name, model_input, timestep, cond.embeds).to(at::kFloat);
      record(p + "noise_pred_cond", pred_cond);
      at::Tensor noise_pred = pred_cond;
      if (cfg) {
        const auto pred_uncond = run_transformer(name, model_input, timestep, uncond.embeds).to(at::kFloat);
        record(p + "noise_pred_uncond", pred_uncond);
        noise_pred = pred_uncond + g * (pred_cond - pred_uncond);
      }
      record(p + "noise_pred", noise_pred);
      latents = scheduler.step(noise_pred, t, latents).to(at::kFloat);
    }
    if (condition.defined()) latents = (1 - keep) * condition + keep * latents;
    record("final_latents", latents);

    // 5. Denormalise as WanPipeline does (latents / (1 / std) + mean), decode, post-process.
    const auto vae_input = wan::denormalize_latents(vae_config_, latents);
    record("vae_input", vae_input);
    const auto video = yeto::sdk::Host::vae("vae").decode(vae_input).to(at::kFloat);
    const auto post = (video / 2 + 0.5).clamp(0, 1);
    record("video", video);
    record("video_postprocessed", post.permute({0, 2, 1, 3, 4}));
    if (video.size(2) != frames)
      sdk::fail(YETO_ERR_INTERNAL, "generate: the VAE decoded " + std::to_string(video.size(2)) + " frames, expected " +
                                       std::to_string(frames));

    // `video` is the [B, 3, F, H, W] clip in [0, 1] the sample command writes (a single frame is
    // returned as `images` [B, 3, H, W]); with `trace` the recorded raw decode named `video`
    // follows it (a consumer keeping the last of a name sees the trace).
    NamedTensors out;
    if (frames == 1) out.emplace_back("images", post.select(2, 0));
    else out.emplace_back("video", post);
    out.emplace_back("num_frames", at::full({1}, frames, at::kLong));
    return record.outputs(std::move(out));
  }

 protected:
  std::vector<std::string> denoisers() const override { return denoisers_; }
  // Each expert from its own rank-independent stream: every island starts equal.
  std::string lora_seed(const std::string& denoiser) const override { return "lora_init:" + denoiser; }

  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    return {{"prompt_embeds", encode_text(prompts, max_sequence_length_).embeds}};
  }

 private:
  wan::WanTransformer3DModel& transformer(const std::string& name) {
    return family::plugin_model<TransformerComponent>(name, "WanTransformer3DModel", "wan");
  }

  at::Tensor run_transformer(const std::string& name, const at::Tensor& x, const at::Tensor& timestep,
                             const at::Tensor& embeds) {
    auto& model = transformer(name);
    const auto device = model->proj_out->weight.device();
    const auto dtype = model->proj_out->compute_dtype();  // not the weight's: uint8 codes under fp8 storage
    try {
      return model->forward(x.to(device, dtype), timestep.to(device), embeds.to(device, dtype));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, name + ": " + e.what());
    }
  }

  // WanPipeline._get_t5_prompt_embeds: prompts cleaned by the tokenizer component (Diffusers'
  // prompt_clean: ftfy, HTML entities twice, whitespace), ids + mask padded to `max_length`,
  // UMT5 with the mask, rows past each prompt's length replaced by zeros.
  TextConditioning encode_text(const std::vector<std::string>& prompts, std::int64_t max_length) {
    family::TextEncoderCall call;
    call.max_length = max_length;
    call.with_mask = true;
    call.tokenize.prompt_clean = true;
    const auto t = family::encode_text(prompts, call);
    TextConditioning c;
    c.ids = t.input_ids;
    c.mask = t.attention_mask;
    c.hidden = t.output("last_hidden_state");
    const auto lengths = c.mask.gt(0).sum(1);
    const auto keep = at::arange(c.ids.size(1), at::kLong).unsqueeze(0).lt(lengths.unsqueeze(1));
    c.embeds = c.hidden * keep.unsqueeze(-1).to(c.hidden.scalar_type());
    return c;
  }

  // WanImageToVideoPipeline's expand_timesteps rule: the first-frame mask subsampled by the
  // transformer's spatial patch, times t, flattened, one row per sample: [B, F' H' W'] float32,
  // 0 on the first latent frame's tokens.
  static at::Tensor first_frame_timesteps(const at::Tensor& t, const at::Tensor& keep,
                                          const std::vector<std::int64_t>& patch, std::int64_t batch) {
    const auto m = keep[0][0].slice(1, 0, keep.size(3), patch[1]).slice(2, 0, keep.size(4), patch[2]);
    return (m * t.to(at::kFloat)).flatten().unsqueeze(0).expand({batch, -1}).contiguous();
  }

  // WanPipeline's expand_timesteps rule: ones over the first latent channel subsampled by the
  // transformer's spatial patch, times t, flattened: [B, F' H' W'] float32.
  static at::Tensor per_token_timesteps(const at::Tensor& t, const at::Tensor& latents,
                                        const std::vector<std::int64_t>& patch) {
    const auto tokens = (latents.size(2) / patch[0]) * ((latents.size(3) + patch[1] - 1) / patch[1]) *
                        ((latents.size(4) + patch[2] - 1) / patch[2]);
    return (at::ones({latents.size(0), tokens}, at::kFloat) * t.to(at::kFloat)).contiguous();
  }

  wan::WanVaeConfig vae_config_;
  std::vector<std::string> denoisers_ = {"transformer"};
  double boundary_ratio_ = 0.0;
  bool expand_timesteps_ = false;
  std::int64_t num_train_timesteps_ = 1000;
};

}  // namespace
}  // namespace yeto::wan

YETO_PLUGIN(yeto::wan::WanPlugin)
