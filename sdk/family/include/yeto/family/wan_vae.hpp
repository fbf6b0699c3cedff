// AutoencoderKLWan (the Wan 2.1 causal 3D VAE and the Wan 2.2 TI2V-5B one) in LibTorch, with
// Diffusers' parameter names.
//
// Video is encoded causally in chunks of 1, 4, 4, ... frames and decoded one latent frame at a
// time, each causal convolution keeping the last two frames of the previous chunk (Diffusers'
// feature cache), so T frames map to 1 + (T - 1) / 4 latent frames and back to 1 + 4 (t - 1).
// The decoder clamps its output to [-1, 1] as upstream.
//
// The Wan 2.2 layout (`is_residual`, `patch_size` 2, `decoder_base_dim`): pixels are patchified
// 2x2 into 12 channels (channel c * 4 + w_off * 2 + h_off) before the encoder and unpatchified
// after the decoder; every encoder level is a residual down block whose shortcut is AvgDown3D
// (space / time offsets folded into channels, then averaged in groups), every decoder level a
// residual up block (num_res_blocks + 1 resnets, an upsampler that keeps the width) whose shortcut
// is DupUp3D (channels repeated, then unfolded; the first chunk drops its first factor_t - 1
// frames); the decoder's widths follow decoder_base_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace yeto::wan {

struct WanVaeConfig {
  std::int64_t base_dim = 96;
  std::int64_t decoder_base_dim = 96;  // null in config.json: base_dim
  std::int64_t z_dim = 16;
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};
  std::int64_t num_res_blocks = 2;
  std::vector<double> attn_scales;
  std::vector<bool> temperal_downsample = {false, true, true};
  std::vector<double> latents_mean;  // z_dim values
  std::vector<double> latents_std;
  bool is_residual = false;      // Wan 2.2: residual down / up blocks with AvgDown3D / DupUp3D
  std::int64_t in_channels = 3;  // the encoder's input channels: pixel channels x patch_size^2
  std::int64_t out_channels = 3;  // the decoder's output channels, likewise
  std::int64_t patch_size = 1;   // null in config.json: 1 (no patchify)

  // Frames of a clip the causal VAE can encode exactly: 1 + 4k (the temporal factor is
  // 2^(number of temporal downsamples)).
  std::int64_t temporal_factor() const;
  std::int64_t spatial_factor() const;  // 2^(len(dim_mult) - 1) x patch_size

  static WanVaeConfig from_json(const nlohmann::json& j);
};

// The per-chunk causal feature cache: for each causal convolution in call order, the frames
// the next chunk is padded with ("rep": the first chunk of a temporal upsampler, which the next
// chunk pads with zeros).
struct FeatureCache {
  std::vector<at::Tensor> feat;
  std::vector<bool> rep;
  std::size_t idx = 0;
  void reset() {
    feat.clear();
    rep.clear();
    idx = 0;
  }
  void ensure(std::size_t i) {
    if (feat.size() <= i) {
      feat.resize(i + 1);
      rep.resize(i + 1, false);
    }
  }
};

// Conv3d with causal (front-only) temporal padding; parameters `weight`, `bias`.
class CausalConv3dImpl : public torch::nn::Module {
 public:
  // Kernel (kt, ks, ks), stride (st, 1, 1), padding (pt, ps, ps) as nn.Conv3d's arguments.
  CausalConv3dImpl(std::int64_t in, std::int64_t out, std::int64_t kt, std::int64_t ks, std::int64_t st = 1,
                   std::int64_t pt = 0, std::int64_t ps = 0);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cache = {});
  at::Tensor weight, bias;
  std::vector<std::int64_t> stride, padding;
};
TORCH_MODULE(CausalConv3d);

// WanRMS_norm: F.normalize over channels * sqrt(dim) * gamma.
class WanRMSNormImpl : public torch::nn::Module {
 public:
  WanRMSNormImpl(std::int64_t dim, bool images);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor gamma;
  double scale;
};
TORCH_MODULE(WanRMSNorm);

class WanResidualBlockImpl : public torch::nn::Module {
 public:
  WanResidualBlockImpl(std::int64_t in, std::int64_t out);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
  WanRMSNorm norm1{nullptr}, norm2{nullptr};
  CausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
};
TORCH_MODULE(WanResidualBlock);

// Single-head spatial self attention per frame (to_qkv, proj: 1x1 Conv2d).
class WanAttentionBlockImpl : public torch::nn::Module {
 public:
  explicit WanAttentionBlockImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& x);
  WanRMSNorm norm{nullptr};
  torch::nn::Conv2d to_qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(WanAttentionBlock);

