#include "sd35_transformer.hpp"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/activations.hpp"

namespace yeto::sd35 {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("SD3Transformer2DModel config: " + what);
}

}  // namespace

bool SD3TransformerConfig::dual_attention(std::int64_t block) const {
  return std::find(dual_attention_layers.begin(), dual_attention_layers.end(), block) != dual_attention_layers.end();
}

SD3TransformerConfig SD3TransformerConfig::from_json(const json& j) {
  const family::ConfigReader in(j, "SD3Transformer2DModel config");
  SD3TransformerConfig c;
  c.sample_size = in.integer("sample_size", c.sample_size);
  c.patch_size = in.integer("patch_size", c.patch_size);
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.out_channels = in.integer("out_channels", c.in_channels);
  c.num_layers = in.integer("num_layers", c.num_layers);
  c.attention_head_dim = in.integer("attention_head_dim", c.attention_head_dim);
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.joint_attention_dim = in.integer("joint_attention_dim", c.joint_attention_dim);
  c.caption_projection_dim = in.integer("caption_projection_dim", c.caption_projection_dim);
  c.pooled_projection_dim = in.integer("pooled_projection_dim", c.pooled_projection_dim);
  // null: no position embedding cap.
  c.pos_embed_max_size = j.contains("pos_embed_max_size") && j["pos_embed_max_size"].is_null()
                             ? 0
                             : in.integer("pos_embed_max_size", c.pos_embed_max_size);
  c.dual_attention_layers = in.integers("dual_attention_layers", c.dual_attention_layers);
  if (in.present("qk_norm")) {
    c.qk_norm = in.string("qk_norm", c.qk_norm);
    if (c.qk_norm != "rms_norm" && c.qk_norm != "layer_norm")
      bad("'qk_norm' is '" + c.qk_norm + "'; supported: rms_norm, layer_norm or null");
  }
  for (const auto* k : {"sample_size", "patch_size", "in_channels", "out_channels", "num_layers", "attention_head_dim",
                        "num_attention_heads", "joint_attention_dim", "caption_projection_dim",
                        "pooled_projection_dim"}) {
    if (in.integer(k, 1) <= 0) bad(std::string("'") + k + "' must be positive");
  }
  if (c.pos_embed_max_size < 0) bad("'pos_embed_max_size' must be positive or null");
  for (const auto i : c.dual_attention_layers)
    if (i < 0 || i >= c.num_layers)
      bad("'dual_attention_layers' names block " + std::to_string(i) + " but the model has " +
          std::to_string(c.num_layers) + " blocks (num_layers)");
  if (c.caption_projection_dim != c.inner_dim())
    bad("'caption_projection_dim' is " + std::to_string(c.caption_projection_dim) +
        " but the joint blocks need the inner dimension num_attention_heads x attention_head_dim = " +
        std::to_string(c.inner_dim()));
  if (c.inner_dim() % 2 != 0 || (c.inner_dim() / 2) % 2 != 0)
    bad("the inner dimension " + std::to_string(c.inner_dim()) + " must be a multiple of 4 (2D sin-cos positions)");
  return c;
}

namespace {

// get_1d_sincos_pos_embed_from_grid: [sin(pos * omega), cos(pos * omega)] in float64.
at::Tensor sincos_1d(std::int64_t dim, const at::Tensor& pos) {
  auto omega = at::arange(dim / 2, at::TensorOptions().dtype(at::kDouble));
  omega = omega / (static_cast<double>(dim) / 2.0);
  omega = 1.0 / at::pow(10000.0, omega);
  const auto out = at::outer(pos.reshape({-1}).to(at::kDouble), omega);
  return at::cat({at::sin(out), at::cos(out)}, 1);
}

}  // namespace

