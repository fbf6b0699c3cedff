#include "template_transformer.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

namespace yeto_template {

using nlohmann::json;

namespace {

std::int64_t positive(const json& j, const char* key, std::int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer() || j[key].get<std::int64_t>() <= 0)
    throw std::invalid_argument(std::string("'") + key + "' must be a positive integer, got " + j[key].dump());
  return j[key].get<std::int64_t>();
}

}  // namespace

TransformerConfig TransformerConfig::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("expected a JSON object");
  TransformerConfig c;
  c.in_channels = positive(j, "in_channels", c.in_channels);
  c.out_channels = positive(j, "out_channels", 0);
  c.patch_size = positive(j, "patch_size", c.patch_size);
  c.num_layers = positive(j, "num_layers", c.num_layers);
  c.num_attention_heads = positive(j, "num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = positive(j, "attention_head_dim", c.attention_head_dim);
  c.joint_attention_dim = positive(j, "joint_attention_dim", c.joint_attention_dim);
  c.pooled_projection_dim = positive(j, "pooled_projection_dim", c.pooled_projection_dim);
  c.sample_size = positive(j, "sample_size", c.sample_size);
  if (j.contains("axes_dims_rope") && !j["axes_dims_rope"].is_null()) {
    const auto& a = j["axes_dims_rope"];
    if (!a.is_array() || a.size() != 2)
      throw std::invalid_argument("'axes_dims_rope' must be two even integers (rows, columns), got " + a.dump());
    c.axes_dims_rope.clear();
    for (const auto& v : a) {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0 || v.get<std::int64_t>() % 2 != 0)
        throw std::invalid_argument("'axes_dims_rope' must be two even integers (rows, columns), got " + a.dump());
      c.axes_dims_rope.push_back(v.get<std::int64_t>());
    }
  }
  const auto rope = std::accumulate(c.axes_dims_rope.begin(), c.axes_dims_rope.end(), std::int64_t{0});
  if (rope != c.attention_head_dim)
    throw std::invalid_argument("'axes_dims_rope' must sum to attention_head_dim (" +
                                std::to_string(c.attention_head_dim) + "), got " + std::to_string(rope));
  return c;
}

TemplateBlockImpl::TemplateBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim) {
  norm1 = register_module("norm1", yeto::nn::AdaLayerNormZero(dim));
  attn = register_module("attn", yeto::nn::Attention(yeto::nn::AttentionOptions::dit(dim, heads, head_dim)));
  norm2 = register_module("norm2", yeto::nn::LayerNorm(dim, 1e-6, false, false));
  ff = register_module("ff", yeto::nn::FeedForward(dim));
}

at::Tensor TemplateBlockImpl::forward(const at::Tensor& tokens, const at::Tensor& temb,
                                      const yeto::nn::RopeTables& rope) {
  const auto m = norm1(tokens, temb);
  auto h = tokens + m.gate_msa.unsqueeze(1) * attn->forward(m.x, {}, {}, rope.cos, rope.sin);
  const auto ff_in = yeto::nn::modulate(norm2(h), m.shift_mlp, m.scale_mlp);
  return h + m.gate_mlp.unsqueeze(1) * ff(ff_in);
}

TemplateTransformer2DModelImpl::TemplateTransformer2DModelImpl(const TransformerConfig& c) : config_(c) {
  const auto dim = c.inner_dim();
  const auto patch = c.in_channels * c.patch_size * c.patch_size;
  x_embedder = register_module("x_embedder", yeto::nn::Linear(patch, dim));
  context_embedder = register_module("context_embedder", yeto::nn::Linear(c.joint_attention_dim, dim));
  time_text_embed =
      register_module("time_text_embed", yeto::nn::CombinedTimestepEmbeddings(dim, c.pooled_projection_dim, false));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i)
    transformer_blocks->push_back(TemplateBlock(dim, c.num_attention_heads, c.attention_head_dim));
  norm_out = register_module("norm_out", yeto::nn::AdaLayerNormContinuous(dim, dim, false, 1e-6));
  proj_out = register_module("proj_out",
                             yeto::nn::Linear(dim, c.patch_size * c.patch_size * c.output_channels()));
}

