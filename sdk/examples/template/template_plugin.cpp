// The Yeto template plugin: a small but real DiT family on the installed SDK, the starting point
// for a plugin of your own. Copy this directory, rename the plugin in CMakeLists.txt, replace
// template_transformer.{hpp,cpp} with your network and the family description below with yours.
//
// What a family is, in this file:
//   - the family description: the pipeline class, its components and the classes each accepts,
//     the VAE latent shift/scale, the LoRA target sets, the init-model presets (with their
//     scheduler) -- plain data, read by the kit;
//   - the component class TemplateTransformer2DModel (template_transformer.hpp), built from the
//     repository's transformer/config.json; the host streams the checkpoint's tensors into it
//     through load_weights, so a trained or downloaded checkpoint is what trains and samples;
//   - the training hooks (plugin.h states their tensor contract), most of them from the kit's
//     DiffusersFamily base: prepare attaches LoRA (or trains every weight with tuning = "full");
//     encode_media and conditioning() reach the host's VAE, tokenizer and CLIP text encoder;
//     denoise runs the transformer; align compares prediction and target in one layout;
//   - generate: the kit's sampling loop (flow-match Euler from the host scheduler, classifier-free
//     guidance), seeded noise, the VAE decode.
// Everything else -- datasets, caching, the optimiser, checkpoints, DiLoCo, export to PEFT files,
// sampling with an adapter -- is the host's, for every family alike.
#include <ATen/ATen.h>

#include <yeto/family/config.hpp>
#include <yeto/family/diffusers_family.hpp>
#include <yeto/family/family.hpp>
#include <yeto/family/sampling.hpp>
#include <yeto/plugin.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "template_transformer.hpp"

