#include "ltx_transformer.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/activations.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::ltx {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("LTXVideoTransformer3DModel config: " + what);
}

// LTX's apply_rotary_emb on [B, S, C]: channel pairs (x0, x1) rotate to (-x1, x0), in float32.
at::Tensor rotate(const at::Tensor& x, const nn::RopeTables& rope) {
  const auto pairs = x.unflatten(2, {-1, 2});
  const auto real = pairs.select(-1, 0), imag = pairs.select(-1, 1);
  const auto rotated = at::stack({-imag, real}, -1).flatten(2);
  return (x.to(at::kFloat) * rope.cos + rotated.to(at::kFloat) * rope.sin).to(x.scalar_type());
}

}  // namespace

LtxTransformerConfig LtxTransformerConfig::from_json(const json& j) {
  const family::ConfigReader in(j, "LTXVideoTransformer3DModel config");
  LtxTransformerConfig c;
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.out_channels = in.integer("out_channels", c.in_channels);
  c.patch_size = in.integer("patch_size", c.patch_size);
  c.patch_size_t = in.integer("patch_size_t", c.patch_size_t);
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = in.integer("attention_head_dim", c.attention_head_dim);
  c.cross_attention_dim = in.integer("cross_attention_dim", c.cross_attention_dim);
  c.num_layers = in.integer("num_layers", c.num_layers);
  c.activation_fn = in.string("activation_fn", c.activation_fn);
  c.qk_norm = in.string("qk_norm", c.qk_norm);
  c.norm_elementwise_affine = in.boolean("norm_elementwise_affine", c.norm_elementwise_affine);
  c.norm_eps = in.number("norm_eps", c.norm_eps);
  c.caption_channels = in.integer("caption_channels", c.caption_channels);
  c.attention_bias = in.boolean("attention_bias", c.attention_bias);
  c.attention_out_bias = in.boolean("attention_out_bias", c.attention_out_bias);
  for (const auto* k : {"in_channels", "out_channels", "patch_size", "patch_size_t", "num_attention_heads",
                        "attention_head_dim", "cross_attention_dim", "caption_channels"})
    if (in.integer(k, 1) <= 0) bad(std::string("'") + k + "' must be positive");
  if (c.num_layers < 0) bad("'num_layers' must not be negative");
  if (c.qk_norm != "rms_norm_across_heads")
    bad("'qk_norm' is '" + c.qk_norm + "'; LTX-Video uses rms_norm_across_heads (the only value upstream accepts)");
  if (c.activation_fn != "gelu-approximate")
    bad("'activation_fn' is '" + c.activation_fn + "'; only gelu-approximate (LTX-Video's) is implemented");
  if (c.norm_elementwise_affine)
    bad("'norm_elementwise_affine' true is not implemented (LTX-Video checkpoints use false)");
  if (c.cross_attention_dim != c.inner_dim())
    bad("'cross_attention_dim' (" + std::to_string(c.cross_attention_dim) +
        ") must equal num_attention_heads * attention_head_dim (" + std::to_string(c.inner_dim()) +
        "): the caption projection maps captions to the inner dimension");
  return c;
}

nn::RopeTables ltx_rope(std::int64_t dim, std::int64_t num_frames, std::int64_t height, std::int64_t width,
                        const std::array<double, 3>& scale, std::int64_t patch_size, std::int64_t patch_size_t) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const auto grids = at::meshgrid({at::arange(num_frames, opts), at::arange(height, opts), at::arange(width, opts)},
                                  "ij");
  // Same float32 operation order as upstream: coordinate * scale * patch / base.
  const auto f = grids[0].mul(scale[0]).mul(static_cast<double>(patch_size_t)).div(20.0);
  const auto h = grids[1].mul(scale[1]).mul(static_cast<double>(patch_size)).div(2048.0);
  const auto w = grids[2].mul(scale[2]).mul(static_cast<double>(patch_size)).div(2048.0);
  const auto grid = at::stack({f.flatten(), h.flatten(), w.flatten()}, 1);  // [N, 3]
  const std::int64_t n = dim / 6;
  auto freqs = at::pow(10000.0, at::linspace(0.0, 1.0, n, opts));
  freqs = freqs * M_PI / 2.0;
  freqs = freqs * (grid.unsqueeze(-1) * 2 - 1);  // [N, 3, n]
  freqs = freqs.transpose(-1, -2).flatten(1);    // [N, 3n], frequency-major
  auto cos = freqs.cos().repeat_interleave(2, -1);
  auto sin = freqs.sin().repeat_interleave(2, -1);
  const std::int64_t pad = dim % 6;
  if (pad != 0) {
    cos = at::cat({at::ones({cos.size(0), pad}, opts), cos}, -1);
    sin = at::cat({at::zeros({sin.size(0), pad}, opts), sin}, -1);
  }
  return {cos, sin};
}

