#include "wan_transformer.hpp"

#include <algorithm>

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/dropout.h>

#include "yeto/family/config.hpp"
#include "yeto/nn/activations.hpp"
#include "yeto/nn/attention.hpp"
#include "yeto/nn/checkpoint.hpp"

namespace yeto::wan {
namespace {

const char* kClass = "WanTransformer3DModel config";

// FP32LayerNorm: the statistics and the affine parameters in float32, the result in float32.
at::Tensor fp32_layer_norm(const nn::LayerNorm& norm, const at::Tensor& x) {
  const auto w = norm->weight.defined() ? norm->weight.to(at::kFloat) : at::Tensor();
  const auto b = norm->bias.defined() ? norm->bias.to(at::kFloat) : at::Tensor();
  return at::layer_norm(x.to(at::kFloat), {norm->dim}, w, b, norm->eps);
}

// Rotates interleaved (real, imaginary) pairs of x [B, H, L, D] by the float64 tables [L, D] in
// float64, as upstream's complex multiply; returns x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto xd = x.to(at::kDouble);
  const auto pairs = xd.unflatten(-1, {-1, 2});
  const auto re = pairs.select(-1, 0), im = pairs.select(-1, 1);
  const auto c = cos.to(x.device()).unflatten(-1, {-1, 2}).select(-1, 0);
  const auto s = sin.to(x.device()).unflatten(-1, {-1, 2}).select(-1, 0);
  const auto out = at::stack({re * c - im * s, re * s + im * c}, -1).flatten(-2);
  return out.to(x.scalar_type());
}

}  // namespace

