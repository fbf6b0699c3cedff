// The 2D building blocks of Diffusers' AutoencoderKL (resnet.py, unet_2d_blocks.py, vae.py), with
// Diffusers' child names so named_parameters() equals the checkpoint names
// (`encoder.down_blocks.0.resnets.1.conv1.weight`, `decoder.mid_block.attentions.0.to_q.weight`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/activations.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::models {

// ResnetBlock2D without timestep conditioning: norm1 -> act -> conv1 -> norm2 -> act -> conv2,
// plus conv_shortcut (1x1) when the channel count changes; output_scale_factor 1.
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(std::int64_t in_channels, std::int64_t out_channels, std::int64_t groups, double eps,
                    nn::Activation act);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
  nn::Activation act;
};
TORCH_MODULE(ResnetBlock2D);

// Downsample2D(use_conv=True, padding=0): pad (0, 1, 0, 1), then a stride-2 3x3 conv `conv`.
class Downsample2DImpl : public torch::nn::Module {
 public:
  explicit Downsample2DImpl(std::int64_t channels);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Downsample2D);

// Upsample2D(use_conv=True): nearest x2, then a 3x3 conv `conv`.
class Upsample2DImpl : public torch::nn::Module {
 public:
  explicit Upsample2DImpl(std::int64_t channels);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Upsample2D);

// DownEncoderBlock2D / UpDecoderBlock2D: `resnets` then `downsamplers.0` / `upsamplers.0`.
class ResnetStackImpl : public torch::nn::Module {
 public:
  enum class Kind { down, up };
  ResnetStackImpl(Kind kind, std::int64_t num_layers, std::int64_t in_channels, std::int64_t out_channels,
                  bool resample, std::int64_t groups, double eps, nn::Activation act);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList samplers{nullptr};  // registered as downsamplers / upsamplers
  Kind kind;
};
TORCH_MODULE(ResnetStack);

// UNetMidBlock2D (no temb): resnets.0, attentions.0 (optional), resnets.1.
class MidBlock2DImpl : public torch::nn::Module {
 public:
  MidBlock2DImpl(std::int64_t channels, std::int64_t groups, double eps, nn::Activation act, bool add_attention);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList attentions{nullptr};
};
TORCH_MODULE(MidBlock2D);

struct CoderOptions {
  std::int64_t in_channels = 3;
  std::int64_t out_channels = 3;
  std::vector<std::int64_t> block_out_channels{64};
  std::int64_t layers_per_block = 1;
  std::int64_t norm_num_groups = 32;
  nn::Activation act = nn::Activation::silu;
  bool mid_block_add_attention = true;
};

// vae.Encoder with double_z: conv_in, down_blocks, mid_block, conv_norm_out, act, conv_out
// (2 x out_channels: mean and logvar).
class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const CoderOptions& o);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  MidBlock2D mid_block{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
  nn::Activation act;
};
TORCH_MODULE(Encoder);

// vae.Decoder: conv_in, mid_block, up_blocks (reversed channels, layers_per_block + 1 resnets),
// conv_norm_out, act, conv_out.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const CoderOptions& o);
  at::Tensor forward(const at::Tensor& z);
  torch::nn::Conv2d conv_in{nullptr}, conv_out{nullptr};
  MidBlock2D mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
  nn::Activation act;
};
TORCH_MODULE(Decoder);

}  // namespace yeto::models
