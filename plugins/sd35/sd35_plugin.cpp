// The SD3.5 family plugin (Stable Diffusion 3 / 3.5 medium and large): the SD3Transformer2DModel
// component class and the StableDiffusion3Pipeline semantics as plugin hooks, written against
// the SDK only (yeto/plugin.hpp, sdk/nn, sdk/family). The host loads the repository's other components (the
// 16-channel VAE, CLIP-L, CLIP-G, T5, three tokenizers, the flow-match scheduler) from the plan
// load_pipeline returns; this plugin reaches them through yeto_host_api.component_get and calls
// their documented forward() methods.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sd35_family.hpp"
#include "sd35_transformer.hpp"
#include "yeto/family/diffusers_family.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/sampling.hpp"

namespace yeto::sd35 {
namespace {

using nlohmann::json;
using sdk::NamedTensors;
constexpr const char* kClass = "SD3Transformer2DModel";

// ---- the transformer component -----------------------------------------------------------

// Built directly in the run's precision and device (a 16-bit checkpoint never exists as float32).
class TransformerComponent
    : public yeto::family::ModelComponent<sd35::SD3Transformer2DModel, sd35::SD3TransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kClass,
                        "is this an SD3 / SD3.5 transformer checkpoint with this config's num_layers, "
                        "dual_attention_layers and qk_norm?"}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    using yeto::sdk::get;
    const auto dtype = model_->proj_out->compute_dtype();
    const auto dev = model_->proj_out->weight.device();
    auto to = [&](const at::Tensor& t) { return t.to(dev, dtype); };
    auto out = model_->forward(to(get(in, "hidden_states")), to(get(in, "encoder_hidden_states")),
                               to(get(in, "pooled_projections")), get(in, "timestep").to(dev, at::kFloat));
    return {{"sample", out}};
  }
};

// ---- the plugin ----------------------------------------------------------------------------

// One text's conditioning as StableDiffusion3Pipeline.encode_prompt assembles it.
struct Conditioning {
  at::Tensor clip_l_ids, clip_g_ids, t5_ids;
  at::Tensor clip_l_hidden, clip_l_pooled, clip_g_hidden, clip_g_pooled, t5;
  at::Tensor embeds, pooled;
};

class Sd35Plugin : public yeto::family::DiffusersFamily {
 public:
  // SD3's latent normalisation: (z - shift_factor) * scaling_factor.
  Sd35Plugin() : DiffusersFamily(sd35::description()) {}

  json plan(const std::string& model_dir, const json& model_index) override {
    return sd35::plan_from_model_index(model_dir, model_index);
  }

  void pipeline_loaded(const std::string& model_dir, const json& /*model_index*/, const json& plan) override {
    has_t5_ = plan["components"].contains("text_encoder_3");
    // The pipeline's tokenizer_max_length: the first CLIP tokenizer's model_max_length.
    clip_max_length_ = yeto::family::tokenizer_max_length(model_dir, "tokenizer", 77);
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>(kClass);
  }