at::Tensor sincos_pos_embed_2d(std::int64_t embed_dim, std::int64_t grid_h, std::int64_t grid_w, double base_size,
                               double interpolation_scale) {
  if (embed_dim % 4 != 0) throw std::invalid_argument("sincos_pos_embed_2d: embed_dim must be a multiple of 4");
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  // The grids are float32 as upstream divides them; the frequencies float64.
  const auto gh = at::arange(grid_h, f32) / (static_cast<double>(grid_h) / base_size) / interpolation_scale;
  const auto gw = at::arange(grid_w, f32) / (static_cast<double>(grid_w) / base_size) / interpolation_scale;
  // meshgrid(w, h, indexing="xy"): the first grid holds the column coordinate, the second the row.
  const auto cols = gw.unsqueeze(0).expand({grid_h, grid_w});
  const auto rows = gh.unsqueeze(1).expand({grid_h, grid_w});
  const auto emb = at::cat({sincos_1d(embed_dim / 2, cols), sincos_1d(embed_dim / 2, rows)}, 1);
  return emb.to(at::kFloat);
}

PatchEmbedImpl::PatchEmbedImpl(std::int64_t sample_size, std::int64_t patch_size, std::int64_t in_channels,
                               std::int64_t embed_dim, std::int64_t pos_embed_max_size)
    : patch_size_(patch_size),
      embed_dim_(embed_dim),
      max_size_(pos_embed_max_size),
      base_size_(sample_size / patch_size),
      grid_(sample_size / patch_size) {
  proj = register_module(
      "proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, embed_dim, patch_size).stride(patch_size).bias(true)));
  if (max_size_ > 0) {
    // Persistent: SD3 checkpoints store it.
    pos_embed = register_buffer(
        "pos_embed", sincos_pos_embed_2d(embed_dim, max_size_, max_size_, static_cast<double>(base_size_)).unsqueeze(0));
  } else {
    // Not stored (a non-persistent buffer upstream): kept out of the named buffers.
    pos_embed = sincos_pos_embed_2d(embed_dim, grid_, grid_, static_cast<double>(base_size_)).unsqueeze(0);
  }
}

at::Tensor PatchEmbedImpl::positions(std::int64_t h, std::int64_t w) {
  if (max_size_ > 0) {
    if (h > max_size_ || w > max_size_)
      throw std::invalid_argument("SD3Transformer2DModel: the latent's patch grid " + std::to_string(h) + "x" +
                                  std::to_string(w) + " exceeds pos_embed_max_size " + std::to_string(max_size_) +
                                  " (latent size at most " + std::to_string(max_size_ * patch_size_) + ")");
    const auto top = (max_size_ - h) / 2, left = (max_size_ - w) / 2;
    return pos_embed.reshape({1, max_size_, max_size_, -1})
        .narrow(1, top, h)
        .narrow(2, left, w)
        .reshape({1, h * w, pos_embed.size(-1)});
  }
  if (h == grid_ && w == grid_) return pos_embed.to(proj->weight.device());
  return sincos_pos_embed_2d(embed_dim_, h, w, static_cast<double>(base_size_))
      .unsqueeze(0)
      .to(proj->weight.device());
}

at::Tensor PatchEmbedImpl::forward(const at::Tensor& latent) {
  const auto h = latent.size(2) / patch_size_, w = latent.size(3) / patch_size_;
  auto x = proj(latent).flatten(2).transpose(1, 2);  // [B, h*w, C]
  return (x + positions(h, w)).to(x.scalar_type());
}

AdaLayerNormZeroXImpl::AdaLayerNormZeroXImpl(std::int64_t dim) {
  linear = register_module("linear", nn::Linear(dim, 9 * dim, true));
  norm = register_module("norm", nn::LayerNorm(dim, 1e-6, false, false));
}

AdaZeroXOut AdaLayerNormZeroXImpl::forward(const at::Tensor& x, const at::Tensor& emb) {
  const auto p = linear(at::silu(emb)).chunk(9, 1);
  const auto normed = norm(x);
  AdaZeroXOut o;
  o.x = nn::modulate(normed, p[0], p[1]);
  o.gate_msa = p[2];
  o.shift_mlp = p[3];
  o.scale_mlp = p[4];
  o.gate_mlp = p[5];
  o.x2 = nn::modulate(normed, p[6], p[7]);
  o.gate_msa2 = p[8];
  return o;
}

FeedForwardImpl::FeedForwardImpl(std::int64_t dim) {
  // Registered as net.0.proj and net.2, the Diffusers names.
  auto net = register_module("net", torch::nn::ModuleList());
  auto gelu = std::make_shared<torch::nn::Module>();
  proj = gelu->register_module("proj", nn::Linear(dim, 4 * dim, true));
  net->push_back(gelu);
  net->push_back(std::make_shared<torch::nn::Module>());  // dropout slot (p = 0)
  out = nn::Linear(4 * dim, dim, true);
  net->push_back(out.ptr());
}

// nn::gelu_tanh: the fused kernel, in float32 for a bf16 / fp16 input on the CPU (LibTorch
// 1.13's reduced-precision CPU GELU is several times slower than float32's).
at::Tensor FeedForwardImpl::forward(const at::Tensor& x) { return out(nn::gelu_tanh(proj(x))); }

JointTransformerBlockImpl::JointTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim,
                                                     bool pre_only, const std::string& qk_norm, bool dual)
    : context_pre_only(pre_only), dual_attention(dual) {
  if (dual) norm1_x = register_module("norm1", AdaLayerNormZeroX(dim));
  else norm1 = register_module("norm1", nn::AdaLayerNormZero(dim));
  if (pre_only)
    norm1_context_pre = register_module("norm1_context", nn::AdaLayerNormContinuous(dim, dim, false, 1e-6, true));
  else
    norm1_context = register_module("norm1_context", nn::AdaLayerNormZero(dim));
  auto o = nn::AttentionOptions::dit(dim, heads, head_dim, qk_norm);
  o.added_kv_proj_dim = dim;
  o.context_pre_only = pre_only;
  o.context_first = false;  // joint order [image, text]
  attn = register_module("attn", nn::Attention(o));
  if (dual) attn2 = register_module("attn2", nn::Attention(nn::AttentionOptions::dit(dim, heads, head_dim, qk_norm)));
  norm2 = register_module("norm2", nn::LayerNorm(dim, 1e-6, false, false));
  ff = register_module("ff", FeedForward(dim));
  if (!pre_only) {
    norm2_context = register_module("norm2_context", nn::LayerNorm(dim, 1e-6, false, false));
    ff_context = register_module("ff_context", FeedForward(dim));
  }
}

