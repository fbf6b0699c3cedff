#include "yeto/family/diffusers_family.hpp"

#include <tuple>

#include "yeto/family/sampling.hpp"

namespace yeto::family {

DiffusersFamily::DiffusersFamily(const FamilyDescription& description)
    : configs_(description.scaling_factor(), description.shift_factor()),
      max_sequence_length_(description.max_sequence_length()),
      description_(description) {}

std::string DiffusersFamily::load_pipeline(const std::string& model_dir, const std::string& model_index_json) {
  const auto index = parse_json(model_index_json, model_dir + "/model_index.json");
  nlohmann::json p;
  try {
    p = plan(model_dir, index);
  } catch (const std::invalid_argument& e) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
  }
  // A component the plan lists as null (cached latents / text) has no config to read.
  configs_.read(model_dir, p);
  pipeline_loaded(model_dir, index, p);
  return p.dump();
}

at::Tensor DiffusersFamily::decode_images(const at::Tensor& latents, Trace& record) {
  return family::decode_images(latents, configs_.scaling_factor(), configs_.shift_factor(), record);
}

std::string DiffusersFamily::presets() { return description_.presets().dump(); }

void DiffusersFamily::prepare(const std::string& options_json) {
  const auto o = parse_json(options_json, "prepare options");
  for (const auto& name : denoisers()) {
    TuningSpec spec;
    spec.resolve_targets = [this](const nlohmann::json& t) { return description_.lora_targets(t); };
    spec.seed_name = lora_seed(name);
    tuning_ = prepare_denoisers({&plugin_module(name, description_.plugin())}, o, spec);
  }
  if (const auto length = default_max_sequence_length(); length > 0)
    max_sequence_length_ = run_max_sequence_length(length, description_.max_sequence_length_limit(),
                                                   description_.model() + "'s " + std::to_string(length));
  prepare_run(o);
}

NamedTensors DiffusersFamily::trainable_parameters() {
  std::vector<NamedModule> modules;
  for (const auto& name : denoisers()) modules.push_back({name, &plugin_module(name, description_.plugin())});
  return family::trainable_parameters(modules, tuning_);
}

NamedTensors DiffusersFamily::encode_media(const NamedTensors& media, const std::string& options_json) {
  const auto& px = image_pixels(media, description_.plugin(), description_.model());
  return {{"latents", encode_with_host_vae(px, options_json, configs_.shift_factor(), configs_.scaling_factor())}};
}

NamedTensors DiffusersFamily::encode_conditioning(const std::string& prompts_json, const NamedTensors& /*extra*/) {
  return conditioning(conditioning_prompts(parse_json(prompts_json, "encode_conditioning prompts")));
}

std::pair<at::Tensor, at::Tensor> DiffusersFamily::align(const at::Tensor& prediction, const at::Tensor& target,
                                                         const std::string& /*step_json*/) {
  return same_layout_align(prediction, target, description_.plugin());
}

DiffusersFamily::ImageGrid DiffusersFamily::image_grid(const GenerateSettings& request, std::int64_t sample_size,
                                                       std::int64_t patch_size) const {
  ImageGrid g;
  g.batch = static_cast<std::int64_t>(request.prompts.size());
  g.vae_scale_factor = vae_scale_factor();
  std::tie(g.height, g.width) = generation_size(request.height, request.width, sample_size * g.vae_scale_factor,
                                                g.vae_scale_factor * patch_size);
  return g;
}

}  // namespace yeto::family
