#include "pixart_transformer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::pixart {
namespace {

using nlohmann::json;

// Diffusers' 1-D table: angles pos x omega in float64, [sin, cos].
at::Tensor sincos_1d(std::int64_t dim, const at::Tensor& pos) {
  auto omega = at::arange(dim / 2, at::kDouble) / (static_cast<double>(dim) / 2.0);
  omega = 1.0 / at::pow(10000.0, omega);
  const auto out = at::outer(pos.reshape({-1}).to(at::kDouble), omega);
  return at::cat({at::sin(out), at::cos(out)}, 1);
}

}  // namespace

PixArtTransformerConfig PixArtTransformerConfig::from_json(const json& j) {
  const family::ConfigReader in(j, "PixArtTransformer2DModel config");
  PixArtTransformerConfig c;
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = in.integer("attention_head_dim", c.attention_head_dim);
  in.require("in_channels");
  c.in_channels = in.integer("in_channels", c.in_channels);
  // out_channels: null means in_channels (no learned sigma); the class default is 8.
  c.out_channels = j.contains("out_channels") ? in.integer("out_channels", c.in_channels) : 8;
  c.num_layers = in.integer("num_layers", c.num_layers);
  c.cross_attention_dim = in.integer("cross_attention_dim", c.cross_attention_dim);
  c.attention_bias = in.boolean("attention_bias", c.attention_bias);
  in.require("sample_size", " (the latent width the model was trained at)");
  c.sample_size = in.integer("sample_size", c.sample_size);
  in.require("patch_size");
  c.patch_size = in.integer("patch_size", c.patch_size);
  const auto act = in.string("activation_fn", "gelu-approximate");
  if (act == "gelu-approximate")
    c.activation = nn::Activation::gelu_tanh;
  else if (act == "gelu")
    c.activation = nn::Activation::gelu;
  else
    in.fail("activation_fn",
            "is '" + act + "'; this implementation has the GELU feed-forwards (gelu-approximate, gelu)");
  if (!in.present("num_embeds_ada_norm"))
    in.fail("num_embeds_ada_norm", "cannot be null with norm_type ada_norm_single");
  const auto norm_type = in.string("norm_type", "ada_norm_single");
  if (norm_type != "ada_norm_single")
    in.fail("norm_type", "is '" + norm_type + "'; PixArtTransformer2DModel is implemented for ada_norm_single only");
  const auto attention_type = in.string("attention_type", "default");
  if (attention_type != "default")
    in.fail("attention_type", "is '" + attention_type + "'; only 'default' is implemented");
  if (in.boolean("only_cross_attention", false)) in.fail("only_cross_attention", "true is not implemented");
  if (in.boolean("double_self_attention", false)) in.fail("double_self_attention", "true is not implemented");
  c.norm_elementwise_affine = in.boolean("norm_elementwise_affine", c.norm_elementwise_affine);
  c.norm_eps = in.number("norm_eps", c.norm_eps);
  in.require("caption_channels", " (the T5 width the caption projection maps from)");
  c.caption_channels = in.integer("caption_channels", c.caption_channels);
  for (const char* k : {"num_attention_heads", "attention_head_dim", "in_channels", "num_layers", "cross_attention_dim",
                        "sample_size", "patch_size", "caption_channels"})
    if (in.integer(k, 1) <= 0) in.fail(k, "must be positive");
  if (c.out_channels <= 0) in.fail("out_channels", "must be positive");
  if (c.num_layers < 0) in.fail("num_layers", "must not be negative");
  c.interpolation_scale = in.present("interpolation_scale")
                              ? in.number("interpolation_scale", 1.0)
                              : static_cast<double>(std::max<std::int64_t>(c.sample_size / 64, 1));
  if (!(c.interpolation_scale > 0)) in.fail("interpolation_scale", "must be positive");
  c.use_additional_conditions = in.boolean("use_additional_conditions", c.sample_size == 128);
  if (c.cross_attention_dim != c.inner_dim())
    in.fail("cross_attention_dim", "is " + std::to_string(c.cross_attention_dim) +
                                       " but the caption projection gives num_attention_heads * attention_head_dim = " +
                                       std::to_string(c.inner_dim()) + " channels");
  if (c.inner_dim() % 4 != 0)
    in.fail("attention_head_dim", "times num_attention_heads must be divisible by 4 (2-D sin-cos table)");
  if (c.use_additional_conditions && c.inner_dim() % 3 != 0)
    in.fail("use_additional_conditions",
            "needs num_attention_heads * attention_head_dim divisible by 3 (resolution and aspect-ratio embeddings)");
  return c;
}

PixArtBlockImpl::PixArtBlockImpl(const PixArtTransformerConfig& c) {
  const auto dim = c.inner_dim();
  norm1 = register_module("norm1", nn::LayerNorm(dim, c.norm_eps, c.norm_elementwise_affine, true));
  nn::AttentionOptions o;
  o.query_dim = dim;
  o.heads = c.num_attention_heads;
  o.dim_head = c.attention_head_dim;
  o.bias = c.attention_bias;
  o.out_bias = true;
  attn1 = register_module("attn1", nn::Attention(o));
  norm2 = register_module("norm2", nn::LayerNorm(dim, c.norm_eps, c.norm_elementwise_affine, true));
  o.cross_attention_dim = c.cross_attention_dim;
  attn2 = register_module("attn2", nn::Attention(o));
  ff = register_module("ff", nn::FeedForward(dim, 4 * dim, dim, c.activation));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({6, dim}) / std::sqrt(static_cast<double>(dim)));
}

