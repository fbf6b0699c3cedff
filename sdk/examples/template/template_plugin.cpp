// The Yeto template plugin: a small but real DiT family on the installed SDK, the starting point
// for a plugin of your own. Copy this directory, rename the plugin in CMakeLists.txt, replace
// template_transformer.{hpp,cpp} with your network and template.family.json with your family.
//
// What a family is, in this file:
//   - the family description (template.family.json): the pipeline class, its components and the
//     classes each accepts, the VAE latent shift/scale, the LoRA target sets, the init-model
//     presets (with their scheduler) -- plain data, read by the kit and, for the plugin's
//     descriptor, by yeto_add_plugin;
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

#include <yeto/family/description.hpp>
#include <yeto/family/diffusers_family.hpp>
#include <yeto/family/family.hpp>
#include <yeto/family/sampling.hpp>
#include <yeto/plugin.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "template_transformer.hpp"

namespace yeto_template {
const yeto::family::FamilyDescription& description();
}  // namespace yeto_template

namespace {

using nlohmann::json;
using yeto::sdk::fail;
using yeto::sdk::NamedTensors;
namespace family = yeto::family;

// ---- the family description ---------------------------------------------------------------

// template.family.json, compiled in by yeto_family_description (CMakeLists.txt) as
// yeto_template::description(): the pipeline's components and the classes each accepts, the
// latent normalisation without a VAE, the LoRA target sets and the init-model presets.
// yeto_add_plugin read its descriptor fields at build time.

constexpr const char* kPipeline = "TemplatePipeline";
constexpr const char* kTransformer = "TemplateTransformer2DModel";

// ---- the component class ----------------------------------------------------------------------

// Built from the repository's transformer/config.json in the run's device and precision; the kit's
// ModelComponent lists its parameters and loads checkpoint tensors into them by name.
class TransformerComponent
    : public family::ModelComponent<yeto_template::TemplateTransformer2DModel, yeto_template::TransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kTransformer, "is this a TemplateTransformer2DModel checkpoint of this configuration?"}) {}

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
  TemplatePlugin() : DiffusersFamily(yeto_template::description()) {}

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>(kTransformer);
  }

  // The plan (which class builds each component from which folder) is the description's; this
  // family also insists on its pipeline class.
  json plan(const std::string& model_dir, const json& index) override {
    if (index.value("_class_name", std::string()) != kPipeline)
      throw std::invalid_argument(model_dir + "/model_index.json: _class_name is " +
                                  index.value("_class_name", json()).dump() + "; the template plugin serves " +
                                  kPipeline + " repositories");
    return family_description().plan(model_dir, index);
  }

  // After the plan: the tokenizer's length (the VAE and scheduler configs are read by the base).
  void pipeline_loaded(const std::string& model_dir, const json& /*index*/, const json& /*plan*/) override {
    max_length_ = family::tokenizer_max_length(model_dir, "tokenizer", 77);
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
      height = r.integer("height", 0, 1);
      width = r.integer("width", 0, 1);
      guidance = r.number("guidance", guidance);
      trace = r.boolean("trace", false);
    } catch (const std::invalid_argument& e) {
      fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    // An unset size is the transformer's native one; both must fit the VAE and the patches.
    std::tie(height, width) = family::generation_size(height, width, cfg.sample_size * configs_.vae_scale_factor(),
                                                      configs_.vae_scale_factor() * cfg.patch_size);
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
    const auto schedule = family::set_timesteps({steps, {}, {}}, record);
    family::SamplingHooks hooks;
    hooks.guidance = guidance;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& t, std::int64_t) {
      return component().run(x, context, pooled, t.to(at::kFloat));
    };
    const auto final_latents = family::denoise_loop(latents, schedule, hooks, record);
    return record.outputs({{"images", decode_images(final_latents, record)}});
  }

 protected:
  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_text(prompts);
    return {{"prompt_embeds", c.embeds}, {"pooled_prompt_embeds", c.pooled}};
  }

 private:
  TransformerComponent& component() {
    return family::plugin_component<TransformerComponent>("transformer", kTransformer, "template");
  }
  yeto_template::TemplateTransformer2DModel& transformer() { return component().model(); }

  // Prompts -> CLIP token ids (padded to the tokenizer's length) -> the last hidden state and the
  // projected pooled embedding.
  TextConditioning encode_text(const std::vector<std::string>& prompts) {
    const auto t = family::encode_text(prompts, {"tokenizer", "text_encoder", max_length_});
    return {t.input_ids, t.output("last_hidden_state"), t.output("text_embeds")};
  }

  std::int64_t max_length_ = 77;
};

}  // namespace

YETO_PLUGIN(TemplatePlugin)