WanTransformerConfig WanTransformerConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, kClass);
  WanTransformerConfig c;
  c.patch_size = in.integers("patch_size", c.patch_size);
  if (c.patch_size.size() != 3 || *std::min_element(c.patch_size.begin(), c.patch_size.end()) <= 0)
    in.fail("patch_size", "must be three positive integers, got " + j["patch_size"].dump());
  c.num_attention_heads = in.integer("num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = in.integer("attention_head_dim", c.attention_head_dim);
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.out_channels = in.integer("out_channels", c.in_channels);
  c.text_dim = in.integer("text_dim", c.text_dim);
  c.freq_dim = in.integer("freq_dim", c.freq_dim);
  c.ffn_dim = in.integer("ffn_dim", c.ffn_dim);
  c.num_layers = in.integer("num_layers", c.num_layers);
  c.rope_max_seq_len = in.integer("rope_max_seq_len", c.rope_max_seq_len);
  c.cross_attn_norm = in.boolean("cross_attn_norm", c.cross_attn_norm);
  c.eps = in.number("eps", c.eps);
  if (j.contains("qk_norm") && !j["qk_norm"].is_null() &&
      (!j["qk_norm"].is_string() || j["qk_norm"].get<std::string>() != "rms_norm_across_heads"))
    throw std::invalid_argument(std::string(kClass) + ": 'qk_norm' " + j["qk_norm"].dump() +
                                " is not supported (Wan checkpoints use \"rms_norm_across_heads\")");
  for (const char* k : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"})
    if (j.contains(k) && !j[k].is_null())
      throw std::invalid_argument(std::string(kClass) + ": '" + k +
                                  "' is set: image-conditioned Wan transformers (I2V / FLF2V) are not supported");
  for (const auto* k : {"num_attention_heads", "attention_head_dim", "in_channels", "out_channels", "text_dim",
                        "freq_dim", "ffn_dim", "rope_max_seq_len"})
    if (in.integer(k, 1) <= 0) throw std::invalid_argument(std::string(kClass) + ": '" + k + "' must be positive");
  if (c.num_layers < 0) throw std::invalid_argument(std::string(kClass) + ": 'num_layers' must not be negative");
  if (c.attention_head_dim % 2 != 0 || c.attention_head_dim < 6)
    throw std::invalid_argument(std::string(kClass) + ": 'attention_head_dim' must be even and at least 6 (three "
                                "rotary axes), got " + std::to_string(c.attention_head_dim));
  if (c.freq_dim % 2 != 0) throw std::invalid_argument(std::string(kClass) + ": 'freq_dim' must be even");
  return c;
}

std::pair<at::Tensor, at::Tensor> wan_rope_tables(std::int64_t head_dim, std::int64_t frames, std::int64_t height,
                                                  std::int64_t width, std::int64_t max_seq_len, double theta) {
  const std::int64_t hw_dim = 2 * (head_dim / 6);
  const std::int64_t t_dim = head_dim - 2 * hw_dim;
  if (frames > max_seq_len || height > max_seq_len || width > max_seq_len)
    throw std::invalid_argument("WanTransformer3DModel: a token grid of " + std::to_string(frames) + "x" +
                                std::to_string(height) + "x" + std::to_string(width) +
                                " exceeds rope_max_seq_len " + std::to_string(max_seq_len));
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  // One axis: angles pos * theta^(-2i/dim), each repeated for its (re, im) pair.
  auto axis = [&](std::int64_t dim, std::int64_t n) {
    const auto inv = at::pow(theta, at::arange(0, dim, 2, opt).narrow(0, 0, dim / 2) / static_cast<double>(dim))
                         .reciprocal();
    return at::outer(at::arange(n, opt), inv).repeat_interleave(2, 1);  // [n, dim]
  };
  const auto ft = axis(t_dim, frames).view({frames, 1, 1, t_dim}).expand({frames, height, width, t_dim});
  const auto fh = axis(hw_dim, height).view({1, height, 1, hw_dim}).expand({frames, height, width, hw_dim});
  const auto fw = axis(hw_dim, width).view({1, 1, width, hw_dim}).expand({frames, height, width, hw_dim});
  const auto angles = at::cat({ft, fh, fw}, -1).reshape({frames * height * width, head_dim});
  return {at::cos(angles), at::sin(angles)};
}

WanAttentionImpl::WanAttentionImpl(std::int64_t dim, std::int64_t h, double eps) : heads(h) {
  to_q = register_module("to_q", nn::Linear(dim, dim, true));
  to_k = register_module("to_k", nn::Linear(dim, dim, true));
  to_v = register_module("to_v", nn::Linear(dim, dim, true));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(nn::Linear(dim, dim, true));
  to_out->push_back(torch::nn::Dropout(0.0));
  norm_q = register_module("norm_q", nn::RMSNorm(dim, eps, true));
  norm_k = register_module("norm_k", nn::RMSNorm(dim, eps, true));
}

at::Tensor WanAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& rope_cos,
                                     const at::Tensor& rope_sin) {
  const auto& kv = context.defined() ? context : x;
  auto q = nn::split_heads(norm_q(to_q(x)), heads);
  auto k = nn::split_heads(norm_k(to_k(kv)), heads);
  auto v = nn::split_heads(to_v(kv), heads);
  if (rope_cos.defined()) {
    q = apply_rope(q, rope_cos, rope_sin);
    k = apply_rope(k, rope_cos, rope_sin);
  }
  auto out = nn::merge_heads(nn::attention(q, k, v)).to(q.scalar_type());
  return to_out[0]->as<nn::LinearImpl>()->forward(out);
}

WanTransformerBlockImpl::WanTransformerBlockImpl(std::int64_t dim, std::int64_t ffn_dim, std::int64_t heads,
                                                 bool cross_norm, double eps)
    : cross_attn_norm(cross_norm) {
  norm1 = register_module("norm1", nn::LayerNorm(dim, eps, false, false));
  attn1 = register_module("attn1", WanAttention(dim, heads, eps));
  attn2 = register_module("attn2", WanAttention(dim, heads, eps));
  if (cross_attn_norm) norm2 = register_module("norm2", nn::LayerNorm(dim, eps, true, true));
  ffn = register_module("ffn", nn::FeedForward(dim, ffn_dim));
  norm3 = register_module("norm3", nn::LayerNorm(dim, eps, false, false));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({1, 6, dim}) / std::sqrt(double(dim)));
}

