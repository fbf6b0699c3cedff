// AutoencoderKLLTXVideo (LTX-Video's causal video VAE) in LibTorch, with the Diffusers v0.33.1
// parameter names (encoder.*, decoder.*, latents_mean, latents_std).
//
// Covered: the 0.9.0 layout (LTXVideoDownBlock3D encoder, plain decoder) and the 0.9.1 decoder
// (timestep conditioning, residual upsampling with upsample_factor, per-channel noise
// injection). Not covered: the 0.9.5+ encoder blocks (LTXVideo095DownBlock3D with spatial /
// temporal downsamplers), refused by name; tiled and frame-wise encode/decode (memory savers
// that Diffusers leaves off by default).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "ltx_transformer.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::ltx {

struct LtxVaeConfig {
  std::int64_t in_channels = 3;
  std::int64_t out_channels = 3;
  std::int64_t latent_channels = 128;
  std::vector<std::int64_t> block_out_channels = {128, 256, 512, 512};
  std::vector<std::string> down_block_types = {"LTXVideoDownBlock3D", "LTXVideoDownBlock3D", "LTXVideoDownBlock3D",
                                               "LTXVideoDownBlock3D"};
  std::vector<std::int64_t> decoder_block_out_channels = {128, 256, 512, 512};
  std::vector<std::int64_t> layers_per_block = {4, 3, 3, 3, 4};
  std::vector<std::int64_t> decoder_layers_per_block = {4, 3, 3, 3, 4};
  std::vector<bool> spatio_temporal_scaling = {true, true, true, false};
  std::vector<bool> decoder_spatio_temporal_scaling = {true, true, true, false};
  std::vector<bool> decoder_inject_noise = {false, false, false, false, false};
  std::vector<std::string> downsample_type = {"conv", "conv", "conv", "conv"};
  std::vector<bool> upsample_residual = {false, false, false, false};
  std::vector<std::int64_t> upsample_factor = {1, 1, 1, 1};
  bool timestep_conditioning = false;
  std::int64_t patch_size = 4;
  std::int64_t patch_size_t = 1;
  double resnet_norm_eps = 1e-6;
  double scaling_factor = 1.0;
  bool encoder_causal = true;
  bool decoder_causal = false;
  std::int64_t spatial_compression_ratio = 0;   // 0 (config null): patch_size * 2^(scaling blocks)
  std::int64_t temporal_compression_ratio = 0;  // 0 (config null): patch_size_t * 2^(scaling blocks)

  std::int64_t spatial_ratio() const;
  std::int64_t temporal_ratio() const;

  // Reads a Diffusers config.json object. Throws std::invalid_argument naming the key for a wrong
  // type, inconsistent list lengths or a block type this implementation does not have.
  static LtxVaeConfig from_json(const nlohmann::json& j);
};

// LTXVideoCausalConv3d: spatial zero padding k/2; in time the first frame is repeated k-1 times
// in front (causal) or the first/last frames (k-1)/2 times on each side. Child `conv`.
class CausalConv3dImpl : public torch::nn::Module {
 public:
  CausalConv3dImpl(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, bool causal);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv3d conv{nullptr};
  std::int64_t kernel;
  bool causal;
};
TORCH_MODULE(CausalConv3d);

class LtxResnetBlockImpl : public torch::nn::Module {
 public:
  LtxResnetBlockImpl(std::int64_t in, std::int64_t out, double eps, bool causal, bool inject_noise,
                     bool timestep_conditioning);
  // temb: [B, 4 * in, 1, 1, 1] when timestep-conditioned.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb = {});
  nn::RMSNorm norm1{nullptr}, norm2{nullptr};
  CausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
  nn::LayerNorm norm3{nullptr};
  at::Tensor per_channel_scale1, per_channel_scale2, scale_shift_table;
};
TORCH_MODULE(LtxResnetBlock);