at::Tensor PixArtBlockImpl::forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& context_bias,
                                    const at::Tensor& timestep) {
  const auto b = x.size(0);
  const auto parts = (scale_shift_table.unsqueeze(0) + timestep.reshape({b, 6, -1})).chunk(6, 1);
  const auto &shift_msa = parts[0], &scale_msa = parts[1], &gate_msa = parts[2];
  const auto &shift_mlp = parts[3], &scale_mlp = parts[4], &gate_mlp = parts[5];

  auto h = x + gate_msa * attn1(norm1(x) * (1 + scale_msa) + shift_msa);
  // PixArt applies no norm before the cross-attention.
  h = h + attn2(h, context, context_bias);
  h = h + gate_mlp * ff(norm2(h) * (1 + scale_mlp) + shift_mlp);
  return h;
}

at::Tensor sincos_pos_embed_2d(std::int64_t dim, std::int64_t h, std::int64_t w, std::int64_t base_size,
                               double interpolation_scale) {
  // Coordinates in float32 as upstream (arange / (size / base_size) / interpolation_scale).
  const auto gh = at::arange(h, at::kFloat) / (static_cast<double>(h) / static_cast<double>(base_size)) /
                  interpolation_scale;
  const auto gw = at::arange(w, at::kFloat) / (static_cast<double>(w) / static_cast<double>(base_size)) /
                  interpolation_scale;
  // meshgrid(gw, gh, indexing="xy"): [h, w] grids; token k = row * w + col.
  const auto cols = gw.unsqueeze(0).expand({h, w});
  const auto rows = gh.unsqueeze(1).expand({h, w});
  return at::cat({sincos_1d(dim / 2, cols), sincos_1d(dim / 2, rows)}, 1).to(at::kFloat);
}

PixArtPatchEmbedImpl::PixArtPatchEmbedImpl(std::int64_t in_channels, std::int64_t dim_, std::int64_t patch,
                                           std::int64_t base, double interp)
    : dim(dim_), patch_size(patch), base_size(base), interpolation_scale(interp) {
  proj = register_module(
      "proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, dim_, patch).stride(patch).bias(true)));
}

at::Tensor PixArtPatchEmbedImpl::forward(const at::Tensor& latents) {
  const auto h = latents.size(2) / patch_size, w = latents.size(3) / patch_size;
  const auto x = proj(latents).flatten(2).transpose(1, 2);
  const auto pos = sincos_pos_embed_2d(dim, h, w, base_size, interpolation_scale).to(x.device()).unsqueeze(0);
  return (x + pos).to(latents.scalar_type());
}

AdaLayerNormSingleImpl::AdaLayerNormSingleImpl(std::int64_t dim, bool additional) : use_additional_conditions(additional) {
  emb = register_module("emb", std::make_shared<torch::nn::Module>());
  time_proj = emb->register_module("time_proj", nn::Timesteps(256, true, 0.0));
  timestep_embedder = emb->register_module("timestep_embedder", nn::TimestepEmbedding(256, dim));
  if (additional) {
    resolution_embedder = emb->register_module("resolution_embedder", nn::TimestepEmbedding(256, dim / 3));
    aspect_ratio_embedder = emb->register_module("aspect_ratio_embedder", nn::TimestepEmbedding(256, dim / 3));
  }
  linear = register_module("linear", nn::Linear(dim, 6 * dim, true));
}

std::pair<at::Tensor, at::Tensor> AdaLayerNormSingleImpl::forward(const at::Tensor& timestep,
                                                                  const at::Tensor& resolution,
                                                                  const at::Tensor& aspect_ratio, std::int64_t batch,
                                                                  at::ScalarType dtype) {
  auto e = timestep_embedder(time_proj(timestep).to(dtype));
  if (use_additional_conditions) {
    if (!resolution.defined() || !aspect_ratio.defined())
      throw std::invalid_argument(
          "PixArtTransformer2DModel: this checkpoint uses additional conditions (use_additional_conditions): pass "
          "resolution [B, 2] and aspect_ratio [B, 1]");
    if (resolution.numel() != 2 * batch || aspect_ratio.numel() != batch)
      throw std::invalid_argument("PixArtTransformer2DModel: resolution must be [" + std::to_string(batch) +
                                  ", 2] and aspect_ratio [" + std::to_string(batch) + ", 1], got " +
                                  c10::str(resolution.sizes()) + " and " + c10::str(aspect_ratio.sizes()));
    // additional_condition_proj is the same sinusoidal Timesteps(256, flip, 0) as time_proj.
    const auto r = resolution_embedder(time_proj(resolution.flatten()).to(dtype)).reshape({batch, -1});
    const auto a = aspect_ratio_embedder(time_proj(aspect_ratio.flatten()).to(dtype)).reshape({batch, -1});
    e = e + at::cat({r, a}, 1);
  }
  return {linear(at::silu(e)), e};
}

PixArtTransformer2DModelImpl::PixArtTransformer2DModelImpl(const PixArtTransformerConfig& c) : config_(c) {
  const auto dim = c.inner_dim();
  pos_embed = register_module("pos_embed", PixArtPatchEmbed(c.in_channels, dim, c.patch_size,
                                                            c.sample_size / c.patch_size, c.interpolation_scale));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) transformer_blocks->push_back(PixArtBlock(c));
  norm_out = register_module("norm_out", nn::LayerNorm(dim, 1e-6, false, false));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({2, dim}) / std::sqrt(static_cast<double>(dim)));
  proj_out = register_module("proj_out", nn::Linear(dim, c.patch_size * c.patch_size * c.out_channels, true));
  adaln_single = register_module("adaln_single", AdaLayerNormSingle(dim, c.use_additional_conditions));
  caption_projection = register_module("caption_projection", nn::TextProjection(c.caption_channels, dim));
}