at::Tensor WanTransformerBlockImpl::forward(const at::Tensor& x_in, const at::Tensor& context, const at::Tensor& temb,
                                            const at::Tensor& rope_cos, const at::Tensor& rope_sin) {
  const auto dtype = x_in.scalar_type();
  // temb [B, 6, dim] (one timestep per sample) or [B, S, 6, dim] (one per token, Wan 2.2 TI2V):
  // each modulation broadcasts as [B, 1, dim] or is [B, S, dim].
  std::vector<at::Tensor> mod;
  if (temb.dim() == 4) {
    const auto all = scale_shift_table.to(at::kFloat).unsqueeze(0) + temb.to(at::kFloat);
    for (std::int64_t i = 0; i < 6; ++i) mod.push_back(all.select(2, i));
  } else {
    mod = (scale_shift_table.to(at::kFloat) + temb.to(at::kFloat)).chunk(6, 1);
  }
  const auto &shift_msa = mod[0], &scale_msa = mod[1], &gate_msa = mod[2];
  const auto &c_shift = mod[3], &c_scale = mod[4], &c_gate = mod[5];
  auto x = x_in;
  auto normed = (fp32_layer_norm(norm1, x) * (1 + scale_msa) + shift_msa).to(dtype);
  auto attn = attn1(normed, at::Tensor(), rope_cos, rope_sin);
  x = (x.to(at::kFloat) + attn * gate_msa).to(dtype);
  normed = cross_attn_norm ? fp32_layer_norm(norm2, x).to(dtype) : x;
  x = x + attn2(normed, context, at::Tensor(), at::Tensor());
  normed = (fp32_layer_norm(norm3, x) * (1 + c_scale) + c_shift).to(dtype);
  const auto ff = ffn(normed);
  return (x.to(at::kFloat) + ff.to(at::kFloat) * c_gate).to(dtype);
}

WanConditionEmbedderImpl::WanConditionEmbedderImpl(std::int64_t dim, std::int64_t freq_dim, std::int64_t text_dim) {
  timesteps_proj = register_module("timesteps_proj", nn::Timesteps(freq_dim, true, 0.0));
  time_embedder = register_module("time_embedder", nn::TimestepEmbedding(freq_dim, dim));
  time_proj = register_module("time_proj", nn::Linear(dim, 6 * dim, true));
  text_embedder = register_module("text_embedder", nn::TextProjection(text_dim, dim, 0, nn::Activation::gelu_tanh));
}

WanTransformer3DModelImpl::WanTransformer3DModelImpl(const WanTransformerConfig& config) : config_(config) {
  const auto dim = config.inner_dim();
  const auto& p = config.patch_size;
  patch_embedding = register_module(
      "patch_embedding",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(config.in_channels, dim, {p[0], p[1], p[2]}).stride({p[0], p[1], p[2]})));
  condition_embedder =
      register_module("condition_embedder", WanConditionEmbedder(dim, config.freq_dim, config.text_dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_layers; ++i)
    blocks->push_back(
        WanTransformerBlock(dim, config.ffn_dim, config.num_attention_heads, config.cross_attn_norm, config.eps));
  norm_out = register_module("norm_out", nn::LayerNorm(dim, config.eps, false, false));
  proj_out = register_module("proj_out", nn::Linear(dim, config.out_channels * p[0] * p[1] * p[2], true));
  scale_shift_table = register_parameter("scale_shift_table", at::randn({1, 2, dim}) / std::sqrt(double(dim)));
}

