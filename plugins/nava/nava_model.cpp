#include "nava_model.hpp"

#include <ATen/ATen.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::nava {

namespace {

using nlohmann::json;
constexpr const char* kWhere = "WanAVModel config";

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(std::string(kWhere) + ": " + what); }

std::string shape(const at::Tensor& t) { return c10::str(t.sizes()); }

}  // namespace

// ---- config -----------------------------------------------------------------------------------

std::int64_t NavaConfig::audio_hidden() const {
  const std::int64_t h = (8 * dim) / 3;  // int(2 * (4 dim) / 3)
  return 256 * ((h + 255) / 256);
}

NavaConfig NavaConfig::from_json(const json& j) {
  const family::ConfigReader in(j, kWhere);
  NavaConfig c;
  c.patch_size = in.integers("patch_size", c.patch_size);
  c.model_type = in.string("model_type", c.model_type);
  c.dim = in.integer("dim", c.dim);
  c.ffn_dim = in.integer("ffn_dim", c.ffn_dim);
  c.freq_dim = in.integer("freq_dim", c.freq_dim);
  c.num_heads = in.integer("num_heads", c.num_heads);
  c.num_double_layers = in.integer("num_double_layers", c.num_double_layers);
  c.num_single_layers = in.integer("num_single_layers", c.num_single_layers);
  c.vid_in_dim = in.integer("vid_in_dim", c.vid_in_dim);
  c.vid_out_dim = in.integer("vid_out_dim", c.vid_out_dim);
  c.audio_in_dim = in.integer("audio_in_dim", c.audio_in_dim);
  c.audio_out_dim = in.integer("audio_out_dim", c.audio_out_dim);
  c.text_len = in.integer("text_len", c.text_len);
  c.text_dim = in.integer("text_dim", c.text_dim);
  c.eps = in.number("eps", c.eps);
  c.temporal_rope_scaling_factor = in.number("temporal_rope_scaling_factor", c.temporal_rope_scaling_factor);
  c.add_spk_emb = in.boolean("add_spk_emb", c.add_spk_emb);
  const auto layers = in.integer("num_layers", c.num_double_layers + c.num_single_layers);
  const auto final_layers = in.integer("num_double_final_layers", 0);
  if (final_layers != 0) bad("'num_double_final_layers' " + std::to_string(final_layers) + " is not supported (0 in every released config)");
  if (layers != c.num_double_layers + c.num_single_layers)
    bad("'num_layers' " + std::to_string(layers) + " is not num_double_layers + num_single_layers (" +
        std::to_string(c.num_double_layers) + " + " + std::to_string(c.num_single_layers) + ")");
  if (!in.boolean("no_split_norm_ffn", true))
    bad("'no_split_norm_ffn' false (separate audio norm/FFN weights) is not supported; the release uses true");
  if (in.boolean("cross_1d_rope", false)) bad("'cross_1d_rope' true is not supported");
  if (!in.boolean("qk_norm", true)) bad("'qk_norm' false is not supported");
  if (!in.boolean("cross_attn_norm", true)) bad("'cross_attn_norm' false is not supported");
  if (in.present("window_size")) {
    const auto w = in.integers("window_size", {-1, -1});
    if (w.size() != 2 || w[0] != -1 || w[1] != -1) bad("'window_size' must be [-1, -1] (global attention)");
  }
  if (c.model_type != "ti2v" && c.model_type != "t2v")
    bad("'model_type' is '" + c.model_type + "'; supported: ti2v, t2v (the joint audio-video backbone)");
  if (c.patch_size.size() != 3 || c.patch_size[0] != 1 || c.patch_size[1] <= 0 || c.patch_size[2] <= 0)
    bad("'patch_size' must be [1, p, q] with p, q positive");
  for (const char* k : {"dim", "ffn_dim", "freq_dim", "num_heads", "vid_in_dim", "vid_out_dim", "audio_in_dim",
                        "audio_out_dim", "text_len", "text_dim"})
    if (in.integer(k, 1) <= 0) bad(std::string("'") + k + "' must be positive");
  if (c.num_double_layers < 0 || c.num_single_layers < 0) bad("layer counts must not be negative");
  if (c.dim % c.num_heads != 0 || (c.dim / c.num_heads) % 2 != 0)
    bad("'dim' " + std::to_string(c.dim) + " / 'num_heads' " + std::to_string(c.num_heads) + " must be an even head dim");
  if (c.freq_dim % 2 != 0) bad("'freq_dim' must be even");
  if (c.head_dim() < 6) bad("the head dim must be at least 6 (3-D RoPE bands)");
  return c;
}