std::pair<at::Tensor, at::Tensor> JointTransformerBlockImpl::forward(const at::Tensor& hidden_states,
                                                                     const at::Tensor& encoder_hidden_states,
                                                                     const at::Tensor& temb) {
  at::Tensor x, gate_msa, shift_mlp, scale_mlp, gate_mlp, x2, gate_msa2;
  if (dual_attention) {
    auto n = norm1_x(hidden_states, temb);
    x = n.x, gate_msa = n.gate_msa, shift_mlp = n.shift_mlp, scale_mlp = n.scale_mlp, gate_mlp = n.gate_mlp;
    x2 = n.x2, gate_msa2 = n.gate_msa2;
  } else {
    auto n = norm1(hidden_states, temb);
    x = n.x, gate_msa = n.gate_msa, shift_mlp = n.shift_mlp, scale_mlp = n.scale_mlp, gate_mlp = n.gate_mlp;
  }
  nn::AdaZeroOut c;
  if (context_pre_only) c.x = norm1_context_pre(encoder_hidden_states, temb);
  else c = norm1_context(encoder_hidden_states, temb);

  auto [attn_out, context_attn_out] = attn->forward_joint(x, c.x);
  auto h = hidden_states + gate_msa.unsqueeze(1) * attn_out;
  if (dual_attention) h = h + gate_msa2.unsqueeze(1) * attn2->forward(x2);
  h = h + gate_mlp.unsqueeze(1) * ff(nn::modulate(norm2(h), shift_mlp, scale_mlp));

  at::Tensor e;
  if (!context_pre_only) {
    e = encoder_hidden_states + c.gate_msa.unsqueeze(1) * context_attn_out;
    e = e + c.gate_mlp.unsqueeze(1) * ff_context(nn::modulate(norm2_context(e), c.shift_mlp, c.scale_mlp));
  }
  return {e, h};
}

