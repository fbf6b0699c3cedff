#include "yeto/nn/embeddings.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace yeto::nn {

RopeTables rope_1d(std::int64_t dim, const at::Tensor& positions, double theta, bool repeat_interleave_real,
                   double linear_factor, double ntk_factor, bool float64) {
  if (dim <= 0 || dim % 2 != 0) {
    throw std::invalid_argument("rope_1d: dim must be positive and even (got " + std::to_string(dim) + ")");
  }
  const auto fdt = float64 ? at::kDouble : at::kFloat;
  theta = theta * ntk_factor;
  auto idx = at::arange(0, dim, 2, positions.options().dtype(fdt)).narrow(0, 0, dim / 2);
  auto freqs = 1.0 / at::pow(theta, idx / static_cast<double>(dim)) / linear_factor;
  auto pos = positions.to(fdt);
  auto f = at::outer(pos, freqs);  // [L, dim/2]
  RopeTables t;
  if (repeat_interleave_real) {
    t.cos = f.cos().repeat_interleave(2, 1).to(at::kFloat);
    t.sin = f.sin().repeat_interleave(2, 1).to(at::kFloat);
  } else {
    t.cos = at::cat({f.cos(), f.cos()}, -1).to(at::kFloat);
    t.sin = at::cat({f.sin(), f.sin()}, -1).to(at::kFloat);
  }
  return t;
}

RopeTables rope_nd(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dim, double theta,
                   bool repeat_interleave_real) {
  if (ids.dim() != 2 || ids.size(1) != static_cast<std::int64_t>(axes_dim.size())) {
    throw std::invalid_argument("rope_nd: ids must be [L, " + std::to_string(axes_dim.size()) + "]");
  }
  std::vector<at::Tensor> cs, ss;
  // float64 tables except on devices without float64 support (MPS), as Diffusers does.
  const bool f64 = !ids.is_mps();
  for (std::size_t i = 0; i < axes_dim.size(); ++i) {
    auto t = rope_1d(axes_dim[i], ids.select(1, static_cast<std::int64_t>(i)), theta, repeat_interleave_real, 1.0,
                     1.0, f64);
    cs.push_back(t.cos);
    ss.push_back(t.sin);
  }
  return {at::cat(cs, -1), at::cat(ss, -1)};
}

at::Tensor apply_rotary_emb(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved,
                            bool heads_second) {
  auto c = cos;
  auto s = sin;
  if (heads_second) {
    c = c.unsqueeze(0).unsqueeze(0);  // [1, 1, L, D]
    s = s.unsqueeze(0).unsqueeze(0);
  } else {
    c = c.unsqueeze(0).unsqueeze(2);  // [1, L, 1, D]
    s = s.unsqueeze(0).unsqueeze(2);
  }
  auto sizes = x.sizes().vec();
  const auto d = sizes.back();
  at::Tensor rotated;
  if (interleaved) {
    sizes.back() = d / 2;
    sizes.push_back(2);
    auto pairs = x.reshape(sizes);
    auto re = pairs.select(-1, 0);
    auto im = pairs.select(-1, 1);
    rotated = at::stack({-im, re}, -1).flatten(-2);
  } else {
    auto re = x.narrow(-1, 0, d / 2);
    auto im = x.narrow(-1, d / 2, d / 2);
    rotated = at::cat({-im, re}, -1);
  }
  return (x.to(at::kFloat) * c + rotated.to(at::kFloat) * s).to(x.scalar_type());
}

at::Tensor timestep_embedding(const at::Tensor& timesteps, std::int64_t dim, bool flip_sin_to_cos,
                              double downscale_freq_shift, double scale, double max_period) {
  if (timesteps.dim() != 1) {
    throw std::invalid_argument("timestep_embedding: timesteps must be 1-D");
  }
  const auto half = dim / 2;
  auto exponent = at::arange(0, half, timesteps.options().dtype(at::kFloat)) * (-std::log(max_period));
  exponent = exponent / (static_cast<double>(half) - downscale_freq_shift);
  auto emb = at::exp(exponent);
  emb = timesteps.unsqueeze(1).to(at::kFloat) * emb.unsqueeze(0);
  emb = scale * emb;
  emb = at::cat({at::sin(emb), at::cos(emb)}, -1);
  if (flip_sin_to_cos) {
    emb = at::cat({emb.narrow(1, half, half), emb.narrow(1, 0, half)}, -1);
  }
  if (dim % 2 == 1) {
    emb = at::constant_pad_nd(emb, {0, 1, 0, 0});
  }
  return emb;
}

TimestepsImpl::TimestepsImpl(std::int64_t n, bool flip, double shift, double s)
    : num_channels(n), flip_sin_to_cos(flip), downscale_freq_shift(shift), scale(s) {}

at::Tensor TimestepsImpl::forward(const at::Tensor& timesteps) {
  return timestep_embedding(timesteps, num_channels, flip_sin_to_cos, downscale_freq_shift, scale);
}

TimestepEmbeddingImpl::TimestepEmbeddingImpl(std::int64_t in_channels, std::int64_t time_embed_dim, Activation a,
                                             std::int64_t out_dim, bool sample_proj_bias)
    : act(a) {
  linear_1 = register_module("linear_1", Linear(in_channels, time_embed_dim, sample_proj_bias));
  linear_2 =
      register_module("linear_2", Linear(time_embed_dim, out_dim > 0 ? out_dim : time_embed_dim, sample_proj_bias));
}

at::Tensor TimestepEmbeddingImpl::forward(const at::Tensor& sample) {
  return linear_2(apply_activation(act, linear_1(sample)));
}

TextProjectionImpl::TextProjectionImpl(std::int64_t in_features, std::int64_t hidden_size, std::int64_t out_features,
                                       Activation a)
    : act(a) {
  linear_1 = register_module("linear_1", Linear(in_features, hidden_size, true));
  linear_2 = register_module("linear_2", Linear(hidden_size, out_features > 0 ? out_features : hidden_size, true));
}

at::Tensor TextProjectionImpl::forward(const at::Tensor& caption) {
  return linear_2(apply_activation(act, linear_1(caption)));
}

CombinedTimestepEmbeddingsImpl::CombinedTimestepEmbeddingsImpl(std::int64_t embedding_dim,
                                                               std::int64_t pooled_projection_dim,
                                                               bool with_guidance) {
  time_proj = register_module("time_proj", Timesteps(256, true, 0.0));
  timestep_embedder = register_module("timestep_embedder", TimestepEmbedding(256, embedding_dim));
  if (with_guidance) {
    guidance_embedder = register_module("guidance_embedder", TimestepEmbedding(256, embedding_dim));
  }
  text_embedder = register_module("text_embedder",
                                  TextProjection(pooled_projection_dim, embedding_dim, 0, Activation::silu));
}

at::Tensor CombinedTimestepEmbeddingsImpl::forward(const at::Tensor& timestep, const at::Tensor& pooled_projection,
                                                   const at::Tensor& guidance) {
  const auto dtype = pooled_projection.scalar_type();
  auto temb = timestep_embedder(time_proj(timestep).to(dtype));
  if (guidance_embedder) {
    if (!guidance.defined()) {
      throw std::invalid_argument("CombinedTimestepEmbeddings: this model has a guidance embedding; pass guidance");
    }
    temb = temb + guidance_embedder(time_proj(guidance).to(dtype));
  }
  return temb + text_embedder(pooled_projection);
}

}  // namespace yeto::nn