// ---- RoPE -----------------------------------------------------------------------------------

at::Tensor rope_inv_freq(std::int64_t dim, double scaling, double theta) {
  const auto k = at::arange(0, dim, 2, at::kLong).to(at::kDouble).div(static_cast<double>(dim));
  return scaling * (1.0 / at::pow(theta, k));
}

RopeBands::RopeBands(std::int64_t head_dim) {
  const auto c = head_dim / 2;
  temporal = c - 2 * (c / 3);
  height = c / 3;
  width = c / 3;
}

namespace {

// The three inverse-frequency bands of set_rope_params: rope_params(d - 4 (d//6)) for time,
// rope_params(2 (d//6)) twice for height and width; audio: the temporal one times the scaling.
struct Bands {
  at::Tensor temporal, spatial, audio;
  Bands(std::int64_t d, double scaling) {
    temporal = rope_inv_freq(d - 4 * (d / 6));
    spatial = rope_inv_freq(2 * (d / 6));
    audio = rope_inv_freq(d - 4 * (d / 6), scaling);
  }
};

at::Tensor angles(const at::Tensor& positions, const at::Tensor& inv) {
  return at::outer(positions.to(at::kDouble), inv);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_tables(std::int64_t head_dim, double temporal_scaling,
                                              const at::Tensor& positions) {
  const Bands b(head_dim, temporal_scaling);
  const auto video = at::cat({angles(positions, b.temporal), angles(positions, b.spatial), angles(positions, b.spatial)}, 1);
  const auto audio = angles(positions, b.audio);
  const auto pairs = [](const at::Tensor& a) { return at::stack({at::cos(a), at::sin(a)}, -1); };
  return {pairs(video), pairs(audio)};
}

namespace {

Rotation rotation_of(const std::vector<at::Tensor>& per_sample, std::int64_t half, std::int64_t length) {
  std::vector<at::Tensor> cos, sin;
  for (const auto& a : per_sample) {
    auto c = at::ones({length, half}, at::kDouble);
    auto s = at::zeros({length, half}, at::kDouble);
    const auto n = a.size(0), w = a.size(1);
    c.narrow(0, 0, n).narrow(1, 0, w).copy_(at::cos(a));
    s.narrow(0, 0, n).narrow(1, 0, w).copy_(at::sin(a));
    cos.push_back(c);
    sin.push_back(s);
  }
  return {at::stack(cos).unsqueeze(2), at::stack(sin).unsqueeze(2)};
}

}  // namespace

Rotation video_rotation(std::int64_t head_dim, const std::vector<std::vector<std::int64_t>>& grids,
                        std::int64_t length) {
  const Bands b(head_dim, 1.0);
  std::vector<at::Tensor> per;
  for (const auto& g : grids) {
    const auto f = g[0], h = g[1], w = g[2];
    const auto af = angles(at::arange(f, at::kLong), b.temporal).view({f, 1, 1, -1}).expand({f, h, w, -1});
    const auto ah = angles(at::arange(h, at::kLong), b.spatial).view({1, h, 1, -1}).expand({f, h, w, -1});
    const auto aw = angles(at::arange(w, at::kLong), b.spatial).view({1, 1, w, -1}).expand({f, h, w, -1});
    per.push_back(at::cat({af, ah, aw}, -1).reshape({f * h * w, -1}));
  }
  return rotation_of(per, head_dim / 2, length);
}

Rotation audio_rotation(std::int64_t head_dim, double temporal_scaling, const std::vector<std::int64_t>& lengths,
                        std::int64_t length) {
  const Bands b(head_dim, temporal_scaling);
  std::vector<at::Tensor> per;
  for (const auto l : lengths) per.push_back(angles(at::arange(l, at::kLong), b.audio));
  return rotation_of(per, head_dim / 2, length);
}

Rotation join(const Rotation& video, const Rotation& audio) {
  if (!video.defined()) return audio;
  if (!audio.defined()) return video;
  return {at::cat({video.cos, audio.cos}, 1), at::cat({video.sin, audio.sin}, 1)};
}

at::Tensor apply_rotation(const at::Tensor& x, const Rotation& r) {
  const auto sizes = x.sizes().vec();
  auto pairs = x.to(at::kDouble).reshape({sizes[0], sizes[1], sizes[2], -1, 2});
  const auto a = pairs.select(-1, 0), b = pairs.select(-1, 1);
  const auto cos = r.cos.to(x.device()), sin = r.sin.to(x.device());
  const auto re = a * cos - b * sin;
  const auto im = a * sin + b * cos;
  return at::stack({re, im}, -1).reshape(sizes).to(x.scalar_type());
}

// ---- blocks ---------------------------------------------------------------------------------

GeluMlpImpl::GeluMlpImpl(std::int64_t in, std::int64_t hidden, std::int64_t out) {
  fc0 = register_module("0", nn::Linear(in, hidden));
  fc2 = register_module("2", nn::Linear(hidden, out));
}

at::Tensor GeluMlpImpl::forward(const at::Tensor& x) { return fc2(at::gelu(fc0(x), "tanh")); }

ModulationImpl::ModulationImpl(std::int64_t dim, std::int64_t n) {
  modulation = register_parameter("modulation", at::randn({1, n, dim}) / std::sqrt(static_cast<double>(dim)));
}

namespace {

Projections make_projections(torch::nn::Module& m, std::int64_t dim, double eps, const std::string& suffix) {
  Projections p;
  p.q = m.register_module("q" + suffix, nn::Linear(dim, dim));
  p.k = m.register_module("k" + suffix, nn::Linear(dim, dim));
  p.v = m.register_module("v" + suffix, nn::Linear(dim, dim));
  p.o = m.register_module("o" + suffix, nn::Linear(dim, dim));
  p.norm_q = m.register_module("norm_q" + suffix, nn::RMSNorm(dim, eps));
  p.norm_k = m.register_module("norm_k" + suffix, nn::RMSNorm(dim, eps));
  return p;
}

// [B, L, dim] -> [B, L, heads, head_dim]
at::Tensor heads_of(const at::Tensor& x, std::int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads});
}

// softmax(q k^T / sqrt(d)) v over the keys `keys` marks valid (bool [B, Lk]; undefined: all).
// q, k, v [B, L, heads, d] -> [B, Lq, heads * d].
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& keys) {
  at::Tensor mask;
  if (keys.defined()) mask = keys.to(q.device()).view({keys.size(0), 1, 1, keys.size(1)});
  const auto o = nn::attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask);
  return o.transpose(1, 2).reshape({q.size(0), q.size(1), -1});
}

