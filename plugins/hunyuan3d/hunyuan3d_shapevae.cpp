#include "hunyuan3d_shapevae.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::hunyuan3d {

ShapeVAEConfig ShapeVAEConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, "ShapeVAE config");
  ShapeVAEConfig c;
  c.num_latents = in.integer("num_latents", c.num_latents);
  c.embed_dim = in.integer("embed_dim", c.embed_dim);
  c.width = in.integer("width", c.width);
  c.heads = in.integer("heads", c.heads);
  c.num_decoder_layers = in.integer("num_decoder_layers", c.num_decoder_layers);
  c.num_freqs = in.integer("num_freqs", c.num_freqs);
  c.include_pi = in.boolean("include_pi", c.include_pi);
  c.qkv_bias = in.boolean("qkv_bias", c.qkv_bias);
  c.qk_norm = in.boolean("qk_norm", c.qk_norm);
  c.scale_factor = in.number("scale_factor", c.scale_factor);
  c.geo_decoder_mlp_expand_ratio = in.integer("geo_decoder_mlp_expand_ratio", c.geo_decoder_mlp_expand_ratio);
  c.geo_decoder_ln_post = in.boolean("geo_decoder_ln_post", c.geo_decoder_ln_post);
  for (const char* k : {"num_latents", "embed_dim", "width", "heads", "geo_decoder_mlp_expand_ratio"})
    if (in.integer(k, 1) <= 0) in.fail(k, "must be positive");
  if (c.num_decoder_layers < 0) in.fail("num_decoder_layers", "must not be negative");
  if (c.num_freqs < 0) in.fail("num_freqs", "must not be negative");
  if (c.width % c.heads != 0) in.fail("width", "is not a multiple of 'heads'");
  if (!(c.scale_factor > 0.0)) in.fail("scale_factor", "must be positive");
  if (in.integer("geo_decoder_downsample_ratio", 1) != 1)
    in.fail("geo_decoder_downsample_ratio", "must be 1 (the Hunyuan3D-2.1 ShapeVAE's value)");
  return c;
}

at::Tensor dense_grid_points(double bounds, std::int64_t resolution) {
  if (resolution < 1) throw std::invalid_argument("octree_resolution must be at least 1");
  // np.linspace(-bounds, bounds, R + 1, dtype=float32): computed in float64, then float32.
  const auto axis = at::linspace(-bounds, bounds, resolution + 1, at::kDouble).to(at::kFloat);
  const auto grids = at::meshgrid({axis, axis, axis}, "ij");
  return at::stack({grids[0], grids[1], grids[2]}, -1).reshape({-1, 3});
}

// ---- blocks ------------------------------------------------------------------------------------

ShapeAttentionImpl::ShapeAttentionImpl(const ShapeVAEConfig& c, bool cross_)
    : heads(c.heads), head_dim(c.width / c.heads), cross(cross_) {
  if (cross) {
    c_q = register_module("c_q", nn::Linear(c.width, c.width, c.qkv_bias));
    c_kv = register_module("c_kv", nn::Linear(c.width, 2 * c.width, c.qkv_bias));
  } else {
    c_qkv = register_module("c_qkv", nn::Linear(c.width, 3 * c.width, c.qkv_bias));
  }
  c_proj = register_module("c_proj", nn::Linear(c.width, c.width, true));
  if (c.qk_norm) {
    attention = register_module("attention", std::make_shared<torch::nn::Module>());
    q_norm = attention->register_module("q_norm", Norm(head_dim, "layer", 1e-6));
    k_norm = attention->register_module("k_norm", Norm(head_dim, "layer", 1e-6));
  }
}

at::Tensor ShapeAttentionImpl::forward(const at::Tensor& x, const at::Tensor& data) {
  const auto b = x.size(0), n = x.size(1);
  at::Tensor q, k, v;
  if (cross) {
    const auto m = data.size(1);
    q = c_q(x).view({b, n, heads, head_dim});
    const auto kv = c_kv(data).view({b, m, heads, 2 * head_dim}).split(head_dim, -1);
    k = kv[0];
    v = kv[1];
  } else {
    const auto qkv = c_qkv(x).view({b, n, heads, 3 * head_dim}).split(head_dim, -1);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  }
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  const auto o = nn::attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  return c_proj(o.transpose(1, 2).reshape({b, n, heads * head_dim}));
}

ShapeMlpImpl::ShapeMlpImpl(std::int64_t width, std::int64_t ratio) {
  c_fc = register_module("c_fc", nn::Linear(width, width * ratio, true));
  c_proj = register_module("c_proj", nn::Linear(width * ratio, width, true));
}

