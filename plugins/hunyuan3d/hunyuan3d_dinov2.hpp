// The image conditioner of Hunyuan3D-2.1 (hy3dshape DinoImageEncoder): Hugging Face transformers'
// Dinov2Model with its parameter names, and the conditioner's torchvision preprocessing.
//
// Conventions (README-dinov2.md, transformers 4.46):
//   - patch embedding Conv2d(3, D, kernel = stride = patch) (pixels beyond a multiple of the patch
//     are ignored), tokens row-major over the grid; cat([cls_token, patches]) + the position table;
//     patches where bool_masked_pos is true are replaced by mask_token first;
//   - the position table is used as stored iff the patch count is g x g and H == W; otherwise its
//     patch rows are resized as [1, D, g, g] with bicubic interpolation (align_corners false, no
//     antialias) to (H / patch, W / patch), in float32;
//   - pre-norm layers: h += lambda1 * dense(attn(norm1(h))); h += lambda2 * mlp(norm2(h)); attention
//     head i on channels [i hd, (i + 1) hd), softmax(q k^T / sqrt(hd)) v; MLP fc2(gelu(fc1)) with the
//     exact GELU, or SwiGLU (weights_in -> x1, x2 halves; weights_out(silu(x1) * x2), hidden
//     (int(int(D * mlp_ratio) * 2 / 3) + 7) / 8 * 8); LayerNorm eps layer_norm_eps everywhere;
//     last_hidden_state = layernorm(h), pooler_output = its token 0;
//   - preprocessing: x = (image + 1) / 2; the shorter edge resized to S, the longer to
//     int(S * long / short) (an unchanged size is kept as is), bilinear with antialias; centre crop
//     S x S at Python's round((n - S) / 2) (ties to even); ImageNet mean / std.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace yeto::hunyuan3d {

struct Dinov2Config {
  std::int64_t hidden_size = 1024;
  std::int64_t num_hidden_layers = 24;
  std::int64_t num_attention_heads = 16;
  double mlp_ratio = 4.0;
  std::int64_t patch_size = 14;
  std::int64_t image_size = 518;
  std::int64_t num_channels = 3;
  double layer_norm_eps = 1e-6;
  bool qkv_bias = true;
  double layerscale_value = 1.0;
  bool use_swiglu_ffn = false;
  std::int64_t grid() const { return image_size / patch_size; }
  std::int64_t mlp_hidden() const;
  // Reads a transformers Dinov2Config (config.json); hidden_act must be gelu. Throws
  // std::invalid_argument naming the key.
  static Dinov2Config from_json(const nlohmann::json& j);
};

class Dinov2LayerImpl : public torch::nn::Module {
 public:
  explicit Dinov2LayerImpl(const Dinov2Config& c);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, dense{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};  // or weights_in / weights_out with SwiGLU
  at::Tensor lambda1, lambda2;
  std::int64_t heads, head_dim;
  bool swiglu;
};
TORCH_MODULE(Dinov2Layer);

struct Dinov2Output {
  at::Tensor last_hidden_state;                // [B, 1 + patches, D]
  std::vector<at::Tensor> hidden_states;       // embeddings, then each layer's output (no final norm)
  at::Tensor position_table;                   // [1, 1 + patches, D] as added
};

class Dinov2ModelImpl : public torch::nn::Module {
 public:
  explicit Dinov2ModelImpl(const Dinov2Config& config);
  // pixel_values [B, C, H, W]; bool_masked_pos [B, patches] (optional).
  Dinov2Output forward(const at::Tensor& pixel_values, const at::Tensor& bool_masked_pos = {});
  // The position table for an (H / patch) x (W / patch) grid of an H x W input.
  at::Tensor position_table(std::int64_t patches, std::int64_t height, std::int64_t width) const;
  const Dinov2Config& config() const { return config_; }

  at::Tensor cls_token, mask_token, position_embeddings;
  torch::nn::Conv2d projection{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm layernorm{nullptr};

 private:
  Dinov2Config config_;
};
TORCH_MODULE(Dinov2Model);

// hy3dshape's DinoImageEncoder as a repository's conditioner: {"config": {Dinov2Config},
// "image_size": S (the preprocessing size, 518), "use_cls_token": true}; its Dinov2Model is the
// submodule `model` (parameter names model.embeddings..., as upstream's state dict).
struct DinoImageEncoderConfig {
  Dinov2Config model;
  std::int64_t image_size = 518;
  bool use_cls_token = true;
  static DinoImageEncoderConfig from_json(const nlohmann::json& j);
};

class DinoImageEncoderImpl : public torch::nn::Module {
 public:
  explicit DinoImageEncoderImpl(const DinoImageEncoderConfig& config);
  // image [B, 3, H, W] in [-1, 1] -> the conditioning tokens [B, (S / patch)^2 (+ 1), D].
  at::Tensor forward(const at::Tensor& image);
  const DinoImageEncoderConfig& config() const { return config_; }
  Dinov2Model model{nullptr};

 private:
  DinoImageEncoderConfig config_;
};
TORCH_MODULE(DinoImageEncoder);

// The conditioner's preprocessing of `image` [B, 3, H, W] in [-1, 1] to [B, 3, S, S]; `resized`
// (when given) receives the resized image in [0, 1] before the crop.
at::Tensor dino_preprocess(const at::Tensor& image, std::int64_t image_size, bool antialias = true,
                           at::Tensor* resized = nullptr);

}  // namespace yeto::hunyuan3d
