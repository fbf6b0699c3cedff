// The Flux family plugin (FLUX.1 dev / schnell): the FluxTransformer2DModel component class
// and the FluxPipeline semantics as plugin hooks, written against the SDK only (yeto/plugin.hpp,
// sdk/nn, sdk/family). The host loads the repository's other components (VAE, CLIP, T5, tokenizers,
// scheduler) from the plan load_pipeline returns; this plugin reaches them through
// yeto_host_api.component_get and calls their documented forward() methods.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "flux_family.hpp"
#include "flux_latents.hpp"
#include "flux_transformer.hpp"
#include "yeto/family/diffusers_family.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/helper_call.hpp"
#include "yeto/family/repository.hpp"
#include "yeto/family/sampling.hpp"

namespace yeto::flux {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

// ---- the transformer component -----------------------------------------------------------

// Built directly in the run's precision and device (a bf16 checkpoint never exists as float32).
class TransformerComponent
    : public yeto::family::ModelComponent<flux::FluxTransformer2DModel, flux::FluxTransformerConfig> {
 public:
  TransformerComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {"FluxTransformer2DModel", "is this a FLUX.1 transformer checkpoint?"}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    using yeto::sdk::get;
    using yeto::sdk::has;
    const auto dtype = model_->x_embedder->compute_dtype();
    const auto dev = model_->x_embedder->weight.device();
    auto to = [&](const at::Tensor& t) { return t.to(dev, dtype); };
    const at::Tensor guidance = has(in, "guidance") ? get(in, "guidance").to(dev) : at::Tensor();
    auto out = model_->forward(to(get(in, "hidden_states")), to(get(in, "encoder_hidden_states")),
                               to(get(in, "pooled_projections")), get(in, "timestep").to(dev),
                               get(in, "img_ids").to(dev), get(in, "txt_ids").to(dev), guidance);
    return {{"sample", out}};
  }
};

// FluxPipeline's static latent helpers as a component, so parity cases recorded against
// `FluxPipeline._pack_latents(...)` run this plugin's own packing (yeto/family/helper_call.hpp).
class PipelineHelpersComponent : public yeto::family::PipelineHelpers {
 public:
  PipelineHelpersComponent(const std::string&, const std::string&)
      : PipelineHelpers("FluxPipeline", "_pack_latents, _unpack_latents, _prepare_latent_image_ids") {}

 protected:
  at::Tensor run(const yeto::family::HelperCall& call) override {
    if (call.method() == "_pack_latents") {
      // (latents, batch_size, num_channels_latents, height, width): the sizes must be the tensor's.
      const auto latents = call.tensor(0, "latents");
      const std::int64_t want[] = {call.integer(1, "batch_size", latents.size(0)),
                                   call.integer(2, "num_channels_latents", latents.size(1)),
                                   call.integer(3, "height", latents.size(2)), call.integer(4, "width", latents.size(3))};
      if (latents.dim() != 4 || want[0] != latents.size(0) || want[1] != latents.size(1) ||
          want[2] != latents.size(2) || want[3] != latents.size(3))
        throw std::invalid_argument("the sizes given do not match latents " +
                                    c10::str(latents.sizes()));
      return flux::pack_latents(latents);
    }
    if (call.method() == "_unpack_latents")
      return flux::unpack_latents(call.tensor(0, "latents"), call.integer(1, "height", 0), call.integer(2, "width", 0),
                                  call.integer(3, "vae_scale_factor", 8));
    if (call.method() == "_prepare_latent_image_ids")
      return flux::latent_image_ids(call.integer(1, "height", 0), call.integer(2, "width", 0),
                                    call.dtype(4, "dtype", at::kFloat));
    return {};
  }
};

// ---- the plugin ----------------------------------------------------------------------------

struct Conditioning {
  at::Tensor clip_ids, t5_ids, pooled, embeds;
};

class FluxPlugin : public yeto::family::DiffusersFamily {
 public:
  FluxPlugin() : DiffusersFamily(flux::description()) {}

