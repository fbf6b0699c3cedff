// The Hunyuan3D-2.1 ShapeVAE decode path in LibTorch: latents / scale_factor -> post_kl -> a
// self-attention transformer -> geo_decoder, which evaluates the occupancy field at query points
// (Fourier-embedded, projected, cross-attending to the decoded latents), and the
// VanillaVolumeDecoder that samples it on a dense grid for surface extraction.
//
// Conventions of hy3dshape/models/autoencoders kept here:
//   - self-attention: c_qkv(x) viewed as [B, N, heads, 3 * head_dim] and split into q | k | v per
//     head; cross-attention: c_kv(data) viewed as [B, M, heads, 2 * head_dim] split into k | v;
//     q_norm / k_norm are LayerNorm(head_dim, eps 1e-6); block LayerNorms eps 1e-6, the decoder's
//     ln_post eps 1e-5; MLPs c_fc -> GELU (erf) -> c_proj;
//   - FourierEmbedder (include_input, logspace frequencies 2^0 .. 2^(num_freqs - 1), times pi with
//     include_pi): cat([x, sin(x f), cos(x f)]) with each coordinate's frequencies together;
//   - the grid: per axis linspace(-bounds, bounds, R + 1) in float32, meshgrid 'ij', points
//     [(R + 1)^3, 3] with z fastest; grid_logits[b, i, j, k] is the field at (x_i, y_j, z_k).
//
// Parameter names are the upstream state-dict names (post_kl, transformer.resblocks.N.*,
// geo_decoder.*). The point-cloud encoder (encoder.*, pre_kl) is not part of the decode path and
// not implemented; the component skips those tensors when loading a full checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "hunyuan3d_dit.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::hunyuan3d {

struct ShapeVAEConfig {
  std::int64_t num_latents = 4096;
  std::int64_t embed_dim = 64;
  std::int64_t width = 1024;
  std::int64_t heads = 16;
  std::int64_t num_decoder_layers = 16;
  std::int64_t num_freqs = 8;
  bool include_pi = false;
  bool qkv_bias = false;
  bool qk_norm = true;
  double scale_factor = 1.0039506158752403;
  std::int64_t geo_decoder_mlp_expand_ratio = 4;
  bool geo_decoder_ln_post = true;

  std::int64_t fourier_dim() const { return 3 * (2 * num_freqs + 1); }
  // Reads the upstream ShapeVAE config (the release's config.yaml `params`, or config.json).
  // geo_decoder_downsample_ratio other than 1 is refused. Throws std::invalid_argument naming the key.
  static ShapeVAEConfig from_json(const nlohmann::json& j);
};

// The dense query grid of VanillaVolumeDecoder: [(R + 1)^3, 3] float32.
at::Tensor dense_grid_points(double bounds, std::int64_t octree_resolution);

// attn: c_qkv (self) or c_q + c_kv (cross), c_proj, attention.{q_norm, k_norm}.
class ShapeAttentionImpl : public torch::nn::Module {
 public:
  ShapeAttentionImpl(const ShapeVAEConfig& c, bool cross);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& data = {});
  nn::Linear c_qkv{nullptr}, c_q{nullptr}, c_kv{nullptr}, c_proj{nullptr};
  std::shared_ptr<torch::nn::Module> attention;
  Norm q_norm{nullptr}, k_norm{nullptr};
  std::int64_t heads, head_dim;
  bool cross;
};
TORCH_MODULE(ShapeAttention);

// mlp: c_fc -> GELU -> c_proj.
class ShapeMlpImpl : public torch::nn::Module {
 public:
  ShapeMlpImpl(std::int64_t width, std::int64_t ratio);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(ShapeMlp);

// ResidualAttentionBlock (ln_1, attn, ln_2, mlp) or, with cross, ResidualCrossAttentionBlock
// (ln_1 on the queries, ln_2 on the data, attn, ln_3, mlp).
class ShapeBlockImpl : public torch::nn::Module {
 public:
  ShapeBlockImpl(const ShapeVAEConfig& c, bool cross, std::int64_t mlp_ratio);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& data = {});
  Norm ln_1{nullptr}, ln_2{nullptr}, ln_3{nullptr};
  ShapeAttention attn{nullptr};
  ShapeMlp mlp{nullptr};
  bool cross;
};
TORCH_MODULE(ShapeBlock);

class ShapeVAEDecoderImpl : public torch::nn::Module {
 public:
  explicit ShapeVAEDecoderImpl(const ShapeVAEConfig& config);

  // latents [B, num_latents, embed_dim] already divided by scale_factor -> [B, num_latents, width].
  at::Tensor decode(const at::Tensor& latents);
  // geo_decoder: the field at `queries` [B, Q, 3] given decoded latents -> [B, Q, 1].
  at::Tensor query(const at::Tensor& queries, const at::Tensor& decoded);
  // VanillaVolumeDecoder: the field on dense_grid_points(bounds, resolution), in chunks of
  // `num_chunks` points -> [B, R + 1, R + 1, R + 1].
  at::Tensor grid_logits(const at::Tensor& decoded, double bounds, std::int64_t octree_resolution,
                         std::int64_t num_chunks);

  const ShapeVAEConfig& config() const { return config_; }

  nn::Linear post_kl{nullptr};
  std::shared_ptr<torch::nn::Module> transformer, geo_decoder;
  torch::nn::ModuleList resblocks{nullptr};
  nn::Linear query_proj{nullptr}, output_proj{nullptr};
  ShapeBlock cross_attn_decoder{nullptr};
  Norm ln_post{nullptr};  // null without geo_decoder_ln_post

 private:
  ShapeVAEConfig config_;
};
TORCH_MODULE(ShapeVAEDecoder);

}  // namespace yeto::hunyuan3d