at::Tensor WanTransformer3DModelImpl::forward(const at::Tensor& hidden_states, const at::Tensor& timestep,
                                              const at::Tensor& encoder_hidden_states) {
  const auto& c = config_;
  if (hidden_states.dim() != 5 || hidden_states.size(1) != c.in_channels)
    throw std::invalid_argument("WanTransformer3DModel: hidden_states must be [B, " + std::to_string(c.in_channels) +
                                ", F, H, W], got " + c10::str(hidden_states.sizes()));
  const auto b = hidden_states.size(0);
  const auto& p = c.patch_size;
  for (int i = 0; i < 3; ++i)
    if (hidden_states.size(2 + i) % p[i] != 0)
      throw std::invalid_argument("WanTransformer3DModel: hidden_states " + c10::str(hidden_states.sizes()) +
                                  " is not divisible by the patch size " + c10::str(at::IntArrayRef(p)));
  const auto pf = hidden_states.size(2) / p[0], ph = hidden_states.size(3) / p[1], pw = hidden_states.size(4) / p[2];
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != b ||
      encoder_hidden_states.size(2) != c.text_dim)
    throw std::invalid_argument("WanTransformer3DModel: encoder_hidden_states must be [" + std::to_string(b) +
                                ", T, " + std::to_string(c.text_dim) + "], got " +
                                c10::str(encoder_hidden_states.sizes()));
  auto t = timestep.dim() == 0 ? timestep.expand({b}) : timestep;
  const auto seq = pf * ph * pw;
  // One timestep per sample [B], or one per token [B, F' H' W'] (Wan 2.2 TI2V's expand_timesteps).
  const bool per_token = t.dim() == 2;
  if (!(t.dim() == 1 && t.size(0) == b) && !(per_token && t.size(0) == b && t.size(1) == seq))
    throw std::invalid_argument("WanTransformer3DModel: timestep must be [B] or [B, " + std::to_string(seq) +
                                "] (one per token), got " + c10::str(timestep.sizes()));
  const auto [rope_cos, rope_sin] = wan_rope_tables(c.attention_head_dim, pf, ph, pw, c.rope_max_seq_len);
  const auto dtype = patch_embedding->weight.scalar_type();
  auto x = patch_embedding(hidden_states.to(dtype)).flatten(2).transpose(1, 2);

  auto& ce = *condition_embedder;
  auto tproj = ce.timesteps_proj(t.flatten().to(hidden_states.device()));
  if (per_token) tproj = tproj.unflatten(0, {b, seq});
  tproj = tproj.to(ce.time_embedder->linear_1->compute_dtype());
  const auto temb = ce.time_embedder(tproj).to(encoder_hidden_states.scalar_type());
  const auto timestep_proj = ce.time_proj(at::silu(temb)).unflatten(per_token ? 2 : 1, {6, -1});
  const auto context = ce.text_embedder(encoder_hidden_states.to(dtype));

  const auto cos = rope_cos, sin = rope_sin;  // structured bindings cannot be captured in C++20
  std::int64_t index = 0;
  for (const auto& module : *blocks) {
    auto* block = module->as<WanTransformerBlockImpl>();
    x = run_block(
        index++,
        [block, cos, sin](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{block->forward(in[0], in[1], in[2], cos, sin)};
        },
        {x, context, timestep_proj})[0];
  }

  at::Tensor shift, scale;
  if (per_token) {  // temb [B, S, dim]
    const auto all = scale_shift_table.to(at::kFloat).unsqueeze(0) + temb.to(at::kFloat).unsqueeze(2);
    shift = all.select(2, 0);
    scale = all.select(2, 1);
  } else {
    const auto mod = (scale_shift_table.to(at::kFloat) + temb.to(at::kFloat).unsqueeze(1)).chunk(2, 1);
    shift = mod[0];
    scale = mod[1];
  }
  x = (fp32_layer_norm(norm_out, x) * (1 + scale) + shift).to(x.scalar_type());
  x = proj_out(x);
  x = x.reshape({b, pf, ph, pw, p[0], p[1], p[2], -1}).permute({0, 7, 1, 4, 2, 5, 3, 6});
  return x.reshape({b, c.out_channels, pf * p[0], ph * p[1], pw * p[2]});
}

}  // namespace yeto::wan