struct Qkv {
  at::Tensor q, k, v;
};

Qkv self_qkv(Projections& p, const at::Tensor& x, std::int64_t heads) {
  return {heads_of(p.norm_q(p.q(x)), heads), heads_of(p.norm_k(p.k(x)), heads), heads_of(p.v(x), heads)};
}

// The joint (or, with masking_modality, per-modality) self-attention of the two streams' q/k/v,
// before the output projections: [B, Lv + La, dim] (either stream may be absent).
at::Tensor self_attention(const Qkv& v, const Qkv& a, const StreamLayout& s) {
  const bool has_v = v.q.defined(), has_a = a.q.defined();
  if (has_v && has_a && s.joint) {
    const auto rope = join(s.video_rope, s.audio_rope);
    const auto q = apply_rotation(at::cat({v.q, a.q}, 1), rope);
    const auto k = apply_rotation(at::cat({v.k, a.k}, 1), rope);
    return attend(q, k, at::cat({v.v, a.v}, 1), at::cat({s.video_keys, s.audio_keys}, 1));
  }
  std::vector<at::Tensor> parts;
  if (has_v)
    parts.push_back(attend(apply_rotation(v.q, s.video_rope), apply_rotation(v.k, s.video_rope), v.v, s.video_keys));
  if (has_a)
    parts.push_back(attend(apply_rotation(a.q, s.audio_rope), apply_rotation(a.k, s.audio_rope), a.v, s.audio_keys));
  return parts.size() == 1 ? parts[0] : at::cat(parts, 1);
}

at::Tensor cross_attention(Projections& p, const at::Tensor& x, const at::Tensor& context, std::int64_t heads) {
  const auto q = heads_of(p.norm_q(p.q(x)), heads);
  const auto k = heads_of(p.norm_k(p.k(context)), heads);
  const auto v = heads_of(p.v(context), heads);
  return p.o(attend(q, k, v, at::Tensor()));
}

Chunks chunks_of(const at::Tensor& modulation, const at::Tensor& e0) {
  if (!e0.defined()) return {};
  const auto m = modulation.to(e0.scalar_type()) + e0;  // [B, T, 6, dim]
  Chunks out;
  for (std::int64_t i = 0; i < 6; ++i) out.push_back(m.select(2, i));
  return out;
}

at::Tensor modulate(const at::Tensor& normed, const at::Tensor& shift, const at::Tensor& scale) {
  return normed * (1 + scale) + shift;
}

