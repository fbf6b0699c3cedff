#include "flux_transformer.hpp"

#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/activations.hpp"

namespace yeto::flux {

FluxTransformerConfig FluxTransformerConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, "FluxTransformer2DModel config");
  FluxTransformerConfig c;
  c.patch_size = in.integer("patch_size", c.patch_size);
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.out_channels = in.integer("out_channels", 0);
  c.num_layers = in.integer("num_layers", c.num_layers);
  c.num_single_layers = in.integer("num_single_layers", c.num_single_layers);
  c.attention_head_dim = in.integer("attention_head_dim", c.attention_head_dim);
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.joint_attention_dim = in.integer("joint_attention_dim", c.joint_attention_dim);
  c.pooled_projection_dim = in.integer("pooled_projection_dim", c.pooled_projection_dim);
  c.guidance_embeds = in.boolean("guidance_embeds", c.guidance_embeds);
  c.axes_dims_rope = in.integers("axes_dims_rope", c.axes_dims_rope);
  for (const auto* k : {"patch_size", "in_channels", "num_attention_heads", "attention_head_dim", "joint_attention_dim",
                        "pooled_projection_dim"})
    if (in.integer(k, 1) <= 0) in.fail(k, "must be positive");
  const auto rope_sum = std::accumulate(c.axes_dims_rope.begin(), c.axes_dims_rope.end(), std::int64_t{0});
  if (rope_sum != c.attention_head_dim)
    throw std::invalid_argument("FluxTransformer2DModel config: axes_dims_rope sums to " + std::to_string(rope_sum) +
                                " but attention_head_dim is " + std::to_string(c.attention_head_dim));
  return c;
}

FluxTransformerBlockImpl::FluxTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim) {
  norm1 = register_module("norm1", nn::AdaLayerNormZero(dim));
  norm1_context = register_module("norm1_context", nn::AdaLayerNormZero(dim));
  nn::AttentionOptions o = nn::AttentionOptions::dit(dim, heads, head_dim);
  o.added_kv_proj_dim = dim;  // joint attention over [text, image]
  o.context_pre_only = false;
  o.context_first = true;
  attn = register_module("attn", nn::Attention(o));
  norm2 = register_module("norm2", nn::LayerNorm(dim, 1e-6, false, false));
  ff = register_module("ff", nn::FeedForward(dim, 4 * dim, dim));
  norm2_context = register_module("norm2_context", nn::LayerNorm(dim, 1e-6, false, false));
  ff_context = register_module("ff_context", nn::FeedForward(dim, 4 * dim, dim));
}

std::pair<at::Tensor, at::Tensor> FluxTransformerBlockImpl::forward(const at::Tensor& hidden_states,
                                                                    const at::Tensor& encoder_hidden_states,
                                                                    const at::Tensor& temb,
                                                                    const nn::RopeTables& rope) {
  const auto x = norm1(hidden_states, temb);
  const auto c = norm1_context(encoder_hidden_states, temb);
  auto [attn_out, context_attn_out] = attn->forward_joint(x.x, c.x, at::Tensor(), rope.cos, rope.sin);

  auto h = hidden_states + x.gate_msa.unsqueeze(1) * attn_out;
  h = h + x.gate_mlp.unsqueeze(1) * ff(nn::modulate(norm2(h), x.shift_mlp, x.scale_mlp));

  auto e = encoder_hidden_states + c.gate_msa.unsqueeze(1) * context_attn_out;
  e = e + c.gate_mlp.unsqueeze(1) * ff_context(nn::modulate(norm2_context(e), c.shift_mlp, c.scale_mlp));
  if (e.scalar_type() == at::kHalf) e = e.clamp(-65504, 65504);
  return {e, h};
}

FluxSingleTransformerBlockImpl::FluxSingleTransformerBlockImpl(std::int64_t dim, std::int64_t heads,
                                                               std::int64_t head_dim, double mlp_ratio) {
  const auto mlp_hidden = static_cast<std::int64_t>(static_cast<double>(dim) * mlp_ratio);
  norm = register_module("norm", nn::AdaLayerNormZeroSingle(dim));
  proj_mlp = register_module("proj_mlp", nn::Linear(dim, mlp_hidden, true));
  proj_out = register_module("proj_out", nn::Linear(dim + mlp_hidden, dim, true));
  nn::AttentionOptions o = nn::AttentionOptions::dit(dim, heads, head_dim);
  o.pre_only = true;  // no to_out: proj_out mixes attention and MLP
  attn = register_module("attn", nn::Attention(o));
}

