#include "yeto/family/diffusers_family.hpp"

namespace yeto::family {

DiffusersFamily::DiffusersFamily(FamilyDescription description)
    : configs_(description.scaling_factor, description.shift_factor), description_(std::move(description)) {}

void DiffusersFamily::prepare(const std::string& options_json) {
  const auto o = parse_json(options_json, "prepare options");
  TuningSpec spec;
  spec.resolve_targets = description_.lora_targets;
  tuning_ = prepare_denoisers({&denoiser_module()}, o, spec);
  prepare_run(o);
}

NamedTensors DiffusersFamily::trainable_parameters() {
  return family::trainable_parameters({{description_.denoiser, &denoiser_module()}}, tuning_);
}

NamedTensors DiffusersFamily::encode_media(const NamedTensors& media, const std::string& options_json) {
  const auto& px = image_pixels(media, description_.plugin, description_.model);
  return {{"latents", encode_with_host_vae(px, options_json, configs_.shift_factor(), configs_.scaling_factor())}};
}

NamedTensors DiffusersFamily::encode_conditioning(const std::string& prompts_json, const NamedTensors& /*extra*/) {
  return conditioning(conditioning_prompts(parse_json(prompts_json, "encode_conditioning prompts")));
}

std::pair<at::Tensor, at::Tensor> DiffusersFamily::align(const at::Tensor& prediction, const at::Tensor& target,
                                                         const std::string& /*step_json*/) {
  return same_layout_align(prediction, target, description_.plugin);
}

}  // namespace yeto::family