  // SD3 needs no position ids, guidance or added conditions beyond the text tensors.
  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& /*step_json*/) override {
    check_latents(yeto::sdk::get(batch, "noisy"), "noisy");
    return {};
  }

  at::Tensor denoise(const NamedTensors& in, const std::string& /*step_json*/) override {
    using yeto::sdk::get;
    const auto& x = get(in, "hidden_states");
    check_latents(x, "hidden_states");
    // The scheduler's timesteps (sigma x 1000) go in as they are: SD3 does not divide them.
    return run_transformer(x, get(in, "prompt_embeds"), get(in, "pooled_prompt_embeds"), get(in, "timesteps"))
        .to(at::kFloat);
  }

  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto r = yeto::family::parse_request(request_json, sd35::parse_generate_request);
    yeto::family::GenerationTrace record(r.trace);
    const auto& cfg = transformer()->config();
    const auto [batch, height, width, vsf] = image_grid(r, cfg.sample_size, cfg.patch_size);
    const bool cfg_on = r.guidance > 1.0;  // StableDiffusion3Pipeline.do_classifier_free_guidance

    // 1. Text conditioning: the prompts, then (for guidance) the negative prompts ("" by default).
    const auto cond = encode_prompts(r.prompts, r.max_sequence_length);
    record_conditioning(record, "", cond);
    at::Tensor embeds = cond.embeds, pooled = cond.pooled;
    if (cfg_on) {
      std::vector<std::string> negatives = r.negative_prompts;
      if (negatives.empty()) negatives.assign(r.prompts.size(), "");
      const auto neg = encode_prompts(negatives, r.max_sequence_length);
      record_conditioning(record, "negative_", neg);
      if (neg.embeds.sizes() != cond.embeds.sizes())
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: negative prompt embeddings " + c10::str(neg.embeds.sizes()) +
                                                 " differ in shape from the prompt's " + c10::str(cond.embeds.sizes()));
      // The guidance batch: negative first.
      embeds = at::cat({neg.embeds, cond.embeds});
      pooled = at::cat({neg.pooled, cond.pooled});
    }

    // 2. Latents: noise from a CPU generator seeded like torch.Generator("cpu").manual_seed.
    const auto h = height / vsf, w = width / vsf;
    const auto latents = yeto::family::initial_latents(inputs, {batch, cfg.in_channels, h, w}, r.seed, record);

    // 3. Schedule: set_timesteps(N) on the repository's scheduler (shift 3.0 for SD3.5); mu only
    // for a dynamically shifting scheduler config, from the image token count.
    yeto::sdk::TimestepRequest st{r.steps, {}, {}};
    if (configs_.scheduler_flag("use_dynamic_shifting")) {
      const auto seq = (h / cfg.patch_size) * (w / cfg.patch_size);
      const double base_shift = configs_.scheduler_number("base_shift", 0.5);
      const auto base_len = configs_.scheduler_int("base_image_seq_len", 256);
      const double m = (configs_.scheduler_number("max_shift", 1.16) - base_shift) /
                       static_cast<double>(configs_.scheduler_int("max_image_seq_len", 4096) - base_len);
      const double b = base_shift - m * static_cast<double>(base_len);
      st.mu = static_cast<double>(seq) * m + b;
    }
    const auto schedule = yeto::family::set_timesteps(st, record);

    // 4. Denoising loop with classifier-free guidance (StableDiffusion3Pipeline: the timesteps
    // go to the transformer as they are).
    yeto::family::SamplingHooks hooks;
    hooks.guidance = r.guidance;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& timestep, std::int64_t) {
      return run_transformer(x, embeds, pooled, timestep);
    };
    const auto final_latents = yeto::family::denoise_loop(latents, schedule, hooks, record);

    // 5. Decode.
    return record.outputs({{"images", decode_images(final_latents, record)}});
  }

 protected:
  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_prompts(prompts, max_sequence_length_);
    return {{"prompt_embeds", c.embeds}, {"pooled_prompt_embeds", c.pooled}};
  }

 private:
  sd35::SD3Transformer2DModel& transformer() {
    return family::plugin_model<TransformerComponent>("transformer", kClass, "sd35", "an");
  }

  at::Tensor run_transformer(const at::Tensor& latents, const at::Tensor& embeds, const at::Tensor& pooled,
                             const at::Tensor& timestep) {
    auto& model = transformer();
    const auto dtype = model->proj_out->compute_dtype();
    const auto dev = model->proj_out->weight.device();
    return model->forward(latents.to(dev, dtype), embeds.to(dev, dtype), pooled.to(dev, dtype),
                          timestep.to(dev, at::kFloat));
  }

  // One CLIP tower: ids padded to the tokenizer's length, the penultimate hidden state (before
  // the final norm) and the projected pooled output (text_embeds), no attention mask.
  void encode_clip(const std::string& tokenizer, const std::string& encoder, const std::vector<std::string>& texts,
                   at::Tensor& ids, at::Tensor& hidden, at::Tensor& pooled) {
    family::TextEncoderCall call{tokenizer, encoder, clip_max_length_};
    call.hidden_states = true;
    const auto e = family::encode_text(texts, call);
    ids = e.input_ids;
    const auto& out = e.outputs;
    // hidden_states.0 are the embeddings, hidden_states.N the last layer: [-2] is N - 1.
    std::int64_t last = -1;
    for (const auto& [n, t] : out)
      if (n.rfind("hidden_states.", 0) == 0) last = std::max<std::int64_t>(last, std::stoll(n.substr(14)));
    if (last < 1) sdk::fail(YETO_ERR_INTERNAL, encoder + " returned fewer than two hidden states");
    hidden = family::output(out, "hidden_states." + std::to_string(last - 1), encoder).to(at::kFloat);
    pooled = family::output(out, "text_embeds", encoder).to(at::kFloat);
  }

  Conditioning encode_prompts(const std::vector<std::string>& texts, std::int64_t max_sequence_length) {
    Conditioning c;
    encode_clip("tokenizer", "text_encoder", texts, c.clip_l_ids, c.clip_l_hidden, c.clip_l_pooled);
    encode_clip("tokenizer_2", "text_encoder_2", texts, c.clip_g_ids, c.clip_g_hidden, c.clip_g_pooled);
    if (has_t5_) {
      // Without an attention mask: padding positions are attended to, as the pipeline calls T5.
      const auto e = family::encode_text(texts, {"tokenizer_3", "text_encoder_3", max_sequence_length});
      c.t5_ids = e.input_ids;
      c.t5 = e.output("last_hidden_state");
    } else {
      // No T5 in the repository: zeros of the CLIP length, as the pipeline does.
      c.t5 = at::zeros({static_cast<std::int64_t>(texts.size()), clip_max_length_,
                        transformer()->config().joint_attention_dim},
                       at::kFloat);
    }
    // CLIP-L and CLIP-G side by side, zero-padded (or, were CLIP wider, cut) to the T5 width,
    // then the T5 rows after the CLIP rows; pooled: both projections side by side.
    const auto clip = at::cat({c.clip_l_hidden, c.clip_g_hidden}, -1);
    const auto padded = at::constant_pad_nd(clip, {0, c.t5.size(-1) - clip.size(-1)});
    c.embeds = at::cat({padded, c.t5}, -2);
    c.pooled = at::cat({c.clip_l_pooled, c.clip_g_pooled}, -1);
    return c;
  }

  template <class Record>
  void record_conditioning(Record& record, const std::string& prefix, const Conditioning& c) {
    record(prefix + "clip_l_input_ids", c.clip_l_ids);
    record(prefix + "clip_g_input_ids", c.clip_g_ids);
    if (c.t5_ids.defined()) record(prefix + "t5_input_ids", c.t5_ids);
    record(prefix + "clip_l_penultimate", c.clip_l_hidden);
    record(prefix + "clip_l_text_embeds", c.clip_l_pooled);
    record(prefix + "clip_g_penultimate", c.clip_g_hidden);
    record(prefix + "clip_g_text_embeds", c.clip_g_pooled);
    record(prefix + "t5_last_hidden_state", c.t5);
    record(prefix + "prompt_embeds", c.embeds);
    record(prefix + "pooled_prompt_embeds", c.pooled);
  }

  void check_latents(const at::Tensor& x, const std::string& name) {
    const auto& cfg = transformer()->config();
    yeto::family::check_image_latents(x, name, "sd35", cfg.in_channels, cfg.patch_size);
  }

  bool has_t5_ = true;
  std::int64_t clip_max_length_ = 77;
};

}  // namespace
}  // namespace yeto::sd35

YETO_PLUGIN(yeto::sd35::Sd35Plugin)