SD3Transformer2DModelImpl::SD3Transformer2DModelImpl(const SD3TransformerConfig& config) : config_(config) {
  const auto dim = config.inner_dim();
  pos_embed = register_module("pos_embed", PatchEmbed(config.sample_size, config.patch_size, config.in_channels, dim,
                                                      config.pos_embed_max_size));
  time_text_embed =
      register_module("time_text_embed", nn::CombinedTimestepEmbeddings(dim, config.pooled_projection_dim, false));
  context_embedder =
      register_module("context_embedder", nn::Linear(config.joint_attention_dim, config.caption_projection_dim, true));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_layers; ++i)
    transformer_blocks->push_back(JointTransformerBlock(dim, config.num_attention_heads, config.attention_head_dim,
                                                        i == config.num_layers - 1, config.qk_norm,
                                                        config.dual_attention(i)));
  norm_out = register_module("norm_out", nn::AdaLayerNormContinuous(dim, dim, false, 1e-6));
  proj_out = register_module(
      "proj_out", nn::Linear(dim, config.patch_size * config.patch_size * config.out_channels, true));
}

at::Tensor SD3Transformer2DModelImpl::forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                              const at::Tensor& pooled_projections, const at::Tensor& timestep) {
  const auto p = config_.patch_size;
  if (hidden_states.dim() != 4 || hidden_states.size(1) != config_.in_channels || hidden_states.size(2) % p != 0 ||
      hidden_states.size(3) % p != 0)
    throw std::invalid_argument("SD3Transformer2DModel: hidden_states must be [B, " +
                                std::to_string(config_.in_channels) + ", H, W] with H and W multiples of " +
                                std::to_string(p) + ", got " + c10::str(hidden_states.sizes()));
  const auto b = hidden_states.size(0);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != b ||
      encoder_hidden_states.size(2) != config_.joint_attention_dim)
    throw std::invalid_argument("SD3Transformer2DModel: encoder_hidden_states must be [" + std::to_string(b) + ", T, " +
                                std::to_string(config_.joint_attention_dim) + "], got " +
                                c10::str(encoder_hidden_states.sizes()));
  if (pooled_projections.dim() != 2 || pooled_projections.size(0) != b ||
      pooled_projections.size(1) != config_.pooled_projection_dim)
    throw std::invalid_argument("SD3Transformer2DModel: pooled_projections must be [" + std::to_string(b) + ", " +
                                std::to_string(config_.pooled_projection_dim) + "], got " +
                                c10::str(pooled_projections.sizes()));
  if (timestep.dim() != 1 || (timestep.size(0) != b && timestep.size(0) != 1))
    throw std::invalid_argument("SD3Transformer2DModel: timestep must be [" + std::to_string(b) + "], got " +
                                c10::str(timestep.sizes()));

  const auto h = hidden_states.size(2) / p, w = hidden_states.size(3) / p;
  auto x = pos_embed(hidden_states);
  const auto temb = time_text_embed(timestep.expand({b}), pooled_projections);
  auto e = context_embedder(encoder_hidden_states);
  std::int64_t index = 0;
  for (const auto& m : *transformer_blocks) {
    auto* block = m->as<JointTransformerBlock>();
    // The last block (context_pre_only) returns no text stream: an undefined first output.
    auto out = run_block(
        index++,
        [block](const std::vector<at::Tensor>& in) {
          auto [text, image] = block->forward(in[0], in[1], in[2]);
          return std::vector<at::Tensor>{std::move(text), std::move(image)};
        },
        {x, e, temb});
    e = out[0];
    x = out[1];
  }
  x = proj_out(norm_out(x, temb));
  // Unpatchify: [B, h*w, p*p*C] -> [B, C, h*p, w*p] ("nhwpqc->nchpwq").
  const auto c = config_.out_channels;
  return x.reshape({b, h, w, p, p, c}).permute({0, 5, 1, 3, 2, 4}).reshape({b, c, h * p, w * p});
}

}  // namespace yeto::sd35
