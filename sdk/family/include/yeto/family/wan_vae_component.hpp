// The kit's AutoencoderKLWan component class and Wan's latent normalisation, for every plugin
// whose pipeline holds a Wan VAE (the Wan family; NAVA, whose video latents are Wan 2.2's): a
// plugin registers `wan::VaeComponent` under "AutoencoderKLWan" and reaches it through
// sdk::Host::vae(name) like any VAE. Header-only on top of yeto/family/wan_vae.hpp (the model, one
// translation unit of the kit).
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

#include "yeto/family/family.hpp"
#include "yeto/family/wan_vae.hpp"

namespace yeto::wan {

// The VAE config's latents_mean / latents_std as float32 [1, z_dim, 1, 1, 1] on `like`'s device
// (the values rounded from float64 as Diffusers' torch.tensor(...) of the Python lists).
inline at::Tensor latents_mean(const WanVaeConfig& c, const at::Tensor& like) {
  return at::tensor(c.latents_mean, at::kDouble).to(at::kFloat).to(like.device()).view({1, -1, 1, 1, 1});
}
inline at::Tensor latents_std(const WanVaeConfig& c, const at::Tensor& like) {
  return at::tensor(c.latents_std, at::kDouble).to(at::kFloat).to(like.device()).view({1, -1, 1, 1, 1});
}
// WanPipeline's normalisation of raw latents [B, z_dim, t, h, w]: (z - mean) * (1 / std), and its
// inverse before decoding, latents / (1 / std) + mean (the same operations in the same order).
inline at::Tensor normalize_latents(const WanVaeConfig& c, const at::Tensor& z) {
  return (z - latents_mean(c, z)) * (1.0 / latents_std(c, z));
}
inline at::Tensor denormalize_latents(const WanVaeConfig& c, const at::Tensor& latents) {
  return latents / (1.0 / latents_std(c, latents)) + latents_mean(c, latents);
}

// The typed VAE service: pixels [B, 3, T, H, W] (or [B, 3, H, W]) in [-1, 1] -> mean, logvar
// (raw); raw (already denormalised) latents -> sample [B, 3, T', H, W]. forward() with
// {"vae_call": "encode"}: sample -> mean, logvar and patchified_x (what the encoder sees);
// {"vae_call": "decode"}: latents -> sample and decoder_output (before unpatchify and clamp).
// The Wan 2.2 VAE also loads from the original release's names (Wan2.2_VAE.pth), renamed one
// tensor at a time.
class VaeComponent : public family::ModelComponent<AutoencoderKLWan, WanVaeConfig>, public sdk::Vae {
 public:
  VaeComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {"AutoencoderKLWan", "is this a Wan VAE checkpoint?"}) {}

  sdk::NamedTensors forward(const sdk::NamedTensors& in, const std::string& options) override {
    const auto o = family::parse_json(options, "AutoencoderKLWan options");
    const auto call = o.value("vae_call", std::string());
    try {
      if (call == "encode") {
        at::Tensor patchified;
        const auto d = model_->encode(sdk::get(in, "sample"), &patchified);
        return {{"mean", d.mean}, {"logvar", d.logvar}, {"patchified_x", patchified}};
      }
      if (call == "decode") {
        at::Tensor raw;
        auto sample = model_->decode(sdk::get(in, "latents"), &raw);
        return {{"sample", std::move(sample)}, {"decoder_output", raw}};
      }
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("AutoencoderKLWan ") + call + ": " + e.what());
    }
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "AutoencoderKLWan forward: options need \"vae_call\": \"encode\" or \"decode\"");
  }

  void load_weights(const sdk::NamedTensors& weights, bool strict) override {
    if (!model_->config().is_residual) return ModelComponent::load_weights(weights, strict);
    sdk::NamedTensors renamed;
    renamed.reserve(weights.size());
    for (const auto& [name, t] : weights) renamed.emplace_back(wan22_vae_diffusers_name(name), t);
    ModelComponent::load_weights(renamed, strict);
  }

  sdk::Posterior encode(const at::Tensor& pixels) override {
    try {
      const auto d = model_->encode(pixels);
      return {d.mean, d.logvar};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("AutoencoderKLWan encode: ") + e.what());
    }
  }
  at::Tensor decode(const at::Tensor& latents, const sdk::NamedTensors& extra) override {
    if (!extra.empty())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "AutoencoderKLWan decode: takes no '" + extra.front().first + "' tensor");
    try {
      return model_->decode(latents);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("AutoencoderKLWan decode: ") + e.what());
    }
  }
};

}  // namespace yeto::wan
