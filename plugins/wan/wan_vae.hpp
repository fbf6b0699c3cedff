// AutoencoderKLWan (the Wan 2.1 causal 3D VAE) in LibTorch, with Diffusers' parameter names.
//
// Video is encoded causally in chunks of 1, 4, 4, ... frames and decoded one latent frame at a
// time, each causal convolution keeping the last two frames of the previous chunk (Diffusers'
// feature cache), so T frames map to 1 + (T - 1) / 4 latent frames and back to 1 + 4 (t - 1).
// The decoder clamps its output to [-1, 1] as upstream. Only the Wan 2.1 layout is served
// (the Wan 2.2 TI2V VAE's residual blocks and patchify are refused by config key).
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
  std::int64_t z_dim = 16;
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};
  std::int64_t num_res_blocks = 2;
  std::vector<double> attn_scales;
  std::vector<bool> temperal_downsample = {false, true, true};
  std::vector<double> latents_mean;  // z_dim values
  std::vector<double> latents_std;

  // Frames of a clip the causal VAE can encode exactly: 1 + 4k (the temporal factor is
  // 2^(number of temporal downsamples)).
  std::int64_t temporal_factor() const;
  std::int64_t spatial_factor() const;  // 2^(len(dim_mult) - 1)

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

// WanResample: "upsample2d", "upsample3d", "downsample2d", "downsample3d".
class WanResampleImpl : public torch::nn::Module {
 public:
  WanResampleImpl(std::int64_t dim, std::string mode);
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
  at::Tensor forward(const at::Tensor& x, FeatureCache& cache);
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
  // [B, z_dim, 1 + (T - 1) / 4, H / 8, W / 8].
  WanLatentDist encode(const at::Tensor& x);
  // Raw latents [B, z_dim, t, h, w] -> [B, 3, 1 + 4 (t - 1), 8h, 8w], clamped to [-1, 1].
  at::Tensor decode(const at::Tensor& z);
  const WanVaeConfig& config() const { return config_; }

  WanEncoder3d encoder{nullptr};
  WanDecoder3d decoder{nullptr};
  CausalConv3d quant_conv{nullptr}, post_quant_conv{nullptr};

 private:
  WanVaeConfig config_;
};
TORCH_MODULE(AutoencoderKLWan);

}  // namespace yeto::wan
