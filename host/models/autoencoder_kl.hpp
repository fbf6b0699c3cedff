// Diffusers' AutoencoderKL (2D): SD 1.x/2.x/SDXL (4 latent channels, quant convs), SD3/Flux
// (16 channels, no quant convs, shift_factor) and PixArt configs, read from config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "models/vae_blocks.hpp"

namespace yeto::models {

struct AutoencoderKLConfig {
  std::int64_t in_channels = 3;
  std::int64_t out_channels = 3;
  std::int64_t latent_channels = 4;
  std::vector<std::int64_t> block_out_channels{64};
  std::vector<std::string> down_block_types{"DownEncoderBlock2D"};
  std::vector<std::string> up_block_types{"UpDecoderBlock2D"};
  std::int64_t layers_per_block = 1;
  std::int64_t norm_num_groups = 32;
  std::string act_fn = "silu";
  std::int64_t sample_size = 32;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;
  std::vector<double> latents_mean;  // empty when null
  std::vector<double> latents_std;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  bool force_upcast = true;

  // Reads a Diffusers config.json. Throws yeto::Error (bad_input) naming the key for a wrong
  // type or an unsupported block type.
  static AutoencoderKLConfig from_json(const nlohmann::json& j, const std::string& where = "config.json");
  // 2^(number of blocks - 1): pixels per latent along each side.
  std::int64_t downscale_factor() const;
};

// encode(x).latent_dist: logvar clamped to [-30, 20], std = exp(logvar / 2).
struct DiagonalGaussian {
  at::Tensor mean;
  at::Tensor logvar;
  at::Tensor std;
  at::Tensor var;
  // mean + std * eps with eps drawn from `generator` (a seeded CPU stream, as
  // torch.Generator("cpu").manual_seed(s) with diffusers' randn_tensor) in the mean's dtype,
  // then moved to the mean's device.
  at::Tensor sample(std::optional<at::Generator> generator = std::nullopt) const;
  at::Tensor mode() const { return mean; }
  // KL divergence to N(0, I), summed over C, H, W (per batch element).
  at::Tensor kl() const;
};

struct TilingOptions {
  bool enabled = false;
  std::int64_t tile_sample_min_size = 0;  // 0: config sample_size
  double overlap_factor = 0.25;
};

class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(const AutoencoderKLConfig& config);

  DiagonalGaussian encode(const at::Tensor& x);
  at::Tensor decode(const at::Tensor& z);

  // Tiled encode/decode (Diffusers' tiled_encode / tiled_decode): overlapping tiles blended
  // linearly. encode/decode use them automatically, as Diffusers does, when tiling is enabled
  // and the input is larger than one tile.
  DiagonalGaussian tiled_encode(const at::Tensor& x);
  at::Tensor tiled_decode(const at::Tensor& z);
  void enable_tiling(const TilingOptions& options = {true, 0, 0.25});
  void disable_tiling();
  std::int64_t tile_sample_min_size() const;
  std::int64_t tile_latent_min_size() const;

  // Pipeline conventions: latents = (sample - shift_factor) * scaling_factor, and back.
  at::Tensor scale_latents(const at::Tensor& sample_latents) const;
  at::Tensor unscale_latents(const at::Tensor& latents) const;

  const AutoencoderKLConfig& config() const { return config_; }

  Encoder encoder{nullptr};
  Decoder decoder{nullptr};
  torch::nn::Conv2d quant_conv{nullptr}, post_quant_conv{nullptr};

 private:
  at::Tensor encode_moments(const at::Tensor& x);
  AutoencoderKLConfig config_;
  TilingOptions tiling_;
};
TORCH_MODULE(AutoencoderKL);

DiagonalGaussian diagonal_gaussian(const at::Tensor& moments);

// The analytic "pixel codec" weights for an AutoencoderKL config (init-model presets whose VAE
// says "weights": "pixel-codec"): the encoder averages each 2^(blocks-1) x 2^(blocks-1) block of
// the image into latent channels 0..in_channels-1 (the other latent channels are 0, the log
// variance is -30, so a sample is the mean), and the decoder repeats every latent pixel over its
// block. No training is needed, and decoded latents show exactly what a denoiser generated, which
// a randomly initialised VAE turns into noise. Every residual branch of the resnets and the
// mid-block attention is switched off (zero output projection); the two GroupNorms outside the
// residual branches (conv_norm_out) see the signal next to its negation and a large constant pair,
// so their mean is 0 and their variance is set by the constant (relative error below 2e-4 for
// pixel values in [-1, 1]). Requires norm_num_groups 1, in_channels = out_channels,
// latent_channels >= in_channels and every block_out_channels entry >= 2 * in_channels + 2;
// throws yeto::Error (bad_input) naming `where` and the key otherwise. `params` are the
// component's parameters (state-dict names and CPU float tensors), overwritten in place.
void set_pixel_codec_weights(const AutoencoderKLConfig& config, std::vector<std::pair<std::string, at::Tensor>>& params,
                             const std::string& where);

// Checkpoint name -> current Diffusers name for legacy VAE attention blocks
// (`mid_block.attentions.0.query.weight` -> `...to_q.weight`, key/value/proj_attn likewise).
std::string autoencoder_kl_rename(const std::string& name);

}  // namespace yeto::models
