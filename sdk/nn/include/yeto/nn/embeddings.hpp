// Positional and conditioning embeddings as Diffusers computes them.
//
// Rotary: rope_1d() is get_1d_rotary_pos_embed(use_real=True); rope_nd() concatenates one table
// per position axis (Flux's FluxPosEmbed for 3 axes, 2D image grids, 3D video grids);
// apply_rotary_emb() rotates [B, H, L, D] queries/keys with those tables.
// Timesteps: timestep_embedding() is get_timestep_embedding(); the modules below keep the
// Diffusers child names (linear_1, linear_2, time_proj, timestep_embedder, guidance_embedder,
// text_embedder).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/activations.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::nn {

struct RopeTables {
  at::Tensor cos;  // [L, dim], float32
  at::Tensor sin;
};

// Frequencies 1 / theta^(2i/dim) (computed in float64 by default, as Diffusers on CPU/CUDA),
// outer product with `positions` [L]. repeat_interleave_real: each frequency appears twice in a
// row (c0 c0 c1 c1 ..., Flux/LTX/Wan); otherwise the table is [cos, cos] concatenated (the
// "half split" layout).
RopeTables rope_1d(std::int64_t dim, const at::Tensor& positions, double theta = 10000.0,
                   bool repeat_interleave_real = true, double linear_factor = 1.0, double ntk_factor = 1.0,
                   bool float64 = true);

// One rope_1d per axis of `ids` [L, n_axes] with axes_dim[i] channels each, concatenated on the
// channel dimension (sum(axes_dim) = head dim).
RopeTables rope_nd(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dim, double theta = 10000.0,
                   bool repeat_interleave_real = true);

// x [B, H, L, D] (or [B, L, H, D] with heads_second = false); cos/sin [L, D]. interleaved: pairs
// (x0, x1), (x2, x3), ... are rotated (use_real_unbind_dim = -1); otherwise the two halves
// (use_real_unbind_dim = -2). Computed in float32, returned in x's dtype.
at::Tensor apply_rotary_emb(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool interleaved = true, bool heads_second = true);

// Sinusoidal timestep embedding [N, dim] of timesteps [N].
at::Tensor timestep_embedding(const at::Tensor& timesteps, std::int64_t dim, bool flip_sin_to_cos = false,
                              double downscale_freq_shift = 1.0, double scale = 1.0, double max_period = 10000.0);

// Diffusers `Timesteps` (no parameters).
class TimestepsImpl : public torch::nn::Module {
 public:
  TimestepsImpl(std::int64_t num_channels, bool flip_sin_to_cos, double downscale_freq_shift, double scale = 1.0);
  at::Tensor forward(const at::Tensor& timesteps);
  std::int64_t num_channels;
  bool flip_sin_to_cos;
  double downscale_freq_shift;
  double scale;
};
TORCH_MODULE(Timesteps);

// Diffusers `TimestepEmbedding`: linear_1 -> act -> linear_2.
class TimestepEmbeddingImpl : public torch::nn::Module {
 public:
  TimestepEmbeddingImpl(std::int64_t in_channels, std::int64_t time_embed_dim, Activation act = Activation::silu,
                        std::int64_t out_dim = 0, bool sample_proj_bias = true);
  at::Tensor forward(const at::Tensor& sample);
  Linear linear_1{nullptr}, linear_2{nullptr};
  Activation act;
};
TORCH_MODULE(TimestepEmbedding);

// Diffusers `PixArtAlphaTextProjection`: linear_1 -> act_1 -> linear_2 (pooled text projection).
class TextProjectionImpl : public torch::nn::Module {
 public:
  TextProjectionImpl(std::int64_t in_features, std::int64_t hidden_size, std::int64_t out_features = 0,
                     Activation act = Activation::gelu_tanh);
  at::Tensor forward(const at::Tensor& caption);
  Linear linear_1{nullptr}, linear_2{nullptr};
  Activation act;
};
TORCH_MODULE(TextProjection);

// SD3's CombinedTimestepTextProjEmbeddings and, with guidance, Flux's
// CombinedTimestepGuidanceTextProjEmbeddings: Timesteps(256, flip, shift 0) -> TimestepEmbedding,
// plus the pooled-text projection (silu); guidance_embedder only when `with_guidance`.
class CombinedTimestepEmbeddingsImpl : public torch::nn::Module {
 public:
  CombinedTimestepEmbeddingsImpl(std::int64_t embedding_dim, std::int64_t pooled_projection_dim, bool with_guidance);
  at::Tensor forward(const at::Tensor& timestep, const at::Tensor& pooled_projection,
                     const at::Tensor& guidance = {});
  Timesteps time_proj{nullptr};
  TimestepEmbedding timestep_embedder{nullptr}, guidance_embedder{nullptr};
  TextProjection text_embedder{nullptr};
};
TORCH_MODULE(CombinedTimestepEmbeddings);

}  // namespace yeto::nn