// The two streams' parts of x [B, Lv + La, dim].
std::pair<at::Tensor, at::Tensor> split(const at::Tensor& x, const StreamLayout& s) {
  at::Tensor v, a;
  if (s.video_len > 0) v = x.narrow(1, 0, s.video_len);
  if (s.audio_len > 0) a = x.narrow(1, s.video_len, s.audio_len);
  return {v, a};
}

at::Tensor concat(const at::Tensor& v, const at::Tensor& a) {
  if (!v.defined()) return a;
  if (!a.defined()) return v;
  return at::cat({v, a}, 1);
}

}  // namespace

AttentionImpl::AttentionImpl(std::int64_t dim, std::int64_t heads_, double eps, bool two)
    : heads(heads_), two_streams(two) {
  video = make_projections(*this, dim, eps, "");
  if (two) audio = make_projections(*this, dim, eps, "_audio");
}

DoubleBlockImpl::DoubleBlockImpl(const NavaConfig& c) {
  norm1 = register_module("norm1", nn::LayerNorm(c.dim, c.eps, /*elementwise_affine=*/false));
  self_attn = register_module("self_attn", Attention(c.dim, c.num_heads, c.eps, true));
  norm3 = register_module("norm3", nn::LayerNorm(c.dim, c.eps, true));
  cross_attn = register_module("cross_attn", Attention(c.dim, c.num_heads, c.eps, true));
  norm2 = register_module("norm2", nn::LayerNorm(c.dim, c.eps, false));
  ffn = register_module("ffn", GeluMlp(c.dim, c.ffn_dim, c.dim));
  modulation = register_module("modulation", Modulation(c.dim, 6));
  modulation_audio = register_module("modulation_audio", Modulation(c.dim, 6));
}

at::Tensor DoubleBlockImpl::forward(const at::Tensor& x, const at::Tensor& e_video, const at::Tensor& e_audio,
                                    const StreamLayout& s) {
  auto [xv, xa] = split(x, s);
  const auto mv = chunks_of(modulation->modulation, e_video);
  const auto ma = chunks_of(modulation_audio->modulation, e_audio);
  const auto heads = self_attn->heads;
  Qkv qv, qa;
  if (xv.defined()) qv = self_qkv(self_attn->video, modulate(norm1(xv), mv[0], mv[1]), heads);
  if (xa.defined()) qa = self_qkv(self_attn->audio, modulate(norm1(xa), ma[0], ma[1]), heads);
  const auto y = self_attention(qv, qa, s);
  const auto [yv, ya] = split(y, s);
  if (xv.defined()) xv = xv + self_attn->video.o(yv) * mv[2];
  if (xa.defined()) xa = xa + self_attn->audio.o(ya) * ma[2];
  if (xv.defined()) {
    xv = xv + cross_attention(cross_attn->video, norm3(xv), s.context, heads);
    xv = xv + ffn(modulate(norm2(xv), mv[3], mv[4])) * mv[5];
  }
  if (xa.defined()) {
    xa = xa + cross_attention(cross_attn->audio, norm3(xa), s.context, heads);
    xa = xa + ffn(modulate(norm2(xa), ma[3], ma[4])) * ma[5];
  }
  return concat(xv, xa);
}

SingleBlockImpl::SingleBlockImpl(const NavaConfig& c) {
  norm1 = register_module("norm1", nn::LayerNorm(c.dim, c.eps, false));
  self_attn = register_module("self_attn", Attention(c.dim, c.num_heads, c.eps, false));
  norm3 = register_module("norm3", nn::LayerNorm(c.dim, c.eps, true));
  cross_attn = register_module("cross_attn", Attention(c.dim, c.num_heads, c.eps, false));
  norm2 = register_module("norm2", nn::LayerNorm(c.dim, c.eps, false));
  ffn = register_module("ffn", GeluMlp(c.dim, c.ffn_dim, c.dim));
  modulation = register_module("modulation", Modulation(c.dim, 6));
}