LtxAttentionImpl::LtxAttentionImpl(std::int64_t query_dim, std::int64_t context_dim, std::int64_t h,
                                   std::int64_t head_dim, bool bias, bool out_bias)
    : heads(h) {
  const auto inner = h * head_dim;
  norm_q = register_module("norm_q", nn::RMSNorm(inner, 1e-5, true));
  norm_k = register_module("norm_k", nn::RMSNorm(inner, 1e-5, true));
  to_q = register_module("to_q", nn::Linear(query_dim, inner, bias));
  to_k = register_module("to_k", nn::Linear(context_dim, inner, bias));
  to_v = register_module("to_v", nn::Linear(context_dim, inner, bias));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(nn::Linear(inner, query_dim, out_bias));
  to_out->push_back(std::make_shared<torch::nn::Module>());  // to_out.1: dropout(0), no parameters
}

at::Tensor LtxAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& mask,
                                     const nn::RopeTables* rope) {
  const auto& ctx = context.defined() ? context : x;
  auto q = norm_q(to_q(x));
  auto k = norm_k(to_k(ctx));
  auto v = to_v(ctx);
  if (rope) {
    q = rotate(q, *rope);
    k = rotate(k, *rope);
  }
  at::Tensor m;
  if (mask.defined()) m = mask.unsqueeze(1).to(q.scalar_type());  // [B, 1, 1, T]
  auto out = nn::attention(nn::split_heads(q, heads), nn::split_heads(k, heads), nn::split_heads(v, heads), m);
  out = nn::merge_heads(out).to(q.scalar_type());
  return to_out->ptr<nn::LinearImpl>(0)->forward(out);
}

LtxTransformerBlockImpl::LtxTransformerBlockImpl(const LtxTransformerConfig& c) {
  const auto dim = c.inner_dim();
  norm1 = register_module("norm1", nn::RMSNorm(dim, c.norm_eps, false));
  attn1 = register_module("attn1", LtxAttention(dim, dim, c.num_attention_heads, c.attention_head_dim,
                                                c.attention_bias, c.attention_out_bias));
  norm2 = register_module("norm2", nn::RMSNorm(dim, c.norm_eps, false));
  attn2 = register_module("attn2", LtxAttention(dim, c.cross_attention_dim, c.num_attention_heads,
                                                c.attention_head_dim, c.attention_bias, c.attention_out_bias));
  ff = register_module("ff", nn::FeedForward(dim));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
}

at::Tensor LtxTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& temb,
                                            const nn::RopeTables& rope, const at::Tensor& mask) {
  const auto b = x.size(0);
  const auto ada = scale_shift_table.unsqueeze(0).unsqueeze(0) + temb.reshape({b, temb.size(1), 6, -1});
  const auto p = ada.unbind(2);  // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  auto h = x;
  const auto normed = norm1(h) * (1 + p[1]) + p[0];
  h = h + attn1->forward(normed, at::Tensor(), at::Tensor(), &rope) * p[2];
  h = h + attn2->forward(h, context, mask, nullptr);
  const auto normed2 = norm2(h) * (1 + p[4]) + p[3];
  return h + ff(normed2) * p[5];
}

LtxTimestepEmbeddingsImpl::LtxTimestepEmbeddingsImpl(std::int64_t dim) {
  time_proj = register_module("time_proj", nn::Timesteps(256, true, 0.0));
  timestep_embedder = register_module("timestep_embedder", nn::TimestepEmbedding(256, dim));
}

at::Tensor LtxTimestepEmbeddingsImpl::forward(const at::Tensor& timestep, at::ScalarType dtype) {
  return timestep_embedder(time_proj(timestep).to(dtype));
}

LtxAdaLayerNormSingleImpl::LtxAdaLayerNormSingleImpl(std::int64_t dim) {
  emb = register_module("emb", LtxTimestepEmbeddings(dim));
  linear = register_module("linear", nn::Linear(dim, 6 * dim, true));
}