at::Tensor ShapeMlpImpl::forward(const at::Tensor& x) { return c_proj(at::gelu(c_fc(x))); }

ShapeBlockImpl::ShapeBlockImpl(const ShapeVAEConfig& c, bool cross_, std::int64_t mlp_ratio) : cross(cross_) {
  ln_1 = register_module("ln_1", Norm(c.width, "layer", 1e-6));
  ln_2 = register_module("ln_2", Norm(c.width, "layer", 1e-6));
  if (cross) ln_3 = register_module("ln_3", Norm(c.width, "layer", 1e-6));
  attn = register_module("attn", ShapeAttention(c, cross));
  mlp = register_module("mlp", ShapeMlp(c.width, mlp_ratio));
}

at::Tensor ShapeBlockImpl::forward(const at::Tensor& x_in, const at::Tensor& data) {
  if (cross) {
    const auto x = x_in + attn(ln_1(x_in), ln_2(data));
    return x + mlp(ln_3(x));
  }
  const auto x = x_in + attn(ln_1(x_in));
  return x + mlp(ln_2(x));
}

// ---- the decoder -------------------------------------------------------------------------------

ShapeVAEDecoderImpl::ShapeVAEDecoderImpl(const ShapeVAEConfig& c) : config_(c) {
  post_kl = register_module("post_kl", nn::Linear(c.embed_dim, c.width, true));
  transformer = register_module("transformer", std::make_shared<torch::nn::Module>());
  resblocks = transformer->register_module("resblocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_decoder_layers; ++i) resblocks->push_back(ShapeBlock(c, false, 4));
  geo_decoder = register_module("geo_decoder", std::make_shared<torch::nn::Module>());
  query_proj = geo_decoder->register_module("query_proj", nn::Linear(c.fourier_dim(), c.width, true));
  cross_attn_decoder =
      geo_decoder->register_module("cross_attn_decoder", ShapeBlock(c, true, c.geo_decoder_mlp_expand_ratio));
  if (c.geo_decoder_ln_post) ln_post = geo_decoder->register_module("ln_post", Norm(c.width, "layer", 1e-5));
  output_proj = geo_decoder->register_module("output_proj", nn::Linear(c.width, 1, true));
}

at::Tensor ShapeVAEDecoderImpl::decode(const at::Tensor& latents) {
  const auto& c = config_;
  if (latents.dim() != 3 || latents.size(2) != c.embed_dim)
    throw std::invalid_argument("ShapeVAE decode: latents must be [B, N, " + std::to_string(c.embed_dim) + "], got " +
                                c10::str(latents.sizes()));
  auto x = post_kl(latents.to(post_kl->weight.device(), post_kl->compute_dtype()));
  for (std::size_t i = 0; i < resblocks->size(); ++i) x = resblocks[i]->as<ShapeBlockImpl>()->forward(x);
  return x;
}

at::Tensor ShapeVAEDecoderImpl::query(const at::Tensor& queries, const at::Tensor& decoded) {
  const auto& c = config_;
  // FourierEmbedder: frequencies 2^0 .. 2^(num_freqs - 1) (times pi with include_pi).
  auto freqs = at::pow(2.0, at::arange(c.num_freqs, at::kFloat));
  if (c.include_pi) freqs = freqs * M_PI;
  const auto q = queries.to(at::kFloat);
  const auto xf = (q.unsqueeze(-1) * freqs.to(q.device())).flatten(-2);  // [.., 3 * num_freqs]
  const auto embedded = at::cat({q, xf.sin(), xf.cos()}, -1).to(decoded.scalar_type());
  auto x = cross_attn_decoder(query_proj(embedded), decoded);
  if (ln_post) x = ln_post(x);
  return output_proj(x);
}

at::Tensor ShapeVAEDecoderImpl::grid_logits(const at::Tensor& decoded, double bounds, std::int64_t resolution,
                                            std::int64_t num_chunks) {
  if (num_chunks < 1) throw std::invalid_argument("num_chunks must be at least 1");
  const auto points = dense_grid_points(bounds, resolution).to(decoded.device());
  const auto b = decoded.size(0);
  std::vector<at::Tensor> parts;
  for (std::int64_t start = 0; start < points.size(0); start += num_chunks) {
    const auto chunk = points.narrow(0, start, std::min(num_chunks, points.size(0) - start));
    parts.push_back(query(chunk.unsqueeze(0).expand({b, -1, -1}), decoded));
  }
  const auto side = resolution + 1;
  return at::cat(parts, 1).reshape({b, side, side, side});
}

}  // namespace yeto::hunyuan3d