at::Tensor SingleBlockImpl::forward(const at::Tensor& x, const at::Tensor& e_video, const at::Tensor& e_audio,
                                    const StreamLayout& s) {
  // One modulation table over the concatenated stream: each part takes its own time projection.
  const auto mv = chunks_of(modulation->modulation, e_video);
  const auto ma = chunks_of(modulation->modulation, e_audio);
  const auto heads = self_attn->heads;
  auto per_part = [&](const at::Tensor& full, std::int64_t shift, std::int64_t scale) {
    const auto [v, a] = split(full, s);
    return concat(v.defined() ? modulate(v, mv[shift], mv[scale]) : v, a.defined() ? modulate(a, ma[shift], ma[scale]) : a);
  };
  auto gated = [&](const at::Tensor& y, std::int64_t gate) {
    const auto [v, a] = split(y, s);
    return concat(v.defined() ? v * mv[gate] : v, a.defined() ? a * ma[gate] : a);
  };
  const auto qkv = self_qkv(self_attn->video, per_part(norm1(x), 0, 1), heads);
  Qkv qv, qa;
  const auto pick = [&](const at::Tensor& t, std::int64_t from, std::int64_t len) { return t.narrow(1, from, len); };
  if (s.video_len > 0) qv = {pick(qkv.q, 0, s.video_len), pick(qkv.k, 0, s.video_len), pick(qkv.v, 0, s.video_len)};
  if (s.audio_len > 0)
    qa = {pick(qkv.q, s.video_len, s.audio_len), pick(qkv.k, s.video_len, s.audio_len),
          pick(qkv.v, s.video_len, s.audio_len)};
  auto out = x + gated(self_attn->video.o(self_attention(qv, qa, s)), 2);
  out = out + cross_attention(cross_attn->video, norm3(out), s.context, heads);
  return out + gated(ffn(per_part(norm2(out), 3, 4)), 5);
}

HeadImpl::HeadImpl(std::int64_t dim, std::int64_t out, double eps) {
  norm = register_module("norm", nn::LayerNorm(dim, eps, false));
  head = register_module("head", nn::Linear(dim, out));
  modulation = register_parameter("modulation", at::randn({1, 2, dim}) / std::sqrt(static_cast<double>(dim)));
}

at::Tensor HeadImpl::forward(const at::Tensor& x, const at::Tensor& e) {
  const auto m = modulation.to(e.scalar_type()).unsqueeze(0) + e.unsqueeze(2);  // [B, T, 2, dim]
  return head(modulate(norm(x), m.select(2, 0), m.select(2, 1)));
}

AudioEmbeddingImpl::AudioEmbeddingImpl(std::int64_t in, std::int64_t dim, std::int64_t hidden) {
  conv = register_module("0", torch::nn::Conv1d(torch::nn::Conv1dOptions(in, dim, 7).padding(3)));
  mlp = register_module("2", std::make_shared<torch::nn::Module>());
  w1 = mlp->register_module("w1", torch::nn::Conv1d(torch::nn::Conv1dOptions(dim, hidden, 7).padding(3).bias(false)));
  w2 = mlp->register_module("w2", torch::nn::Conv1d(torch::nn::Conv1dOptions(hidden, dim, 7).padding(3).bias(false)));
  w3 = mlp->register_module("w3", torch::nn::Conv1d(torch::nn::Conv1dOptions(dim, hidden, 7).padding(3).bias(false)));
}

at::Tensor AudioEmbeddingImpl::forward(const at::Tensor& audio) {
  const auto x = at::silu(conv(audio.t().unsqueeze(0)));  // [1, dim, L]
  return w2(at::silu(w1(x)) * w3(x)).squeeze(0).t();     // [L, dim]
}

SpeakerEmbeddingImpl::SpeakerEmbeddingImpl(std::int64_t dim) {
  net = register_module("net", std::make_shared<torch::nn::Module>());
  in_norm = net->register_module("0", nn::LayerNorm(NavaConfig::kSpeakerDim, 1e-5, true));
  fc1 = net->register_module("1", nn::Linear(NavaConfig::kSpeakerDim, dim));
  fc3 = net->register_module("3", nn::Linear(dim, dim));
  out_norm = register_module("out_norm", nn::LayerNorm(dim, 1e-5, true));
  null_token = register_parameter("null_token", at::zeros({1, dim}));
}

at::Tensor SpeakerEmbeddingImpl::forward(const at::Tensor& spk) {
  const auto fake = spk.to(at::kFloat).pow(2).sum(-1) <= 1e-6;  // [n]
  const auto emb = out_norm(fc3(at::silu(fc1(in_norm(spk)))));
  const auto m = (~fake).to(emb.scalar_type()).view({-1, 1});
  return null_token.to(emb.scalar_type()).expand({spk.size(0), -1}) * (1 - m) + emb * m;
}

// ---- the model ------------------------------------------------------------------------------