at::Tensor FluxSingleTransformerBlockImpl::forward(const at::Tensor& hidden_states, const at::Tensor& temb,
                                                   const nn::RopeTables& rope) {
  auto [x, gate] = norm(hidden_states, temb);
  const auto mlp = nn::gelu_tanh(proj_mlp(x));
  const at::Tensor a = attn->forward(x, at::Tensor(), at::Tensor(), rope.cos, rope.sin);
  auto h = hidden_states + gate.unsqueeze(1) * proj_out(at::cat({a, mlp}, 2));
  if (h.scalar_type() == at::kHalf) h = h.clamp(-65504, 65504);
  return h;
}

FluxTransformer2DModelImpl::FluxTransformer2DModelImpl(const FluxTransformerConfig& config) : config_(config) {
  const auto dim = config.inner_dim();
  x_embedder = register_module("x_embedder", nn::Linear(config.in_channels, dim, true));
  time_text_embed = register_module(
      "time_text_embed", nn::CombinedTimestepEmbeddings(dim, config.pooled_projection_dim, config.guidance_embeds));
  context_embedder = register_module("context_embedder", nn::Linear(config.joint_attention_dim, dim, true));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_layers; ++i)
    transformer_blocks->push_back(FluxTransformerBlock(dim, config.num_attention_heads, config.attention_head_dim));
  single_transformer_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_single_layers; ++i)
    single_transformer_blocks->push_back(
        FluxSingleTransformerBlock(dim, config.num_attention_heads, config.attention_head_dim));
  norm_out = register_module("norm_out", nn::AdaLayerNormContinuous(dim, dim, false, 1e-6));
  proj_out = register_module(
      "proj_out", nn::Linear(dim, config.patch_size * config.patch_size * config.output_channels(), true));
}

at::Tensor FluxTransformer2DModelImpl::forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                               const at::Tensor& pooled_projections, const at::Tensor& timestep,
                                               const at::Tensor& img_ids, const at::Tensor& txt_ids,
                                               const at::Tensor& guidance) {
  if (hidden_states.dim() != 3 || hidden_states.size(2) != config_.in_channels)
    throw std::invalid_argument("FluxTransformer2DModel: hidden_states must be [B, N, " +
                                std::to_string(config_.in_channels) + "], got " +
                                c10::str(hidden_states.sizes()));
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(2) != config_.joint_attention_dim)
    throw std::invalid_argument("FluxTransformer2DModel: encoder_hidden_states must be [B, T, " +
                                std::to_string(config_.joint_attention_dim) + "], got " +
                                c10::str(encoder_hidden_states.sizes()));
  if (config_.guidance_embeds && !guidance.defined())
    throw std::invalid_argument("FluxTransformer2DModel: this checkpoint is guidance-distilled (guidance_embeds); "
                                "pass a guidance scale");

  const auto dtype = hidden_states.scalar_type();
  auto h = x_embedder(hidden_states);
  const auto t = timestep.to(dtype) * 1000;
  const auto g = config_.guidance_embeds ? guidance.to(dtype) * 1000 : at::Tensor();
  const auto temb = time_text_embed(t, pooled_projections, g);
  auto e = context_embedder(encoder_hidden_states);

  // Older pipelines passed batched ids; the positions are the same for every sample.
  const auto ti = txt_ids.dim() == 3 ? txt_ids[0] : txt_ids;
  const auto ii = img_ids.dim() == 3 ? img_ids[0] : img_ids;
  const auto rope = nn::rope_nd(at::cat({ti, ii}, 0), config_.axes_dims_rope, 10000.0, true);

  std::int64_t index = 0;
  for (const auto& m : *transformer_blocks) {
    auto* block = m->as<FluxTransformerBlock>();
    auto out = run_block(
        index++,
        [block, rope](const std::vector<at::Tensor>& in) {
          auto [text, image] = block->forward(in[0], in[1], in[2], rope);
          return std::vector<at::Tensor>{std::move(text), std::move(image)};
        },
        {h, e, temb});
    e = out[0];
    h = out[1];
  }
  const auto text_len = e.size(1);
  h = at::cat({e, h}, 1);
  for (const auto& m : *single_transformer_blocks) {
    auto* block = m->as<FluxSingleTransformerBlock>();
    h = run_block(
        index++,
        [block, rope](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{block->forward(in[0], in[1], rope)};
        },
        {h, temb})[0];
  }
  h = h.narrow(1, text_len, h.size(1) - text_len);
  return proj_out(norm_out(h, temb));
}

}  // namespace yeto::flux