at::Tensor TemplateTransformer2DModelImpl::forward(const at::Tensor& hidden_states,
                                                   const at::Tensor& encoder_hidden_states,
                                                   const at::Tensor& pooled_projections, const at::Tensor& timestep) {
  const auto& c = config_;
  const auto p = c.patch_size;
  if (hidden_states.dim() != 4 || hidden_states.size(1) != c.in_channels || hidden_states.size(2) % p != 0 ||
      hidden_states.size(3) % p != 0)
    throw std::invalid_argument("TemplateTransformer2DModel: hidden_states must be [B, " +
                                std::to_string(c.in_channels) + ", H, W] with H and W multiples of " +
                                std::to_string(p) + ", got " + c10::str(hidden_states.sizes()));
  const auto b = hidden_states.size(0);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != b ||
      encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw std::invalid_argument("TemplateTransformer2DModel: encoder_hidden_states must be [" + std::to_string(b) +
                                ", L, " + std::to_string(c.joint_attention_dim) + "], got " +
                                c10::str(encoder_hidden_states.sizes()));
  if (pooled_projections.dim() != 2 || pooled_projections.size(0) != b ||
      pooled_projections.size(1) != c.pooled_projection_dim)
    throw std::invalid_argument("TemplateTransformer2DModel: pooled_projections must be [" + std::to_string(b) + ", " +
                                std::to_string(c.pooled_projection_dim) + "], got " +
                                c10::str(pooled_projections.sizes()));
  if (timestep.numel() != b)
    throw std::invalid_argument("TemplateTransformer2DModel: timestep must have one value per row (" +
                                std::to_string(b) + "), got " + c10::str(timestep.sizes()));

  const auto& w = proj_out->weight;
  const auto opts = w.options();
  const auto x_in = hidden_states.to(opts);
  const auto gh = x_in.size(2) / p, gw = x_in.size(3) / p;
  // Patchify: [B, C, gh, p, gw, p] -> [B, gh * gw, C * p * p] (row-major patches).
  auto x = x_in.reshape({b, c.in_channels, gh, p, gw, p}).permute({0, 2, 4, 1, 3, 5}).reshape(
      {b, gh * gw, c.in_channels * p * p});
  x = x_embedder(x);
  const auto ctx = context_embedder(encoder_hidden_states.to(opts));
  const auto temb = time_text_embed(timestep.reshape({b}).to(w.device(), at::kFloat), pooled_projections.to(opts));

  // Rotary positions: text tokens at (0, 0), image token (r, c) at (r, c).
  const auto text_len = ctx.size(1);
  const auto rows = at::arange(gh, at::kFloat).repeat_interleave(gw);
  const auto cols = at::arange(gw, at::kFloat).repeat({gh});
  const auto image_ids = at::stack({rows, cols}, 1);
  const auto ids = at::cat({at::zeros({text_len, 2}, at::kFloat), image_ids}, 0);
  auto rope = yeto::nn::rope_nd(ids, c.axes_dims_rope);
  rope.cos = rope.cos.to(w.device());
  rope.sin = rope.sin.to(w.device());

  auto h = at::cat({ctx, x}, 1);
  std::int64_t index = 0;
  for (const auto& m : *transformer_blocks) {
    auto* block = m->as<TemplateBlockImpl>();
    // Everything that may need a gradient is an input; the rotary tables are captured.
    h = run_block(
        index++,
        [block, rope](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{block->forward(in[0], in[1], rope)};
        },
        {h, temb})[0];
  }
  x = h.narrow(1, text_len, gh * gw);
  x = proj_out(norm_out(x, temb));
  // Unpatchify: [B, gh * gw, C_out * p * p] -> [B, C_out, gh * p, gw * p].
  const auto co = c.output_channels();
  return x.reshape({b, gh, gw, co, p, p}).permute({0, 3, 1, 4, 2, 5}).reshape({b, co, gh * p, gw * p});
}

}  // namespace yeto_template