at::Tensor PixArtTransformer2DModelImpl::forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                                 const at::Tensor& timestep, const at::Tensor& encoder_attention_mask,
                                                 const at::Tensor& resolution, const at::Tensor& aspect_ratio) {
  const auto& c = config_;
  const auto p = c.patch_size;
  if (hidden_states.dim() != 4 || hidden_states.size(1) != c.in_channels || hidden_states.size(2) % p != 0 ||
      hidden_states.size(3) % p != 0)
    throw std::invalid_argument("PixArtTransformer2DModel: hidden_states must be [B, " + std::to_string(c.in_channels) +
                                ", H, W] with H and W multiples of patch_size " + std::to_string(p) + ", got " +
                                c10::str(hidden_states.sizes()));
  const auto b = hidden_states.size(0);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != b ||
      encoder_hidden_states.size(2) != c.caption_channels)
    throw std::invalid_argument("PixArtTransformer2DModel: encoder_hidden_states must be [" + std::to_string(b) +
                                ", T, " + std::to_string(c.caption_channels) + "], got " +
                                c10::str(encoder_hidden_states.sizes()));
  at::Tensor t = timestep.reshape({-1});
  if (t.numel() == 1 && b > 1) t = t.expand({b});
  if (t.numel() != b)
    throw std::invalid_argument("PixArtTransformer2DModel: timestep must hold one value or one per sample, got " +
                                c10::str(timestep.sizes()));
  const auto dtype = hidden_states.scalar_type();
  const auto h = hidden_states.size(2) / p, w = hidden_states.size(3) / p;

  // The padding mask becomes an additive bias on the cross-attention keys: (1 - mask) * -10000.
  at::Tensor bias;
  if (encoder_attention_mask.defined()) {
    const auto tokens = encoder_hidden_states.size(1);
    if (encoder_attention_mask.dim() == 2) {
      if (encoder_attention_mask.size(0) != b || encoder_attention_mask.size(1) != tokens)
        throw std::invalid_argument("PixArtTransformer2DModel: encoder_attention_mask must be [" + std::to_string(b) +
                                    ", " + std::to_string(tokens) + "], got " +
                                    c10::str(encoder_attention_mask.sizes()));
      bias = ((1 - encoder_attention_mask.to(dtype)) * -10000.0).unsqueeze(1);
    } else if (encoder_attention_mask.dim() == 3) {
      bias = encoder_attention_mask.to(dtype);
    } else {
      throw std::invalid_argument("PixArtTransformer2DModel: encoder_attention_mask must be a [B, T] mask or a "
                                  "[B, 1, T] bias, got " + c10::str(encoder_attention_mask.sizes()));
    }
    bias = bias.unsqueeze(1);  // [B, 1 (heads), 1 (queries), T]
  }

  auto x = pos_embed(hidden_states);
  const auto [temb, embedded] = adaln_single(t, resolution, aspect_ratio, b, x.scalar_type());
  const auto context = caption_projection(encoder_hidden_states.to(x.scalar_type())).view({b, -1, x.size(-1)});
  std::int64_t index = 0;
  for (const auto& m : *transformer_blocks) {
    auto* block = m->as<PixArtBlock>();
    x = run_block(
        index++,
        [block, bias](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{block->forward(in[0], in[1], bias, in[2])};
        },
        {x, context, temb})[0];
  }

  const auto ss = (scale_shift_table.unsqueeze(0) + embedded.unsqueeze(1)).chunk(2, 1);
  x = norm_out(x) * (1 + ss[1]) + ss[0];
  x = proj_out(x);
  // Unpatchify: [B, h*w, p*p*C] -> [B, C, h*p, w*p] (einsum nhwpqc->nchpwq).
  const auto co = c.out_channels;
  return x.reshape({b, h, w, p, p, co}).permute({0, 5, 1, 3, 2, 4}).reshape({b, co, h * p, w * p});
}

}  // namespace yeto::pixart
