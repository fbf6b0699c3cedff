// The PixArt family plugin (PixArt-Alpha, PixArt-Sigma): the PixArtTransformer2DModel component
// class and the PixArt pipeline semantics as plugin hooks, written against the SDK only
// (yeto/plugin.hpp, sdk/nn, sdk/family). The host loads the repository's other components (VAE, T5 encoder,
// tokenizer, scheduler) from the plan load_pipeline returns; this plugin reaches them through
// yeto_host_api.component_get and calls their documented forward() methods.
//
// Family semantics the generic learner must not know about live in the hooks:
//   - denoiser_kwargs: the resolution / aspect-ratio micro-conditions, when the transformer
//     advertises use_additional_conditions;
//   - align: the learned-sigma split (the transformer predicts [noise, variance]; the noise half
//     is what the epsilon target is compared with).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <cmath>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "pixart_family.hpp"
#include "pixart_transformer.hpp"
#include "yeto/family/diffusers_family.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/sampling.hpp"

namespace yeto::pixart {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

// Diffusers configs may hold Python's bare -Infinity / Infinity / NaN (every DPM-Solver config has
// "lambda_min_clipped": -Infinity). Outside strings they become null: this plugin reads no such key.
json read_json_file(const std::string& path) {
  return family::parse_json(family::python_nonfinite_to_null(yeto::family::read_text_file(path)), path);
}

const at::Tensor* find(const NamedTensors& in, const std::string& name) {
  for (const auto& [n, t] : in)
    if (n == name && t.defined()) return &t;
  return nullptr;
}

// ---- the transformer component -----------------------------------------------------------

class TransformerComponent
    : public yeto::family::ModelComponent<pixart::PixArtTransformer2DModel, pixart::PixArtTransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {"PixArtTransformer2DModel", "is this a PixArt transformer checkpoint of this configuration?",
                        /*with_buffers=*/false}) {}

  // Inputs by the names of PixArtTransformer2DModel.forward: hidden_states, encoder_hidden_states,
  // timestep, encoder_attention_mask (optional) and the added conditions as
  // added_cond_kwargs.resolution / added_cond_kwargs.aspect_ratio (or resolution / aspect_ratio).
  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    using yeto::sdk::get;
    const auto* res = find(in, "added_cond_kwargs.resolution");
    if (!res) res = find(in, "resolution");
    const auto* ar = find(in, "added_cond_kwargs.aspect_ratio");
    if (!ar) ar = find(in, "aspect_ratio");
    const auto* mask = find(in, "encoder_attention_mask");
    try {
      return {{"sample", run(model_, get(in, "hidden_states"), get(in, "encoder_hidden_states"), get(in, "timestep"),
                             mask ? *mask : at::Tensor(), res ? *res : at::Tensor(), ar ? *ar : at::Tensor())}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  // The model in its own dtype and device; floating inputs are converted to them.
  static at::Tensor run(pixart::PixArtTransformer2DModel& model, const at::Tensor& x, const at::Tensor& context,
                        const at::Tensor& timestep, const at::Tensor& mask, const at::Tensor& resolution,
                        const at::Tensor& aspect_ratio) {
    const auto dev = model->proj_out->weight.device();
    const auto dtype = model->proj_out->compute_dtype();  // not the weight's: uint8 codes under fp8 storage
    auto opt = [&](const at::Tensor& t) { return t.defined() ? t.to(dev) : t; };
    return model->forward(x.to(dev, dtype), context.to(dev, dtype), timestep.to(dev), opt(mask), opt(resolution),
                          opt(aspect_ratio));
  }
};

// ---- the plugin ----------------------------------------------------------------------------

struct TextConditioning {
  at::Tensor ids, mask, embeds;
};

class PixArtPlugin : public yeto::family::DiffusersFamily {
 public:
  PixArtPlugin() : DiffusersFamily(pixart::description()) {}

  // transformer/config.json decides whether a legacy Transformer2DModel is served.
  json plan(const std::string& model_dir, const json& model_index) override {
    const auto transformer_cfg_path = model_dir + "/transformer/config.json";
    const json transformer_cfg =
        std::ifstream(transformer_cfg_path).good() ? read_json_file(transformer_cfg_path) : json::object();
    auto plan = pixart::plan_from_model_index(model_dir, model_index, transformer_cfg);
    default_max_length_ = pixart::default_max_sequence_length(model_index.value("_class_name", std::string()),
                                                              model_dir + "/model_index.json");
    return plan;
  }

  void pipeline_loaded(const std::string&, const json&, const json&) override {
    max_sequence_length_ = default_max_length_;
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>("PixArtTransformer2DModel");
  }

  // The micro-conditions: image resolution (height, width in pixels) and aspect ratio height /
  // width, from the latent size, as PixArtAlphaPipeline builds them. Nothing for checkpoints
  // without additional conditions.
  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& /*step_json*/) override {
    const auto& noisy = yeto::sdk::get(batch, "noisy");
    check_latents(noisy, "noisy");
    if (!transformer()->config().use_additional_conditions) return {};
    const auto [resolution, aspect_ratio] = added_conditions(noisy.size(0), noisy.size(2) * vae_scale_factor(),
                                                             noisy.size(3) * vae_scale_factor());
    return {{"resolution", resolution}, {"aspect_ratio", aspect_ratio}};
  }

  // The full transformer output, [B, out_channels, h, w] in float32: with learned sigma that is the
  // noise prediction and the variance; align() selects what the loss compares.
  at::Tensor denoise(const NamedTensors& in, const std::string& /*step_json*/) override {
    using yeto::sdk::get;
    const auto& x = get(in, "hidden_states");
    check_latents(x, "hidden_states");
    const auto* mask = find(in, "prompt_attention_mask");
    at::Tensor resolution, aspect_ratio;
    if (transformer()->config().use_additional_conditions) {
      // They come from denoiser_kwargs (the caller adds that hook's tensors to these inputs).
      const auto* r = find(in, "resolution");
      const auto* a = find(in, "aspect_ratio");
      if (!r || !a)
        sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                  "pixart denoise: this transformer uses additional conditions; the inputs need "
                  "'resolution' [B, 2] and 'aspect_ratio' [B, 1] from denoiser_kwargs");
      resolution = *r;
      aspect_ratio = *a;
    }
    return run_transformer(x, get(in, "prompt_embeds"), get(in, "timesteps"), mask ? *mask : at::Tensor(),
                           resolution, aspect_ratio)
        .to(at::kFloat);
  }

  // The learned-sigma split: a prediction with twice the target's channels is [noise, variance];
  // the loss sees the noise half (channels 0 .. C-1), as Diffusers' PixArt training scripts do.
  std::pair<at::Tensor, at::Tensor> align(const at::Tensor& prediction, const at::Tensor& target,
                                          const std::string& /*step_json*/) override {
    if (prediction.dim() == target.dim() && prediction.dim() >= 2 && prediction.size(0) == target.size(0) &&
        prediction.size(1) == 2 * target.size(1) &&
        prediction.sizes().slice(2) == target.sizes().slice(2))
      return {prediction.narrow(1, 0, target.size(1)).to(at::kFloat), target.to(at::kFloat)};
    if (prediction.sizes() != target.sizes())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "pixart align: prediction " + c10::str(prediction.sizes()) + " and target " +
                                               c10::str(target.sizes()) +
                                               " match neither directly nor as a learned-sigma [noise, variance] pair");
    return {prediction.to(at::kFloat), target.to(at::kFloat)};
  }

  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto r = yeto::family::parse_request(request_json, pixart::parse_generate_request);
    yeto::family::GenerationTrace record(r.trace);
    const auto& cfg = transformer()->config();
    const auto [batch, height, width, vsf] = image_grid(r, cfg.sample_size, cfg.patch_size);
    const auto max_len = r.max_sequence_length > 0 ? r.max_sequence_length : default_max_length_;
    const bool cfg_guidance = r.guidance > 1.0;

    // 1. Text: prompt and (with guidance) negative prompt, each with its padding mask.
    const auto cond = encode_text(r.prompts, max_len);
    record("input_ids", cond.ids);
    record("attention_mask", cond.mask);
    record("prompt_embeds", cond.embeds);
    at::Tensor context = cond.embeds, mask = cond.mask;
    if (cfg_guidance) {
      // The negative prompt is tokenized to the prompt's length; negatives first in the batch.
      const auto neg = encode_text(r.negative_prompts, cond.embeds.size(1));
      record("negative_input_ids", neg.ids);
      record("negative_attention_mask", neg.mask);
      record("negative_prompt_embeds", neg.embeds);
      context = at::cat({neg.embeds, cond.embeds}, 0);
      mask = at::cat({neg.mask, cond.mask}, 0);
    }

    // 2. Schedule and initial latents (noise from a CPU generator, as torch.Generator("cpu")).
    const auto schedule = yeto::family::set_timesteps({r.steps, {}, {}}, record);
    const auto channels = cfg.in_channels;
    auto latents =
        yeto::family::initial_latents(inputs, {batch, channels, height / vsf, width / vsf}, r.seed, record);
    // init_noise_sigma is 1 for the multistep schedulers this family uses.
    const auto model_batch = cfg_guidance ? 2 * batch : batch;
    at::Tensor resolution, aspect_ratio;
    if (cfg.use_additional_conditions) std::tie(resolution, aspect_ratio) = added_conditions(model_batch, height, width);

    // 3. Denoising loop: guidance on every output channel (the variance half too) before the
    // learned-sigma split, as upstream.
    yeto::family::SamplingHooks hooks;
    hooks.guidance = r.guidance;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& timestep, std::int64_t) {
      return run_transformer(x, context, timestep, mask, resolution, aspect_ratio);
    };
    hooks.select = [&](const at::Tensor& out) {
      return cfg.out_channels / 2 == channels ? out.chunk(2, 1)[0] : out;
    };
    if (r.trace && schedule.sigmas.defined())
      hooks.observe = [&](std::int64_t i, const at::Tensor& x, const at::Tensor& noise_pred) {
        record("step." + std::to_string(i) + ".x0_pred", x0_prediction(noise_pred, x, schedule.sigmas[i]));
      };
    latents = yeto::family::denoise_loop(latents, schedule, hooks, record);

    // 4. Decode.
    return record.outputs({{"images", decode_images(latents, record)}});
  }

 protected:
  // Prompts -> T5 states with the padding mask the transformer's cross-attention needs.
  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_text(prompts, max_sequence_length_);
    return {{"prompt_embeds", c.embeds}, {"prompt_attention_mask", c.mask}};
  }

  std::int64_t default_max_sequence_length() const override { return default_max_length_; }

 private:
  pixart::PixArtTransformer2DModel& transformer() {
    return family::plugin_model<TransformerComponent>("transformer", "PixArtTransformer2DModel", "pixart", "a");
  }

  at::Tensor run_transformer(const at::Tensor& x, const at::Tensor& context, const at::Tensor& timestep,
                             const at::Tensor& mask, const at::Tensor& resolution, const at::Tensor& aspect_ratio) {
    try {
      return TransformerComponent::run(transformer(), x, context, timestep, mask, resolution, aspect_ratio);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  std::pair<at::Tensor, at::Tensor> added_conditions(std::int64_t batch, std::int64_t height, std::int64_t width) {
    const auto res = at::tensor({static_cast<float>(height), static_cast<float>(width)}, at::kFloat);
    const auto ar = at::tensor({static_cast<float>(static_cast<double>(height) / static_cast<double>(width))}, at::kFloat);
    return {res.unsqueeze(0).repeat({batch, 1}), ar.unsqueeze(0).repeat({batch, 1})};
  }

  // What DPM-Solver++ / UniPC convert the model output to (the x0 prediction), for the trace:
  // VP sigmas, alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma * alpha_t.
  at::Tensor x0_prediction(const at::Tensor& model_output, const at::Tensor& sample, const at::Tensor& sigma) {
    const auto alpha_t = 1.0 / (sigma * sigma + 1).sqrt();
    const auto sigma_t = sigma * alpha_t;
    const auto prediction = configs_.scheduler().value("prediction_type", std::string("epsilon"));
    if (prediction == "v_prediction") return alpha_t * sample - sigma_t * model_output;
    if (prediction == "sample") return model_output;
    return (sample - sigma_t * model_output) / alpha_t;
  }

  TextConditioning encode_text(const std::vector<std::string>& prompts, std::int64_t max_length) {
    std::vector<std::string> texts;
    for (const auto& p : prompts) texts.push_back(pixart::preprocess_caption(p));
    // PixArt passes the mask to T5 (padded keys masked; outputs at padded positions kept).
    family::TextEncoderCall call;
    call.max_length = max_length;
    call.with_mask = true;
    const auto t = family::encode_text(texts, call);
    return {t.input_ids, t.attention_mask, t.output("last_hidden_state")};
  }

  void check_latents(const at::Tensor& x, const std::string& name) {
    const auto& cfg = transformer()->config();
    yeto::family::check_image_latents(x, name, "pixart", cfg.in_channels, cfg.patch_size);
  }

  std::int64_t default_max_length_ = 120;
};

}  // namespace
}  // namespace yeto::pixart

YETO_PLUGIN(yeto::pixart::PixArtPlugin)