std::pair<at::Tensor, at::Tensor> LtxAdaLayerNormSingleImpl::forward(const at::Tensor& timestep, at::ScalarType dtype) {
  const auto embedded = emb(timestep, dtype);
  return {linear(at::silu(embedded)), embedded};
}

LtxVideoTransformer3DModelImpl::LtxVideoTransformer3DModelImpl(const LtxTransformerConfig& c) : config_(c) {
  const auto dim = c.inner_dim();
  proj_in = register_module("proj_in", nn::Linear(c.in_channels, dim, true));
  time_embed = register_module("time_embed", LtxAdaLayerNormSingle(dim));
  caption_projection = register_module("caption_projection", nn::TextProjection(c.caption_channels, dim));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) transformer_blocks->push_back(LtxTransformerBlock(c));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({2, dim}) / std::sqrt(static_cast<double>(dim)));
  proj_out = register_module("proj_out", nn::Linear(dim, c.out_channels, true));
}

at::Tensor LtxVideoTransformer3DModelImpl::forward(const at::Tensor& hidden_states,
                                                   const at::Tensor& encoder_hidden_states, const at::Tensor& timestep,
                                                   const at::Tensor& encoder_attention_mask, std::int64_t num_frames,
                                                   std::int64_t height, std::int64_t width,
                                                   const std::array<double, 3>& rope_interpolation_scale) {
  if (hidden_states.dim() != 3 || hidden_states.size(2) != config_.in_channels)
    throw std::invalid_argument("LTXVideoTransformer3DModel: hidden_states must be [B, tokens, " +
                                std::to_string(config_.in_channels) + "], got " + c10::str(hidden_states.sizes()));
  if (num_frames * height * width != hidden_states.size(1))
    throw std::invalid_argument("LTXVideoTransformer3DModel: num_frames x height x width = " +
                                std::to_string(num_frames * height * width) + " but hidden_states has " +
                                std::to_string(hidden_states.size(1)) + " tokens");
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != hidden_states.size(0))
    throw std::invalid_argument("LTXVideoTransformer3DModel: encoder_hidden_states must be [B, T, " +
                                std::to_string(config_.caption_channels) + "] with the batch of hidden_states, got " +
                                c10::str(encoder_hidden_states.sizes()));
  const auto dim = config_.inner_dim();
  auto rope = ltx_rope(dim, num_frames, height, width, rope_interpolation_scale, config_.patch_size,
                       config_.patch_size_t);
  rope.cos = rope.cos.to(hidden_states.device());
  rope.sin = rope.sin.to(hidden_states.device());
  const auto dtype = hidden_states.scalar_type();
  at::Tensor mask;
  if (encoder_attention_mask.defined()) {
    if (encoder_attention_mask.dim() != 2 || encoder_attention_mask.size(0) != hidden_states.size(0) ||
        encoder_attention_mask.size(1) != encoder_hidden_states.size(1))
      throw std::invalid_argument("LTXVideoTransformer3DModel: encoder_attention_mask must be [B, T] = " +
                                  c10::str(encoder_hidden_states.sizes().slice(0, 2)) + ", got " +
                                  c10::str(encoder_attention_mask.sizes()));
    mask = ((1 - encoder_attention_mask.to(dtype)) * -10000.0).unsqueeze(1);  // [B, 1, T]
  }
  const auto b = hidden_states.size(0);
  auto h = proj_in(hidden_states);
  auto [temb, embedded] = time_embed(timestep.flatten(), h.scalar_type());
  temb = temb.view({b, -1, temb.size(-1)});
  embedded = embedded.view({b, -1, embedded.size(-1)});
  auto context = caption_projection(encoder_hidden_states).view({b, -1, dim});
  std::int64_t index = 0;
  for (const auto& m : *transformer_blocks) {
    auto* block = m->as<LtxTransformerBlockImpl>();
    h = run_block(
        index++,
        [block, rope, mask](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{block->forward(in[0], in[1], in[2], rope, mask)};
        },
        {h, context, temb})[0];
  }
  const auto ss = scale_shift_table.unsqueeze(0).unsqueeze(0) + embedded.unsqueeze(2);  // [B, 1, 2, dim]
  const auto shift = ss.select(2, 0), scale = ss.select(2, 1);
  h = at::layer_norm(h, {dim}, {}, {}, 1e-6);
  h = h * (1 + scale) + shift;
  return proj_out(h);
}

}  // namespace yeto::ltx