namespace {

using nlohmann::json;
using yeto::sdk::fail;
using yeto::sdk::NamedTensors;
namespace family = yeto::family;

// ---- the family description ---------------------------------------------------------------

constexpr const char* kPlugin = "template";
constexpr const char* kPipeline = "TemplatePipeline";
constexpr const char* kTransformer = "TemplateTransformer2DModel";

// model_index.json's components and the classes this family accepts for each. The denoiser and
// the scheduler are always needed; the encoders may be [null, null] in a repository that trains
// on cached latents and text embeddings.
const std::vector<family::ComponentSpec>& components() {
  static const std::vector<family::ComponentSpec> specs = {
      {"transformer", {kTransformer}, false, false},
      {"vae", {"AutoencoderKL"}},
      {"text_encoder", {"CLIPTextModelWithProjection"}},
      {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
      {"scheduler", {"FlowMatchEulerDiscreteScheduler"}, false, false},
  };
  return specs;
}

// LoRA targets: "auto" and "attention" are the attention projections; "all-linear" every
// LoRA-capable layer but proj_out (the kit's default exclusion); or explicit module patterns.
family::LoraTargets resolve_lora_targets(const json& targets) {
  const std::vector<std::string> attention = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"};
  return family::resolve_lora_targets(targets, {attention, attention});
}

// The latent normalisation when the repository has no VAE config (cached latents only).
constexpr double kDefaultScaling = 0.18215;
constexpr double kDefaultShift = 0.0;

json model_index() {
  return {{"_class_name", kPipeline},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"text_encoder", {"transformers", "CLIPTextModelWithProjection"}},
          {"tokenizer", {"transformers", "CLIPTokenizer"}},
          {"transformer", {"diffusers", kTransformer}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

json scheduler_config() {
  return {{"num_train_timesteps", 1000}, {"shift", 1.0}, {"use_dynamic_shifting", false}};
}

json vae_config() {
  return {{"act_fn", "silu"},
          {"block_out_channels", {16, 32}},
          {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
          {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
          {"in_channels", 3},
          {"out_channels", 3},
          {"latent_channels", 4},
          {"layers_per_block", 1},
          {"norm_num_groups", 8},
          {"sample_size", 32},
          {"scaling_factor", kDefaultScaling},
          {"shift_factor", nullptr},
          {"mid_block_add_attention", true},
          {"use_quant_conv", true},
          {"use_post_quant_conv", true}};
}

// init-model presets: every component's config; the host builds each with seeded random
// weights (--seed) and writes the tokenizer files.
json presets() {
  yeto_template::TransformerConfig t;  // the defaults: 2 blocks, 2 heads x 16, patch 2
  t.sample_size = 16;
  json tokenizer = family::clip_tokenizer_config();
  tokenizer["model_max_length"] = 32;
  json clip = family::clip_text_config({32, 2, 2, 64, "CLIPTextModelWithProjection", "quick_gelu"});
  clip["max_position_embeddings"] = 32;
  return {{"tiny",
           {{"description",
             "A CPU-sized TemplatePipeline: TemplateTransformer2DModel with 2 blocks, 2 heads x 16, patch 2 over 4 "
             "latent channels; AutoencoderKL [16, 32] (32 px images -> 16 x 16 latents); CLIP text encoder with "
             "projection (hidden 32, 2 layers, 32 tokens); FlowMatchEulerDiscreteScheduler (shift 1)."},
            {"model_index", model_index()},
            {"components",
             {{"transformer", {{"config", t.to_json()}}},
              {"vae", {{"config", vae_config()}}},
              {"text_encoder", {{"config", clip}}},
              {"tokenizer", {{"config", tokenizer}}},
              {"scheduler", {{"config", scheduler_config()}}}}}}}};
}

// ---- the component class ----------------------------------------------------------------------

class TransformerComponent : public yeto::sdk::Component {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : model_(family::component_model<yeto_template::TemplateTransformer2DModel, yeto_template::TransformerConfig>(
            config_json, dir, kTransformer)) {}

  // The inputs of TemplateTransformer2DModel.forward by name; "sample" out.
  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    using yeto::sdk::get;
    return {{"sample", run(get(in, "hidden_states"), get(in, "encoder_hidden_states"), get(in, "pooled_projections"),
                           get(in, "timestep"))}};
  }

  at::Tensor run(const at::Tensor& x, const at::Tensor& context, const at::Tensor& pooled, const at::Tensor& t) {
    try {
      return model_->forward(x, context, pooled, t);
    } catch (const std::invalid_argument& e) {
      fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
  }

  NamedTensors parameters() override { return family::module_tensors(*model_); }
  void load_weights(const NamedTensors& weights, bool strict) override {
    family::load_module_weights(*model_, weights, strict, kTransformer,
                                "is this a TemplateTransformer2DModel checkpoint of this configuration?");
  }
  yeto_template::TemplateTransformer2DModel& model() { return model_; }

 private:
  yeto_template::TemplateTransformer2DModel model_;
};

// ---- the plugin ---------------------------------------------------------------------------------

struct TextConditioning {
  at::Tensor ids, embeds, pooled;
};

// DiffusersFamily (yeto/family/diffusers_family.hpp) implements prepare (placement, then LoRA or
// full tuning), trainable_parameters, encode_media (the host's VAE with this family's latent
// scale), encode_conditioning (through conditioning() below) and align from this description.
class TemplatePlugin : public family::DiffusersFamily {
 public:
  TemplatePlugin()
      : DiffusersFamily({kPlugin, "TemplatePipeline", "transformer", kDefaultScaling, kDefaultShift,
                         resolve_lora_targets}) {}

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>(kTransformer);
  }

  std::string presets() override { return ::presets().dump(); }

  // The plan: which class builds each component from which folder. The VAE's latent
  // normalisation and the tokenizer's length are read here; both may be absent ([null, null]).
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) override {
    const std::string where = model_dir + "/model_index.json";
    const auto index = family::parse_json(model_index_json, where);
    if (index.value("_class_name", std::string()) != kPipeline)
      fail(YETO_ERR_INVALID_ARGUMENT, where + ": _class_name is " + index.value("_class_name", json()).dump() +
                                          "; the template plugin serves " + kPipeline + " repositories");
    json plan;
    try {
      plan = {{"components", family::plan_components(model_dir, index, components(), kPlugin,
                                                     "a TemplatePipeline repository has transformer, vae, "
                                                     "text_encoder, tokenizer and scheduler")},
              {"family", kPlugin}};
    } catch (const std::invalid_argument& e) {
      fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    configs_.read(model_dir, plan);  // vae/config.json (when not null), scheduler_config.json
    max_length_ = family::tokenizer_max_length(model_dir, "tokenizer", 77);
    return plan.dump();
  }

  // hidden_states = x_t, timesteps on the scheduler's 0..1000 scale, the conditioning above.
  at::Tensor denoise(const NamedTensors& in, const std::string& /*step_json*/) override {
    using yeto::sdk::get;
    return component().run(get(in, "hidden_states"), get(in, "prompt_embeds"), get(in, "pooled_prompt_embeds"),
                           get(in, "timesteps"))
        .to(at::kFloat);
  }

  // {"prompts", "negative_prompts"?, "seed", "steps", "guidance", "height", "width", "trace"?}
  // -> "images" [B, 3, H, W] in [0, 1] (and, with "trace", every intermediate).
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto& cfg = transformer()->config();
    std::vector<std::string> prompts, negatives;
    std::uint64_t seed = 0;
    std::int64_t steps = 20, height = 0, width = 0;
    double guidance = 1.0;
    bool trace = false;
    try {
      const family::RequestReader r(family::parse_json(request_json, "generate request"));
      prompts = r.strings("prompts");
      negatives = r.has("negative_prompts") ? r.strings("negative_prompts")
                                            : std::vector<std::string>(prompts.size(), "");
      if (negatives.size() == 1) negatives.assign(prompts.size(), negatives[0]);
      if (negatives.size() != prompts.size())
        throw std::invalid_argument("generate request: 'negative_prompts' must have one entry or one per prompt");
      seed = r.seed(0);
      steps = r.integer("steps", steps, 1);
      const auto native = cfg.sample_size * configs_.vae_scale_factor();
      height = r.integer("height", native, 1);
      width = r.integer("width", native, 1);
      guidance = r.number("guidance", guidance);
      trace = r.boolean("trace", false);
    } catch (const std::invalid_argument& e) {
      fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    const auto multiple = configs_.vae_scale_factor() * cfg.patch_size;
    if (height % multiple != 0 || width % multiple != 0)
      fail(YETO_ERR_INVALID_ARGUMENT, "generate: height and width must be multiples of " + std::to_string(multiple) +
                                          " (VAE scale factor x patch size), got " + std::to_string(height) + "x" +
                                          std::to_string(width));
    at::NoGradGuard no_grad;
    family::Trace record(trace);
    const auto batch = static_cast<std::int64_t>(prompts.size());

    // Text: with guidance the model batch is [negative; prompt].
    const bool guided = guidance > 1.0;
    const auto cond = encode_text(prompts);
    record("input_ids", cond.ids);
    record("prompt_embeds", cond.embeds);
    record("pooled_prompt_embeds", cond.pooled);
    at::Tensor context = cond.embeds, pooled = cond.pooled;
    if (guided) {
      const auto neg = encode_text(negatives);
      record("negative_prompt_embeds", neg.embeds);
      context = at::cat({neg.embeds, cond.embeds}, 0);
      pooled = at::cat({neg.pooled, cond.pooled}, 0);
    }

    // Seeded noise in the latents' shape, the host scheduler's timesteps, the loop, the decode.
    const auto vsf = configs_.vae_scale_factor();
    const auto latents = family::initial_latents(inputs, {batch, cfg.in_channels, height / vsf, width / vsf}, seed, record);
    const auto schedule = family::set_timesteps({{"num_inference_steps", steps}}, record);
    family::SamplingHooks hooks;
    hooks.guidance = guidance;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& t, std::int64_t) {
      return component().run(x, context, pooled, t.to(at::kFloat));
    };
    const auto final_latents = family::denoise_loop(latents, schedule, hooks, record);
    const auto images =
        family::decode_images(final_latents, configs_.scaling_factor(), configs_.shift_factor(), record);
    NamedTensors out = {{"images", images}};
    record.append_to(out);
    return out;
  }

 protected:
  torch::nn::Module& denoiser_module() override { return *transformer(); }

  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_text(prompts);
    return {{"prompt_embeds", c.embeds}, {"pooled_prompt_embeds", c.pooled}};
  }

 private:
  TransformerComponent& component() {
    return family::plugin_component<TransformerComponent>("transformer", kTransformer, kPlugin);
  }
  yeto_template::TemplateTransformer2DModel& transformer() { return component().model(); }

  // Prompts -> CLIP token ids (padded to the tokenizer's length) -> the last hidden state and the
  // projected pooled embedding.
  TextConditioning encode_text(const std::vector<std::string>& prompts) {
    TextConditioning c;
    const json tok = {{"method", "tokenize"}, {"text", prompts}, {"padding", "max_length"},
                      {"max_length", max_length_}, {"truncation", true}};
    c.ids = family::output(family::call("tokenizer", {}, tok), "input_ids", "tokenizer").to(at::kLong);
    const auto enc = family::call("text_encoder", {{"input_ids", c.ids}}, {{"method", "encode"}});
    c.embeds = family::output(enc, "last_hidden_state", "text_encoder").to(at::kFloat);
    c.pooled = family::output(enc, "text_embeds", "text_encoder").to(at::kFloat);
    return c;
  }

  std::int64_t max_length_ = 77;
};

}  // namespace

YETO_PLUGIN(TemplatePlugin)