at::Tensor sinusoidal_embedding(std::int64_t dim, const at::Tensor& t) {
  const auto half = dim / 2;
  const auto position = t.to(at::kDouble);
  const auto freqs = at::pow(10000.0, -at::arange(half, position.options()).div(static_cast<double>(half)));
  const auto s = at::outer(position, freqs);
  return at::cat({at::cos(s), at::sin(s)}, 1);
}

WanAVModelImpl::WanAVModelImpl(const NavaConfig& c) : config_(c) {
  const auto& p = c.patch_size;
  patch_embedding = register_module(
      "patch_embedding", torch::nn::Conv3d(torch::nn::Conv3dOptions(c.vid_in_dim, c.dim, {p[0], p[1], p[2]})
                                               .stride({p[0], p[1], p[2]})));
  patch_embedding_audio =
      register_module("patch_embedding_audio", AudioEmbedding(c.audio_in_dim, c.dim, c.audio_hidden()));
  if (c.add_spk_emb) speaker_embedding = register_module("speaker_embedding", SpeakerEmbedding(c.dim));
  text_embedding = register_module("text_embedding", GeluMlp(c.text_dim, c.dim, c.dim));
  time_embedding = register_module("time_embedding", std::make_shared<torch::nn::Module>());
  time_fc0 = time_embedding->register_module("0", nn::Linear(c.freq_dim, c.dim));
  time_fc2 = time_embedding->register_module("2", nn::Linear(c.dim, c.dim));
  time_projection = register_module("time_projection", std::make_shared<torch::nn::Module>());
  time_proj = time_projection->register_module("1", nn::Linear(c.dim, 6 * c.dim));
  double_blocks = register_module("double_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_double_layers; ++i) double_blocks->push_back(DoubleBlock(c));
  single_blocks = register_module("single_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_single_layers; ++i) single_blocks->push_back(SingleBlock(c));
  head = register_module("head", Head(c.dim, p[0] * p[1] * p[2] * c.vid_out_dim, c.eps));
  head_audio = register_module("head_audio", Head(c.dim, c.audio_out_dim, c.eps));
}

std::pair<at::Tensor, at::Tensor> WanAVModelImpl::time_embeddings(const at::Tensor& t) {
  const auto b = t.size(0), n = t.size(1);
  const auto sin = sinusoidal_embedding(config_.freq_dim, t.flatten()).to(compute_dtype());
  const auto e = time_fc2(at::silu(time_fc0(sin)));  // [B T, dim]
  const auto e0 = time_proj(at::silu(e));
  return {e.view({b, n, config_.dim}), e0.view({b, n, 6, config_.dim})};
}

Outputs WanAVModelImpl::forward(const Inputs& in, const Recorder& record) {
  const auto& c = config_;
  const bool has_v = !in.video.empty(), has_a = !in.audio.empty();
  if (!has_v && !has_a) throw std::invalid_argument("WanAVModel: neither video nor audio latents");
  if (!in.t.defined() || in.t.dim() != 1) throw std::invalid_argument("WanAVModel: 't' must be [B] timesteps");
  const auto b = in.t.size(0);
  const auto dev = device();
  const auto dtype = compute_dtype();
  auto count = [&](std::size_t n, const char* what) {
    if (static_cast<std::int64_t>(n) != b)
      throw std::invalid_argument(std::string("WanAVModel: ") + what + " has " + std::to_string(n) +
                                  " samples for a batch of " + std::to_string(b) + " timesteps");
  };
  const auto t = in.t.to(dev).to(at::kFloat);
  StreamLayout s;
  s.batch = b;
  s.joint = !in.masking_modality;
  const auto& p = c.patch_size;

  // Video tokens.
  at::Tensor xv, ev, ev0;
  std::vector<std::vector<std::int64_t>> grids;
  if (has_v) {
    count(in.video.size(), "the video list");
    std::vector<at::Tensor> tokens;
    for (std::size_t i = 0; i < in.video.size(); ++i) {
      const auto& u = in.video[i];
      if (u.dim() != 4 || u.size(0) != c.vid_in_dim || u.size(1) % p[0] != 0 || u.size(2) % p[1] != 0 ||
          u.size(3) % p[2] != 0)
        throw std::invalid_argument("WanAVModel: video latents " + std::to_string(i) + " must be [" +
                                    std::to_string(c.vid_in_dim) + ", F, H, W] with H, W multiples of " +
                                    std::to_string(p[1]) + ", " + std::to_string(p[2]) + "; got " + shape(u));
      const auto x = patch_embedding(u.to(dev, dtype).unsqueeze(0));  // [1, dim, f, h, w]
      grids.push_back({x.size(2), x.size(3), x.size(4)});
      tokens.push_back(x.flatten(2).transpose(1, 2));
      s.video_seq.push_back(tokens.back().size(1));
    }
    const auto longest = *std::max_element(s.video_seq.begin(), s.video_seq.end());
    s.video_len = in.video_seq_len > 0 ? in.video_seq_len : longest;
    if (longest > s.video_len)
      throw std::invalid_argument("WanAVModel: " + std::to_string(longest) + " video tokens exceed vid_seq_len " +
                                  std::to_string(s.video_len));
    for (auto& x : tokens) x = at::constant_pad_nd(x, {0, 0, 0, s.video_len - x.size(1)});
    xv = at::cat(tokens, 0);
    auto tv = t.unsqueeze(1);
    if (in.first_frame_is_clean) {
      tv = tv.expand({b, s.video_len}).clone();
      for (std::int64_t i = 0; i < b; ++i) tv[i].narrow(0, 0, grids[i][1] * grids[i][2]).zero_();
    }
    std::tie(ev, ev0) = time_embeddings(tv);
    s.video_keys = at::arange(s.video_len, at::kLong).unsqueeze(0) <
                   at::tensor(s.video_seq, at::kLong).unsqueeze(1);
    s.video_rope = video_rotation(c.head_dim(), grids, s.video_len);
    if (record) {
      record("intermediate.video.x_embedded", xv);
      record("intermediate.video.time_embedding", ev.expand({b, s.video_len, c.dim}));
      record("intermediate.video.time_projection", ev0.expand({b, s.video_len, 6, c.dim}));
    }
  }

  // Audio tokens.
  at::Tensor xa, ea, ea0;
  if (has_a) {
    count(in.audio.size(), "the audio list");
    std::vector<at::Tensor> tokens;
    for (std::size_t i = 0; i < in.audio.size(); ++i) {
      const auto& u = in.audio[i];
      if (u.dim() != 2 || u.size(1) != c.audio_in_dim || u.size(0) < 1)
        throw std::invalid_argument("WanAVModel: audio latents " + std::to_string(i) + " must be [L, " +
                                    std::to_string(c.audio_in_dim) + "]; got " + shape(u));
      tokens.push_back(patch_embedding_audio(u.to(dev, dtype)).unsqueeze(0));
      s.audio_seq.push_back(u.size(0));
    }
    const auto longest = *std::max_element(s.audio_seq.begin(), s.audio_seq.end());
    s.audio_len = in.audio_seq_len > 0 ? in.audio_seq_len : longest;
    if (longest > s.audio_len)
      throw std::invalid_argument("WanAVModel: " + std::to_string(longest) + " audio tokens exceed audio_seq_len " +
                                  std::to_string(s.audio_len));
    for (auto& x : tokens) x = at::constant_pad_nd(x, {0, 0, 0, s.audio_len - x.size(1)});
    xa = at::cat(tokens, 0);
    std::tie(ea, ea0) = time_embeddings(t.unsqueeze(1));
    s.audio_keys = at::arange(s.audio_len, at::kLong).unsqueeze(0) <
                   at::tensor(s.audio_seq, at::kLong).unsqueeze(1);
    s.audio_rope = audio_rotation(c.head_dim(), c.temporal_rope_scaling_factor, s.audio_seq, s.audio_len);
    if (record) {
      record("intermediate.audio.x_embedded", xa);
      record("intermediate.audio.time_embedding", ea.expand({b, s.audio_len, c.dim}));
      record("intermediate.audio.time_projection", ea0.expand({b, s.audio_len, 6, c.dim}));
    }
  }

  // Text: zero rows up to text_len, text_embedding on every row; the speaker tokens overwrite
  // rows of the audio context. The blocks use the audio context when a speaker is given (or there
  // is no video), else the video context.
  auto check_text = [&](const std::vector<at::Tensor>& list, const char* what) {
    count(list.size(), what);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& u = list[i];
      if (u.dim() != 2 || u.size(1) != c.text_dim || u.size(0) > c.text_len)
        throw std::invalid_argument(std::string("WanAVModel: ") + what + " " + std::to_string(i) +
                                    " must be [L <= " + std::to_string(c.text_len) + ", " + std::to_string(c.text_dim) +
                                    "]; got " + shape(u));
    }
  };
  if (has_v) check_text(in.video_context, "the video context");
  if (has_a) check_text(in.audio_context, "the audio context");
  auto embed_text = [&](const std::vector<at::Tensor>& list) {
    std::vector<at::Tensor> rows;
    for (const auto& u : list) rows.push_back(at::constant_pad_nd(u.to(dev, dtype), {0, 0, 0, c.text_len - u.size(0)}));
    return text_embedding(at::stack(rows));
  };
  const bool use_audio_context = !has_v || in.speaker.defined();
  at::Tensor video_context, audio_context;
  if (has_v && (!use_audio_context || record)) {
    video_context = embed_text(in.video_context);
    if (record) record("intermediate.video.context", video_context);
  }
  if (has_a && (use_audio_context || record)) {
    audio_context = embed_text(in.audio_context);
    std::vector<std::int64_t> rows;
    for (std::size_t i = 0; i < in.speaker_positions.size(); ++i)
      for (const auto pos : in.speaker_positions[i]) {
        if (pos < 0 || pos >= c.text_len)
          throw std::invalid_argument("WanAVModel: speaker position " + std::to_string(pos) + " of sample " +
                                      std::to_string(i) + " is outside the text (" + std::to_string(c.text_len) +
                                      " rows)");
        rows.push_back(static_cast<std::int64_t>(i) * c.text_len + pos);
      }
    if (in.speaker.defined() && c.add_spk_emb && !rows.empty()) {
      if (in.speaker.dim() != 2 || in.speaker.size(1) != NavaConfig::kSpeakerDim ||
          in.speaker.size(0) != static_cast<std::int64_t>(rows.size()))
        throw std::invalid_argument("WanAVModel: the speaker embeddings must be [" + std::to_string(rows.size()) +
                                    ", 192] (one per speaker position); got " + shape(in.speaker));
      const auto spk = speaker_embedding(in.speaker.to(dev, dtype));
      audio_context = audio_context.reshape({-1, c.dim})
                          .index_put({at::tensor(rows, at::kLong).to(dev)}, spk)
                          .view({b, c.text_len, c.dim});
    }
    if (record) record("intermediate.audio.context", audio_context);
  }
  const auto context = use_audio_context ? audio_context : video_context;

  // Blocks.
  auto x = concat(xv, xa);
  std::int64_t index = 0;
  auto run = [&](torch::nn::Module& block, bool is_double) {
    std::vector<at::Tensor> args = {x, context};
    if (ev0.defined()) args.push_back(ev0);
    if (ea0.defined()) args.push_back(ea0);
    // Everything by value: a checkpointed block runs again in backward, after forward returned.
    const bool has_ev = ev0.defined(), has_ea = ea0.defined();
    torch::nn::Module* module = &block;
    const auto fn = [layout = s, has_ev, has_ea, module, is_double](const std::vector<at::Tensor>& a) {
      StreamLayout local = layout;
      local.context = a[1];
      std::size_t k = 2;
      const auto e_v = has_ev ? a[k++] : at::Tensor();
      const auto e_a = has_ea ? a[k++] : at::Tensor();
      if (is_double) return std::vector<at::Tensor>{static_cast<DoubleBlockImpl*>(module)->forward(a[0], e_v, e_a, local)};
      return std::vector<at::Tensor>{static_cast<SingleBlockImpl*>(module)->forward(a[0], e_v, e_a, local)};
    };
    x = run_block(index++, fn, args)[0];
  };
  for (std::size_t i = 0; i < double_blocks->size(); ++i) {
    run(*double_blocks[i], true);
    if (record) record("intermediate.double_blocks." + std::to_string(i), x);
  }
  for (std::size_t i = 0; i < single_blocks->size(); ++i) {
    run(*single_blocks[i], false);
    if (record) record("intermediate.single_blocks." + std::to_string(i), x);
  }

  // Heads.
  Outputs out;
  const auto [fv, fa] = split(x, s);
  if (has_v) {
    const auto y = head(fv, ev);
    for (std::int64_t i = 0; i < b; ++i) {
      const auto& g = grids[static_cast<std::size_t>(i)];
      const auto u = y[i].narrow(0, 0, g[0] * g[1] * g[2]).view({g[0], g[1], g[2], p[0], p[1], p[2], c.vid_out_dim});
      out.video.push_back(u.permute({6, 0, 3, 1, 4, 2, 5}).reshape({c.vid_out_dim, g[0] * p[0], g[1] * p[1], g[2] * p[2]}));
    }
  }
  if (has_a) {
    const auto y = head_audio(fa, ea);
    for (std::int64_t i = 0; i < b; ++i) out.audio.push_back(y[i].narrow(0, 0, s.audio_seq[static_cast<std::size_t>(i)]));
  }
  return out;
}

}  // namespace yeto::nava