class LtxUpsamplerImpl : public torch::nn::Module {
 public:
  LtxUpsamplerImpl(std::int64_t in, bool causal, bool residual, std::int64_t upscale_factor);
  at::Tensor forward(const at::Tensor& x);
  CausalConv3d conv{nullptr};
  bool residual;
  std::int64_t upscale_factor;
};
TORCH_MODULE(LtxUpsampler);

// Down, mid and up blocks keep Diffusers' children (resnets, downsamplers, conv_out, conv_in,
// upsamplers, time_embedder).
class LtxDownBlockImpl : public torch::nn::Module {
 public:
  LtxDownBlockImpl(std::int64_t in, std::int64_t out, std::int64_t layers, double eps, bool scale, bool causal);
  at::Tensor forward(at::Tensor x);
  torch::nn::ModuleList resnets{nullptr}, downsamplers{nullptr};
  LtxResnetBlock conv_out{nullptr};
};
TORCH_MODULE(LtxDownBlock);

class LtxMidBlockImpl : public torch::nn::Module {
 public:
  LtxMidBlockImpl(std::int64_t channels, std::int64_t layers, double eps, bool causal, bool inject_noise,
                  bool timestep_conditioning);
  at::Tensor forward(at::Tensor x, const at::Tensor& temb = {});
  torch::nn::ModuleList resnets{nullptr};
  LtxTimestepEmbeddings time_embedder{nullptr};
};
TORCH_MODULE(LtxMidBlock);

class LtxUpBlockImpl : public torch::nn::Module {
 public:
  LtxUpBlockImpl(std::int64_t in, std::int64_t out, std::int64_t layers, double eps, bool scale, bool causal,
                 bool inject_noise, bool timestep_conditioning, bool residual, std::int64_t upscale_factor);
  at::Tensor forward(at::Tensor x, const at::Tensor& temb = {});
  LtxResnetBlock conv_in{nullptr};
  torch::nn::ModuleList upsamplers{nullptr}, resnets{nullptr};
  LtxTimestepEmbeddings time_embedder{nullptr};
};
TORCH_MODULE(LtxUpBlock);

class LtxEncoderImpl : public torch::nn::Module {
 public:
  explicit LtxEncoderImpl(const LtxVaeConfig& c);
  // [B, C, F, H, W] -> [B, 2 * latent_channels, F', H', W'] (mean, then the log-variance channel repeated).
  at::Tensor forward(const at::Tensor& x);
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  LtxMidBlock mid_block{nullptr};
  std::int64_t patch_size, patch_size_t;
};
TORCH_MODULE(LtxEncoder);

class LtxDecoderImpl : public torch::nn::Module {
 public:
  explicit LtxDecoderImpl(const LtxVaeConfig& c);
  at::Tensor forward(const at::Tensor& z, const at::Tensor& temb = {});
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  LtxMidBlock mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  LtxTimestepEmbeddings time_embedder{nullptr};
  at::Tensor scale_shift_table, timestep_scale_multiplier;
  std::int64_t patch_size, patch_size_t;
};
TORCH_MODULE(LtxDecoder);

struct LtxLatentDist {
  at::Tensor mean, logvar;  // logvar clamped to [-30, 20] as DiagonalGaussianDistribution
};

class AutoencoderKLLTXVideoImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLLTXVideoImpl(const LtxVaeConfig& config);
  // x [B, C, F, H, W] in [-1, 1].
  LtxLatentDist encode(const at::Tensor& x);
  // z [B, latent_channels, F, H, W] (raw, already denormalised); temb [B] decode timestep, needed
  // exactly when the decoder is timestep-conditioned.
  at::Tensor decode(const at::Tensor& z, const at::Tensor& temb = {});
  const LtxVaeConfig& config() const { return config_; }

  LtxEncoder encoder{nullptr};
  LtxDecoder decoder{nullptr};
  at::Tensor latents_mean, latents_std;  // persistent buffers [latent_channels]

 private:
  LtxVaeConfig config_;
};
TORCH_MODULE(AutoencoderKLLTXVideo);

}  // namespace yeto::ltx