// WanResample: "upsample2d", "upsample3d", "downsample2d", "downsample3d". An upsampler's 2D
// conv maps dim to upsample_out_dim (Wan 2.1: dim / 2; the Wan 2.2 residual up blocks: dim).
class WanResampleImpl : public torch::nn::Module {
 public:
  WanResampleImpl(std::int64_t dim, std::string mode, std::int64_t upsample_out_dim = -1);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
  std::string mode;
  torch::nn::Conv2d conv{nullptr};  // resample.1
  CausalConv3d time_conv{nullptr};
};
TORCH_MODULE(WanResample);

class WanMidBlockImpl : public torch::nn::Module {
 public:
  explicit WanMidBlockImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
  torch::nn::ModuleList resnets{nullptr}, attentions{nullptr};
};
TORCH_MODULE(WanMidBlock);

// Wan 2.2's encoder level: resnets, an optional downsampler, plus AvgDown3D(block input).
class WanResidualDownBlockImpl : public torch::nn::Module {
 public:
  WanResidualDownBlockImpl(std::int64_t in, std::int64_t out, std::int64_t num_res_blocks, bool temporal, bool down);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
  torch::nn::ModuleList resnets{nullptr};
  WanResample downsampler{nullptr};
  std::int64_t in_dim, out_dim, factor_t, factor_s;
};
TORCH_MODULE(WanResidualDownBlock);

// Wan 2.2's decoder level: num_res_blocks + 1 resnets, an optional upsampler, plus DupUp3D(block
// input) when it upsamples.
class WanResidualUpBlockImpl : public torch::nn::Module {
 public:
  WanResidualUpBlockImpl(std::int64_t in, std::int64_t out, std::int64_t num_res_blocks, bool temporal, bool up);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache, bool first_chunk);
  torch::nn::ModuleList resnets{nullptr};
  WanResample upsampler{nullptr};
  std::int64_t in_dim, out_dim, factor_t, factor_s;
};
TORCH_MODULE(WanResidualUpBlock);

// Diffusers' patchify / unpatchify of [B, C, T, H, W] (channel c * p^2 + w_off * p + h_off).
at::Tensor wan_patchify(const at::Tensor& x, std::int64_t p);
at::Tensor wan_unpatchify(const at::Tensor& x, std::int64_t p);

class WanEncoder3dImpl : public torch::nn::Module {
 public:
  explicit WanEncoder3dImpl(const WanVaeConfig& c);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  WanMidBlock mid_block{nullptr};
  WanRMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanEncoder3d);

class WanDecoder3dImpl : public torch::nn::Module {
 public:
  explicit WanDecoder3dImpl(const WanVaeConfig& c);
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache, bool first_chunk = false);
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  WanMidBlock mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  WanRMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanDecoder3d);

struct WanLatentDist {
  at::Tensor mean, logvar;  // logvar clamped to [-30, 20]
};

class AutoencoderKLWanImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLWanImpl(const WanVaeConfig& config);
  // x [B, 3, T, H, W] in [-1, 1] (a 4-D image batch is one frame) -> the raw latent distribution
  // [B, z_dim, 1 + (T - 1) / 4, H / s, W / s] (s = spatial_factor()). `patchified`, when given,
  // receives what the encoder sees (x itself without a patch size).
  WanLatentDist encode(const at::Tensor& x, at::Tensor* patchified = nullptr);
  // Raw latents [B, z_dim, t, h, w] -> [B, 3, 1 + 4 (t - 1), s h, s w], clamped to [-1, 1].
  // `decoder_output`, when given, receives the decoder's output before unpatchify and clamp.
  at::Tensor decode(const at::Tensor& z, at::Tensor* decoder_output = nullptr);
  const WanVaeConfig& config() const { return config_; }

  WanEncoder3d encoder{nullptr};
  WanDecoder3d decoder{nullptr};
  CausalConv3d quant_conv{nullptr}, post_quant_conv{nullptr};

 private:
  WanVaeConfig config_;
};
TORCH_MODULE(AutoencoderKLWan);

// The Diffusers name of a Wan 2.2 VAE tensor named as the original release stores it
// (`Wan2.2_VAE.pth` of Wan-Video/Wan2.2, `WanVAE_` of wan/modules/vae2_2.py): conv1 / conv2 ->
// quant_conv / post_quant_conv, encoder / decoder conv1 -> conv_in, middle.0 / .2 -> mid_block
// resnets, middle.1 -> the mid-block attention, head.0 / .2 -> norm_out / conv_out,
// encoder.downsamples.<i>.downsamples.<j> -> down_blocks.<i>.resnets.<j> (or .downsampler for
// the resample), decoder.upsamples.<i>.upsamples.<j> -> up_blocks.<i>.resnets.<j> (or
// .upsampler), and inside a resnet residual.0 / .2 / .3 / .6 -> norm1 / conv1 / norm2 / conv2,
// shortcut -> conv_shortcut (Diffusers' convert_vae_22). A name already in the Diffusers layout
// comes back unchanged.
std::string wan22_vae_diffusers_name(const std::string& original);

}  // namespace yeto::wan