  void pipeline_loaded(const std::string& model_dir, const json& /*model_index*/, const json& /*plan*/) override {
    clip_max_length_ = yeto::family::tokenizer_max_length(model_dir, "tokenizer", 77);
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TransformerComponent>("FluxTransformer2DModel");
    registry.add<PipelineHelpersComponent>("FluxPipeline");
  }

  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& step_json) override {
    const auto& noisy = yeto::sdk::get(batch, "noisy");
    check_latents(noisy, "noisy");
    const auto& embeds = yeto::sdk::get(batch, "prompt_embeds");
    const auto step = family::parse_json(step_json, "denoiser_kwargs step");
    NamedTensors out = {{"img_ids", flux::latent_image_ids(noisy.size(2) / 2, noisy.size(3) / 2)},
                        {"txt_ids", flux::text_ids(embeds.size(1))}};
    if (transformer()->config().guidance_embeds)
      out.emplace_back("guidance", at::full({noisy.size(0)}, step.value("guidance", 3.5), at::kFloat));
    return out;
  }

  at::Tensor denoise(const NamedTensors& in, const std::string& /*step_json*/) override {
    using yeto::sdk::get;
    using yeto::sdk::has;
    const auto& x = get(in, "hidden_states");
    check_latents(x, "hidden_states");
    const auto& embeds = get(in, "prompt_embeds");
    const auto img_ids = has(in, "img_ids") ? get(in, "img_ids") : flux::latent_image_ids(x.size(2) / 2, x.size(3) / 2);
    const auto txt_ids = has(in, "txt_ids") ? get(in, "txt_ids") : flux::text_ids(embeds.size(1));
    at::Tensor guidance;
    if (transformer()->config().guidance_embeds)
      guidance = has(in, "guidance") ? get(in, "guidance") : at::full({x.size(0)}, 3.5, at::kFloat);
    const auto t = get(in, "timesteps").to(at::kFloat) / 1000.0;
    const auto pred = run_transformer(flux::pack_latents(x), embeds, get(in, "pooled_prompt_embeds"), t, img_ids,
                                      txt_ids, guidance);
    return unpack(pred, x.size(2), x.size(3)).to(at::kFloat);
  }

  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto r = yeto::family::parse_request(request_json, flux::parse_generate_request);
    yeto::family::GenerationTrace record(r.trace);
    const auto& cfg = transformer()->config();
    const auto batch = static_cast<std::int64_t>(r.prompts.size());

    // 1. Text conditioning.
    const auto cond = encode_prompts(r.prompts, r.max_sequence_length);
    record("clip_input_ids", cond.clip_ids);
    record("t5_input_ids", cond.t5_ids);
    record("pooled_prompt_embeds", cond.pooled);
    record("prompt_embeds", cond.embeds);

    // 2. Latents: the unpacked shape, noise from a CPU generator seeded like torch.Generator("cpu").manual_seed.
    const auto vsf = vae_scale_factor();
    const auto h = 2 * (r.height / (vsf * 2)), w = 2 * (r.width / (vsf * 2));
    if (h < 2 || w < 2)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: height and width must be at least " + std::to_string(vsf * 2));
    const auto channels = cfg.in_channels / 4;
    yeto::family::Trace untraced(false);  // the trace records the packed latents below
    const auto noise = yeto::family::initial_latents(inputs, {batch, channels, h, w}, r.seed, untraced);
    const auto text_ids = flux::text_ids(cond.embeds.size(1));
    const auto image_ids = flux::latent_image_ids(h / 2, w / 2);
    auto latents = flux::pack_latents(noise);
    record("text_ids", text_ids);
    record("latent_image_ids", image_ids);
    record("initial_latents", latents);

    // 3. Schedule: sigmas linspace(1, 1/N, N), dynamic shift mu from the image sequence length.
    const auto sigmas_in = flux::linspace(1.0, 1.0 / static_cast<double>(r.steps), r.steps);
    const double mu = flux::calculate_shift(latents.size(1), configs_.scheduler_int("base_image_seq_len", 256),
                                            configs_.scheduler_int("max_image_seq_len", 4096),
                                            configs_.scheduler_number("base_shift", 0.5),
                                            configs_.scheduler_number("max_shift", 1.15));
    const auto schedule = yeto::family::set_timesteps({0, sigmas_in, mu}, record);
    record("mu", at::scalar_tensor(mu, at::kDouble));
    at::Tensor guidance;
    if (cfg.guidance_embeds) {
      guidance = at::full({batch}, r.guidance, at::kFloat);
      record("guidance", guidance);
    }

    // 4. Denoising loop (FLUX.1 [dev] is guidance-distilled: the guidance is an input, not a
    // second batch).
    yeto::family::SamplingHooks hooks;
    hooks.model = [&](const at::Tensor& x, const at::Tensor& timestep, std::int64_t i) {
      const auto t = timestep.to(at::kFloat) / 1000;
      record("step." + std::to_string(i) + ".transformer_timestep", t);
      return run_transformer(x, cond.embeds, cond.pooled, t, image_ids, text_ids, guidance);
    };
    latents = yeto::family::denoise_loop(latents, schedule, hooks, record);

    // 5. Decode.
    const auto unpacked = flux::unpack_latents(latents, r.height, r.width, vsf);
    record("final_latents_unpacked", unpacked);
    return record.outputs({{"images", decode_images(unpacked, record)}});
  }

 protected:
  NamedTensors conditioning(const std::vector<std::string>& prompts) override {
    const auto c = encode_prompts(prompts, max_sequence_length_);
    return {{"prompt_embeds", c.embeds}, {"pooled_prompt_embeds", c.pooled}};
  }

 private:
  flux::FluxTransformer2DModel& transformer() {
    return family::plugin_model<TransformerComponent>("transformer", "FluxTransformer2DModel", "flux", "a");
  }

  at::Tensor run_transformer(const at::Tensor& packed, const at::Tensor& embeds, const at::Tensor& pooled,
                             const at::Tensor& timestep, const at::Tensor& img_ids, const at::Tensor& txt_ids,
                             const at::Tensor& guidance) {
    auto& model = transformer();
    const auto dtype = model->x_embedder->compute_dtype();
    const auto dev = model->x_embedder->weight.device();
    return model->forward(packed.to(dev, dtype), embeds.to(dev, dtype), pooled.to(dev, dtype), timestep.to(dev),
                          img_ids.to(dev), txt_ids.to(dev), guidance.defined() ? guidance.to(dev) : guidance);
  }

  Conditioning encode_prompts(const std::vector<std::string>& prompts, std::int64_t max_sequence_length) {
    // FluxPipeline calls both encoders with the ids only (no attention mask).
    const auto clip = family::encode_text(prompts, {"tokenizer", "text_encoder", clip_max_length_});
    const auto t5 = family::encode_text(prompts, {"tokenizer_2", "text_encoder_2", max_sequence_length});
    return {clip.input_ids, t5.input_ids, clip.output("pooler_output"), t5.output("last_hidden_state")};
  }

  void check_latents(const at::Tensor& x, const std::string& name) {
    const auto channels = transformer()->config().in_channels / 4;
    if (x.dim() != 4 || x.size(1) != channels || x.size(2) % 2 != 0 || x.size(3) % 2 != 0)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "flux: '" + name + "' must be unpacked latents [B, " +
                                               std::to_string(channels) + ", h, w] with even h and w, got " +
                                               c10::str(x.sizes()));
  }

  at::Tensor unpack(const at::Tensor& packed, std::int64_t h, std::int64_t w) {
    const auto vsf = vae_scale_factor();
    return flux::unpack_latents(packed, h * vsf, w * vsf, vsf);
  }

  std::int64_t clip_max_length_ = 77;
};

}  // namespace
}  // namespace yeto::flux

YETO_PLUGIN(yeto::flux::FluxPlugin)
