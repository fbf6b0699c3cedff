#include "protenix_diffusion.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace yeto::protenix {

using nlohmann::json;

namespace {

constexpr double kLayerNormEps = 1e-5;
constexpr double kInf = 1e10;
constexpr double kPi = 3.14159265358979323846;

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

std::int64_t integer(const json& j, const std::string& key, std::int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer() || j[key].get<std::int64_t>() <= 0)
    throw std::invalid_argument("'" + key + "' must be a positive integer");
  return j[key].get<std::int64_t>();
}

StackConfig stack(const json& j, const std::string& key, StackConfig fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_object()) throw std::invalid_argument("'" + key + "' must be an object {n_blocks, n_heads}");
  const json& s = j[key];
  StackConfig c;
  c.n_blocks = integer(s, "n_blocks", fallback.n_blocks);
  c.n_heads = integer(s, "n_heads", fallback.n_heads);
  if (s.contains("drop_path_rate") && s["drop_path_rate"].is_number() && s["drop_path_rate"].get<double>() != 0.0)
    throw std::invalid_argument("'" + key + ".drop_path_rate' must be 0 (drop paths are not implemented)");
  return c;
}

// Trunk layout of rearrange_qk_to_dense_trunk for n atoms.
struct Trunks {
  std::int64_t n, count, q_pad, pad_left, pad_right;
};

Trunks trunks_of(std::int64_t n, std::int64_t nq, std::int64_t nk) {
  Trunks t;
  t.n = n;
  t.count = (n + nq - 1) / nq;
  t.q_pad = t.count * nq - n;
  t.pad_left = (nk - nq) / 2;
  t.pad_right = static_cast<std::int64_t>((static_cast<double>(t.count) - 0.5) * static_cast<double>(nq) +
                                          static_cast<double>(nk) / 2.0 - static_cast<double>(n) + 0.5);
  return t;
}

// x [..., n, C] -> [..., n_trunks, nq, C] (zero-padded queries).
at::Tensor query_trunks(const at::Tensor& x, const Trunks& t, std::int64_t nq) {
  auto padded = at::constant_pad_nd(x, {0, 0, 0, t.q_pad});
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end() - 2);
  shape.push_back(t.count);
  shape.push_back(nq);
  shape.push_back(x.size(-1));
  return padded.reshape(shape);
}

// x [..., n, C] -> [..., n_trunks, nk, C] (sliding windows of nk keys, step nq).
at::Tensor key_trunks(const at::Tensor& x, const Trunks& t, std::int64_t nq, std::int64_t nk) {
  auto padded = at::constant_pad_nd(x, {0, 0, t.pad_left, t.pad_right});
  return padded.unfold(-2, nk, nq).movedim(-1, -2);
}

// The same for an index vector [n] -> [n_trunks, nq] / [n_trunks, nk] (padding 0).
at::Tensor query_trunks_1d(const at::Tensor& x, const Trunks& t, std::int64_t nq) {
  return at::constant_pad_nd(x, {0, t.q_pad}).reshape({t.count, nq});
}
at::Tensor key_trunks_1d(const at::Tensor& x, const Trunks& t, std::int64_t nq, std::int64_t nk) {
  return at::constant_pad_nd(x, {t.pad_left, t.pad_right}).unfold(0, nk, nq);
}

// 1 where both the query and the key of a trunk entry are real atoms: [n_trunks, nq, nk] bool.
at::Tensor trunk_validity(const Trunks& t, std::int64_t nq, std::int64_t nk, const at::TensorOptions& opt) {
  auto o = opt.dtype(at::kLong);
  auto base = at::arange(t.count, o).mul(nq).view({t.count, 1, 1});
  auto qi = base + at::arange(nq, o).view({1, nq, 1});
  auto kj = base + at::arange(nk, o).view({1, 1, nk}) - t.pad_left;
  return (qi < t.n).logical_and(kj >= 0).logical_and(kj < t.n);
}

}  // namespace

DiffusionConfig DiffusionConfig::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the DiffusionModule config must be a JSON object");
  DiffusionConfig c;
  if (j.contains("sigma_data") && !j["sigma_data"].is_null()) {
    if (!j["sigma_data"].is_number() || j["sigma_data"].get<double>() <= 0)
      throw std::invalid_argument("'sigma_data' must be a positive number");
    c.sigma_data = j["sigma_data"].get<double>();
  }
  c.c_atom = integer(j, "c_atom", c.c_atom);
  c.c_atompair = integer(j, "c_atompair", c.c_atompair);
  c.c_token = integer(j, "c_token", c.c_token);
  c.c_s = integer(j, "c_s", c.c_s);
  c.c_z = integer(j, "c_z", c.c_z);
  c.c_s_inputs = integer(j, "c_s_inputs", c.c_s_inputs);
  c.atom_encoder = stack(j, "atom_encoder", c.atom_encoder);
  c.transformer = stack(j, "transformer", c.transformer);
  c.atom_decoder = stack(j, "atom_decoder", c.atom_decoder);
  if (j.contains("drop_path_rate") && j["drop_path_rate"].is_number() && j["drop_path_rate"].get<double>() != 0.0)
    throw std::invalid_argument("'drop_path_rate' must be 0 (drop paths are not implemented)");
  if (c.c_token % c.transformer.n_heads)
    throw std::invalid_argument("'c_token' (" + std::to_string(c.c_token) + ") must divide by transformer.n_heads (" +
                                std::to_string(c.transformer.n_heads) + ")");
  if (c.c_atom % c.atom_encoder.n_heads || c.c_atom % c.atom_decoder.n_heads)
    throw std::invalid_argument("'c_atom' (" + std::to_string(c.c_atom) +
                                ") must divide by atom_encoder.n_heads and atom_decoder.n_heads");
  return c;
}

// ---- derived features ---------------------------------------------------------------------------

at::Tensor relative_position_features(const at::Tensor& asym_id, const at::Tensor& residue_index,
                                      const at::Tensor& entity_id, const at::Tensor& token_index,
                                      const at::Tensor& sym_id, std::int64_t r_max, std::int64_t s_max) {
  auto pair_eq = [](const at::Tensor& x) { return x.unsqueeze(-1).eq(x.unsqueeze(-2)); };
  auto pair_diff = [](const at::Tensor& x) { return x.unsqueeze(-1) - x.unsqueeze(-2); };
  const auto same_chain = pair_eq(asym_id);
  const auto same_residue = pair_eq(residue_index);
  const auto same_entity = pair_eq(entity_id);
  const auto far = [](std::int64_t m) { return m * 2 + 1; };
  auto d_residue = at::where(same_chain, at::clamp(pair_diff(residue_index) + r_max, 0, 2 * r_max),
                             at::full({}, far(r_max), residue_index.options()));
  auto d_token = at::where(same_chain.logical_and(same_residue), at::clamp(pair_diff(token_index) + r_max, 0, 2 * r_max),
                           at::full({}, far(r_max), token_index.options()));
  // Protenix compares sym_id within an entity (AF3's Algorithm 3 says across chains).
  auto d_chain = at::where(same_entity, at::clamp(pair_diff(sym_id) + s_max, 0, 2 * s_max),
                           at::full({}, far(s_max), sym_id.options()));
  const auto opt = at::TensorOptions().dtype(at::kFloat).device(asym_id.device());
  return at::cat({at::one_hot(d_residue, 2 * r_max + 2).to(opt), at::one_hot(d_token, 2 * r_max + 2).to(opt),
                  same_entity.unsqueeze(-1).to(opt), at::one_hot(d_chain, 2 * s_max + 2).to(opt)},
                 -1);
}

LocalAtomFeatures local_atom_features(const at::Tensor& ref_pos, const at::Tensor& ref_space_uid, std::int64_t nq,
                                      std::int64_t nk) {
  const Trunks t = trunks_of(ref_pos.size(0), nq, nk);
  const auto q = query_trunks(ref_pos, t, nq);       // [nt, nq, 3]
  const auto k = key_trunks(ref_pos, t, nq, nk);     // [nt, nk, 3]
  const auto uq = query_trunks_1d(ref_space_uid, t, nq);
  const auto uk = key_trunks_1d(ref_space_uid, t, nq, nk);
  LocalAtomFeatures f;
  f.d_lm = q.unsqueeze(-2) - k.unsqueeze(-3);
  f.v_lm = uq.unsqueeze(-1).eq(uk.unsqueeze(-2)).unsqueeze(-1);
  f.mask_trunked = trunk_validity(t, nq, nk, ref_pos.options());
  return f;
}

// ---- modules ----------------------------------------------------------------------------------

LayerNormImpl::LayerNormImpl(std::int64_t d, bool scale, bool offset) : dim(d) {
  if (scale) weight = register_parameter("weight", at::ones({d}));
  if (offset) bias = register_parameter("bias", at::zeros({d}));
}

at::Tensor LayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {dim}, weight, bias, kLayerNormEps);
}

TransitionImpl::TransitionImpl(std::int64_t c, std::int64_t n) {
  layernorm1 = register_module("layernorm1", LayerNorm(c, true, true));
  linear_no_bias_a = register_module("linear_no_bias_a", nn::Linear(c, n * c, false));
  linear_no_bias_b = register_module("linear_no_bias_b", nn::Linear(c, n * c, false));
  linear_no_bias = register_module("linear_no_bias", nn::Linear(n * c, c, false));
}

at::Tensor TransitionImpl::forward(const at::Tensor& x) {
  const auto y = layernorm1(x);
  return linear_no_bias(at::silu(linear_no_bias_a(y)) * linear_no_bias_b(y));
}

AdaptiveLayerNormImpl::AdaptiveLayerNormImpl(std::int64_t c_a, std::int64_t c_s) {
  layernorm_a = register_module("layernorm_a", LayerNorm(c_a, false, false));
  layernorm_s = register_module("layernorm_s", LayerNorm(c_s, true, false));
  linear_s = register_module("linear_s", nn::Linear(c_s, c_a, true));
  linear_nobias_s = register_module("linear_nobias_s", nn::Linear(c_s, c_a, false));
}

at::Tensor AdaptiveLayerNormImpl::forward(const at::Tensor& a, const at::Tensor& s) {
  const auto an = layernorm_a(a);
  const auto sn = layernorm_s(s);
  return at::sigmoid(linear_s(sn)) * an + linear_nobias_s(sn);
}

AttentionImpl::AttentionImpl(std::int64_t c, std::int64_t h) : heads(h), head_dim(c / h) {
  linear_q = register_module("linear_q", nn::Linear(c, c, true));
  linear_k = register_module("linear_k", nn::Linear(c, c, false));
  linear_v = register_module("linear_v", nn::Linear(c, c, false));
  linear_o = register_module("linear_o", nn::Linear(c, c, false));
  linear_g = register_module("linear_g", nn::Linear(c, c, false));
}

at::Tensor AttentionImpl::forward(const at::Tensor& q_x, const at::Tensor& kv_x, const at::Tensor& bias,
                                  std::int64_t nq, std::int64_t nk) {
  auto heads_of = [&](const at::Tensor& x) {
    std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
    shape.push_back(heads);
    shape.push_back(head_dim);
    return x.view(shape).transpose(-2, -3);  // [..., H, N, d]
  };
  auto q = heads_of(linear_q(q_x)) / std::sqrt(static_cast<double>(head_dim));
  auto k = heads_of(linear_k(kv_x));
  auto v = heads_of(linear_v(kv_x));
  at::Tensor o;
  if (nq > 0) {
    const std::int64_t n = q.size(-2);
    const Trunks t = trunks_of(n, nq, nk);
    const auto qt = query_trunks(q, t, nq);      // [..., H, nt, nq, d]
    const auto kt = key_trunks(k, t, nq, nk);    // [..., H, nt, nk, d]
    const auto vt = key_trunks(v, t, nq, nk);
    const auto mask = at::where(trunk_validity(t, nq, nk, q.options()), at::zeros({}, q.options()),
                                at::full({}, -kInf, q.options()));
    const auto logits = at::matmul(qt, kt.transpose(-1, -2)) + (mask + bias);
    auto out = at::matmul(at::softmax(logits, -1), vt);  // [..., H, nt, nq, d]
    std::vector<std::int64_t> shape(out.sizes().begin(), out.sizes().end() - 3);
    shape.push_back(t.count * nq);
    shape.push_back(head_dim);
    o = out.reshape(shape).narrow(-2, 0, n);
  } else {
    const auto logits = at::matmul(q, k.transpose(-1, -2)) + bias;
    o = at::matmul(at::softmax(logits, -1), v);
  }
  o = o.transpose(-2, -3);  // [..., N, H, d]
  const auto g = at::sigmoid(linear_g(q_x));
  std::vector<std::int64_t> gshape(g.sizes().begin(), g.sizes().end() - 1);
  gshape.push_back(heads);
  gshape.push_back(head_dim);
  o = (o * g.view(gshape)).flatten(-2);
  return linear_o(o);
}

AttentionPairBiasImpl::AttentionPairBiasImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z, std::int64_t heads,
                                             bool cross) {
  layernorm_a = register_module("layernorm_a", AdaptiveLayerNorm(c_a, c_s));
  if (cross) layernorm_kv = register_module("layernorm_kv", AdaptiveLayerNorm(c_a, c_s));
  attention = register_module("attention", Attention(c_a, heads));
  layernorm_z = register_module("layernorm_z", LayerNorm(c_z, true, false));
  linear_nobias_z = register_module("linear_nobias_z", nn::Linear(c_z, heads, false));
  linear_a_last = register_module("linear_a_last", nn::Linear(c_s, c_a, true));
}

at::Tensor AttentionPairBiasImpl::forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& z,
                                          std::int64_t nq, std::int64_t nk) {
  const auto an = layernorm_a(a, s);
  // Protenix normalises the key/value input from the already normalised a.
  const auto kv = layernorm_kv ? layernorm_kv(an, s) : an;
  // [..., (n_trunks,) Q, K, H] -> [..., H, (n_trunks,) Q, K]
  const auto bias = linear_nobias_z(layernorm_z(z)).movedim(-1, nq > 0 ? -4 : -3);
  const auto o = attention(an, kv, bias, nq, nk);
  return at::sigmoid(linear_a_last(s)) * o;
}

ConditionedTransitionBlockImpl::ConditionedTransitionBlockImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t n) {
  adaln = register_module("adaln", AdaptiveLayerNorm(c_a, c_s));
  linear_nobias_a1 = register_module("linear_nobias_a1", nn::Linear(c_a, n * c_a, false));
  linear_nobias_a2 = register_module("linear_nobias_a2", nn::Linear(c_a, n * c_a, false));
  linear_nobias_b = register_module("linear_nobias_b", nn::Linear(n * c_a, c_a, false));
  linear_s = register_module("linear_s", nn::Linear(c_s, c_a, true));
}

at::Tensor ConditionedTransitionBlockImpl::forward(const at::Tensor& a, const at::Tensor& s) {
  const auto an = adaln(a, s);
  const auto b = at::silu(linear_nobias_a1(an)) * linear_nobias_a2(an);
  return at::sigmoid(linear_s(s)) * linear_nobias_b(b);
}

DiffusionTransformerBlockImpl::DiffusionTransformerBlockImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z,
                                                             std::int64_t heads, bool cross) {
  attention_pair_bias = register_module("attention_pair_bias", AttentionPairBias(c_a, c_s, c_z, heads, cross));
  conditioned_transition_block = register_module("conditioned_transition_block", ConditionedTransitionBlock(c_a, c_s));
}

at::Tensor DiffusionTransformerBlockImpl::forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& z,
                                                  std::int64_t nq, std::int64_t nk) {
  const auto attn_out = attention_pair_bias(a, s, z, nq, nk) + a;
  return conditioned_transition_block(attn_out, s) + attn_out;
}

DiffusionTransformerImpl::DiffusionTransformerImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z,
                                                   const StackConfig& st, bool cross) {
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < st.n_blocks; ++i) blocks->push_back(DiffusionTransformerBlock(c_a, c_s, c_z, st.n_heads, cross));
}

DiffusionConditioningImpl::DiffusionConditioningImpl(const DiffusionConfig& c) {
  relpe = register_module("relpe", std::make_shared<torch::nn::Module>());
  relpe_linear = relpe->register_module("linear_no_bias", nn::Linear(2 * (2 * 32 + 2) + 1 + (2 * 2 + 2), c.c_z, false));
  layernorm_z = register_module("layernorm_z", LayerNorm(2 * c.c_z, true, false));
  linear_no_bias_z = register_module("linear_no_bias_z", nn::Linear(2 * c.c_z, c.c_z, false));
  transition_z1 = register_module("transition_z1", Transition(c.c_z, 2));
  transition_z2 = register_module("transition_z2", Transition(c.c_z, 2));
  layernorm_s = register_module("layernorm_s", LayerNorm(c.c_s + c.c_s_inputs, true, false));
  linear_no_bias_s = register_module("linear_no_bias_s", nn::Linear(c.c_s + c.c_s_inputs, c.c_s, false));
  fourier_embedding = register_module("fourier_embedding", std::make_shared<torch::nn::Module>());
  fourier_w = fourier_embedding->register_parameter("w", at::randn({c.c_noise_embedding}), /*requires_grad=*/false);
  fourier_b = fourier_embedding->register_parameter("b", at::randn({c.c_noise_embedding}), /*requires_grad=*/false);
  layernorm_n = register_module("layernorm_n", LayerNorm(c.c_noise_embedding, true, false));
  linear_no_bias_n = register_module("linear_no_bias_n", nn::Linear(c.c_noise_embedding, c.c_s, false));
  transition_s1 = register_module("transition_s1", Transition(c.c_s, 2));
  transition_s2 = register_module("transition_s2", Transition(c.c_s, 2));
}

AtomAttentionEncoderImpl::AtomAttentionEncoderImpl(const DiffusionConfig& c) {
  auto lin = [&](const char* name, std::int64_t in, std::int64_t out) {
    return register_module(name, nn::Linear(in, out, false));
  };
  linear_no_bias_ref_pos = lin("linear_no_bias_ref_pos", 3, c.c_atom);
  linear_no_bias_ref_charge = lin("linear_no_bias_ref_charge", 1, c.c_atom);
  linear_no_bias_f = lin("linear_no_bias_f", 1 + 128 + 4 * 64, c.c_atom);
  linear_no_bias_d = lin("linear_no_bias_d", 3, c.c_atompair);
  linear_no_bias_invd = lin("linear_no_bias_invd", 1, c.c_atompair);
  linear_no_bias_v = lin("linear_no_bias_v", 1, c.c_atompair);
  layernorm_s = register_module("layernorm_s", LayerNorm(c.c_s, true, false));
  linear_no_bias_s = lin("linear_no_bias_s", c.c_s, c.c_atom);
  layernorm_z = register_module("layernorm_z", LayerNorm(c.c_z, true, false));
  linear_no_bias_z = lin("linear_no_bias_z", c.c_z, c.c_atompair);
  linear_no_bias_r = lin("linear_no_bias_r", 3, c.c_atom);
  linear_no_bias_cl = lin("linear_no_bias_cl", c.c_atom, c.c_atompair);
  linear_no_bias_cm = lin("linear_no_bias_cm", c.c_atom, c.c_atompair);
  small_mlp = register_module("small_mlp", std::make_shared<torch::nn::Module>());
  mlp1 = small_mlp->register_module("1", nn::Linear(c.c_atompair, c.c_atompair, false));
  mlp3 = small_mlp->register_module("3", nn::Linear(c.c_atompair, c.c_atompair, false));
  mlp5 = small_mlp->register_module("5", nn::Linear(c.c_atompair, c.c_atompair, false));
  atom_transformer = register_module("atom_transformer", std::make_shared<torch::nn::Module>());
  transformer = atom_transformer->register_module(
      "diffusion_transformer", DiffusionTransformer(c.c_atom, c.c_atom, c.c_atompair, c.atom_encoder, true));
  linear_no_bias_q = lin("linear_no_bias_q", c.c_atom, c.c_token);
}

AtomAttentionDecoderImpl::AtomAttentionDecoderImpl(const DiffusionConfig& c) {
  linear_no_bias_a = register_module("linear_no_bias_a", nn::Linear(c.c_token, c.c_atom, false));
  layernorm_q = register_module("layernorm_q", LayerNorm(c.c_atom, true, false));
  linear_no_bias_out = register_module("linear_no_bias_out", nn::Linear(c.c_atom, 3, false));
  atom_transformer = register_module("atom_transformer", std::make_shared<torch::nn::Module>());
  transformer = atom_transformer->register_module(
      "diffusion_transformer", DiffusionTransformer(c.c_atom, c.c_atom, c.c_atompair, c.atom_decoder, true));
}

DiffusionModuleImpl::DiffusionModuleImpl(const DiffusionConfig& c) : config_(c) {
  diffusion_conditioning = register_module("diffusion_conditioning", DiffusionConditioning(c));
  atom_attention_encoder = register_module("atom_attention_encoder", AtomAttentionEncoder(c));
  layernorm_s = register_module("layernorm_s", LayerNorm(c.c_s, true, false));
  linear_no_bias_s = register_module("linear_no_bias_s", nn::Linear(c.c_s, c.c_token, false));
  diffusion_transformer =
      register_module("diffusion_transformer", DiffusionTransformer(c.c_token, c.c_s, c.c_z, c.transformer, false));
  layernorm_a = register_module("layernorm_a", LayerNorm(c.c_token, true, false));
  atom_attention_decoder = register_module("atom_attention_decoder", AtomAttentionDecoder(c));
}

std::int64_t DiffusionModuleImpl::block_count() const {
  return config_.atom_encoder.n_blocks + config_.transformer.n_blocks + config_.atom_decoder.n_blocks;
}

at::Tensor DiffusionModuleImpl::run_stack(const DiffusionTransformer& st, std::int64_t first, at::Tensor a,
                                          const at::Tensor& s, const at::Tensor& z, std::int64_t nq,
                                          std::int64_t nk) const {
  for (std::size_t i = 0; i < st->blocks->size(); ++i) {
    auto block = std::dynamic_pointer_cast<DiffusionTransformerBlockImpl>(st->blocks->ptr(i));
    a = run_block(
            first + static_cast<std::int64_t>(i),
            [block, nq, nk](const std::vector<at::Tensor>& x) {
              return std::vector<at::Tensor>{block->forward(x[0], x[1], x[2], nq, nk)};
            },
            {a, s, z})
            .front();
  }
  return a;
}

void DiffusionModuleImpl::check(const at::Tensor& x, const at::Tensor& t, const DiffusionInputs& in) const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument(msg);
  };
  auto defined = [&](const at::Tensor& v, const char* name) {
    need(v.defined(), std::string("DiffusionModule: input '") + name + "' is missing");
  };
  defined(x, "x_noisy");
  defined(t, "t_hat_noise_level");
  defined(in.ref_pos, "ref_pos");
  defined(in.ref_charge, "ref_charge");
  defined(in.ref_mask, "ref_mask");
  defined(in.ref_element, "ref_element");
  defined(in.ref_atom_name_chars, "ref_atom_name_chars");
  defined(in.atom_to_token_idx, "atom_to_token_idx");
  defined(in.relp, "relp");
  defined(in.d_lm, "d_lm");
  defined(in.v_lm, "v_lm");
  defined(in.mask_trunked, "pad_info.mask_trunked");
  defined(in.s_inputs, "s_inputs");
  defined(in.s_trunk, "s_trunk");
  defined(in.z_trunk, "z_trunk");
  const auto& c = config_;
  const std::int64_t n_atom = in.ref_pos.dim() == 2 ? in.ref_pos.size(0) : -1;
  need(n_atom > 0 && in.ref_pos.size(1) == 3, "DiffusionModule: 'ref_pos' must be [N_atom, 3], got " + shape_of(in.ref_pos));
  const std::int64_t n_token = in.s_trunk.dim() == 2 ? in.s_trunk.size(0) : -1;
  need(n_token > 0 && in.s_trunk.size(1) == c.c_s,
       "DiffusionModule: 's_trunk' must be [N_token, " + std::to_string(c.c_s) + "], got " + shape_of(in.s_trunk));
  auto shaped = [&](const at::Tensor& v, std::vector<std::int64_t> want, const char* name) {
    std::string w = "[";
    for (std::size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
    need(v.sizes().vec() == want, std::string("DiffusionModule: '") + name + "' must be " + w + "], got " + shape_of(v));
  };
  const Trunks tr = trunks_of(n_atom, c.n_queries, c.n_keys);
  need(x.dim() == 3 && x.size(1) == n_atom && x.size(2) == 3,
       "DiffusionModule: 'x_noisy' must be [N_sample, " + std::to_string(n_atom) + ", 3], got " + shape_of(x));
  shaped(t, {x.size(0)}, "t_hat_noise_level");
  shaped(in.ref_charge, {n_atom}, "ref_charge");
  shaped(in.ref_mask, {n_atom}, "ref_mask");
  shaped(in.ref_element, {n_atom, 128}, "ref_element");
  need(in.ref_atom_name_chars.numel() == n_atom * 256 && in.ref_atom_name_chars.size(0) == n_atom,
       "DiffusionModule: 'ref_atom_name_chars' must be [" + std::to_string(n_atom) + ", 4, 64], got " +
           shape_of(in.ref_atom_name_chars));
  shaped(in.atom_to_token_idx, {n_atom}, "atom_to_token_idx");
  shaped(in.relp, {n_token, n_token, 139}, "relp");
  shaped(in.d_lm, {tr.count, c.n_queries, c.n_keys, 3}, "d_lm");
  shaped(in.v_lm, {tr.count, c.n_queries, c.n_keys, 1}, "v_lm");
  need(in.mask_trunked.numel() == tr.count * c.n_queries * c.n_keys,
       "DiffusionModule: 'pad_info.mask_trunked' must be [" + std::to_string(tr.count) + ", 32, 128], got " +
           shape_of(in.mask_trunked));
  shaped(in.s_inputs, {n_token, c.c_s_inputs}, "s_inputs");
  shaped(in.z_trunk, {n_token, n_token, c.c_z}, "z_trunk");
  if (in.atom_to_token_idx.numel()) {
    const auto lo = in.atom_to_token_idx.min().item<std::int64_t>();
    const auto hi = in.atom_to_token_idx.max().item<std::int64_t>();
    need(lo >= 0 && hi < n_token, "DiffusionModule: 'atom_to_token_idx' must lie in [0, " + std::to_string(n_token) +
                                      "), got [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

at::Tensor DiffusionModuleImpl::forward(const at::Tensor& x_noisy, const at::Tensor& t, const DiffusionInputs& in,
                                        bool use_conditioning, Intermediates* inter) {
  check(x_noisy, t, in);
  const auto& c = config_;
  const double sd = c.sigma_data;
  const std::int64_t nq = c.n_queries, nk = c.n_keys;
  const std::int64_t n_token = in.s_trunk.size(0);
  const auto idx = in.atom_to_token_idx.to(at::kLong);
  auto keep = [&](const char* name, const at::Tensor& v) {
    if (inter) (*inter)[name] = v.detach();
  };

  // EDM preconditioning: r_noisy = c_in x_noisy.
  const auto r_noisy = x_noisy / at::sqrt(sd * sd + t.pow(2)).unsqueeze(-1).unsqueeze(-1);

  // Conditioning (Algorithm 21).
  auto& dc = *diffusion_conditioning;
  const auto s_trunk_c = use_conditioning ? in.s_trunk : 0 * in.s_trunk;
  const auto z_trunk_c = use_conditioning ? in.z_trunk : 0 * in.z_trunk;
  auto pair_z = at::cat({z_trunk_c, dc.relpe_linear(in.relp)}, -1);
  pair_z = dc.linear_no_bias_z(dc.layernorm_z(pair_z));
  pair_z = pair_z + dc.transition_z1(pair_z);
  pair_z = pair_z + dc.transition_z2(pair_z);
  auto s_single = dc.linear_no_bias_s(dc.layernorm_s(at::cat({s_trunk_c, in.s_inputs}, -1)));
  const auto noise_n = at::cos((2 * kPi) * (at::log(t / sd).div(4).unsqueeze(-1) * dc.fourier_w + dc.fourier_b));
  s_single = s_single.unsqueeze(-3) + dc.linear_no_bias_n(dc.layernorm_n(noise_n)).unsqueeze(-2);
  s_single = s_single + dc.transition_s1(s_single);
  s_single = s_single + dc.transition_s2(s_single);
  keep("diffusion_conditioning.s_single", s_single);
  keep("diffusion_conditioning.pair_z", pair_z);

  // Atom attention encoder (Algorithm 5, with coordinates).
  auto& enc = *atom_attention_encoder;
  const std::int64_t n_atom = in.ref_pos.size(0);
  const Trunks tr = trunks_of(n_atom, nq, nk);
  const auto s_trunk = in.s_trunk.unsqueeze(0);  // [1, N_token, c_s]
  const auto z_pair = pair_z.unsqueeze(0);       // [1, N_token, N_token, c_z]
  const auto ref_mask = in.ref_mask.to(in.ref_pos.scalar_type()).reshape({n_atom, 1});
  auto c_l = enc.linear_no_bias_ref_pos(in.ref_pos) + enc.linear_no_bias_ref_charge(at::asinh(in.ref_charge).reshape({n_atom, 1}));
  c_l = c_l + enc.linear_no_bias_f(at::cat({ref_mask, in.ref_element.to(c_l.scalar_type()),
                                            in.ref_atom_name_chars.reshape({n_atom, 256}).to(c_l.scalar_type())},
                                           -1));
  c_l = c_l * ref_mask;
  const auto v_lm = in.v_lm.to(c_l.scalar_type());
  const auto mask_trunked = in.mask_trunked.reshape({tr.count, nq, nk}).to(c_l.scalar_type()).unsqueeze(-1);
  auto p_lm = (enc.linear_no_bias_d(in.d_lm) * v_lm) * mask_trunked;
  p_lm = p_lm + enc.linear_no_bias_invd(1 / (1 + in.d_lm.pow(2).sum(-1, true))) * v_lm;
  p_lm = p_lm + enc.linear_no_bias_v(v_lm);
  {
    const auto z_token = enc.linear_no_bias_z(enc.layernorm_z(z_pair));  // [1, N_token, N_token, c_ap]
    const auto iq = query_trunks_1d(idx, tr, nq);                          // [nt, nq]
    const auto ik = key_trunks_1d(idx, tr, nq, nk);                        // [nt, nk]
    const auto flat = (iq.unsqueeze(-1) * n_token + ik.unsqueeze(-2)).reshape({-1});
    const auto gathered = z_token.reshape({1, n_token * n_token, c.c_atompair})
                              .index_select(1, flat)
                              .reshape({1, tr.count, nq, nk, c.c_atompair});
    p_lm = p_lm.unsqueeze(0) + gathered;  // [1, nt, nq, nk, c_ap]
  }
  c_l = c_l.unsqueeze(0) + enc.linear_no_bias_s(enc.layernorm_s(s_trunk)).index_select(1, idx);  // [1, N_atom, c_atom]
  auto q_l = c_l + enc.linear_no_bias_r(r_noisy);                                                    // [S, N_atom, c_atom]
  const auto c_l_q = query_trunks(c_l, tr, nq);
  const auto c_l_k = key_trunks(c_l, tr, nq, nk);
  p_lm = p_lm + enc.linear_no_bias_cl(at::relu(c_l_q.unsqueeze(-2))) + enc.linear_no_bias_cm(at::relu(c_l_k.unsqueeze(-3)));
  p_lm = p_lm + enc.mlp5(at::relu(enc.mlp3(at::relu(enc.mlp1(at::relu(p_lm))))));
  q_l = run_stack(enc.transformer, 0, q_l, c_l, p_lm, nq, nk);
  const auto q_proj = at::relu(enc.linear_no_bias_q(q_l));  // [S, N_atom, c_token]
  auto a_token = at::zeros({q_proj.size(0), n_token, c.c_token}, q_proj.options()).index_add(1, idx, q_proj);
  const auto counts = at::zeros({n_token}, q_proj.options()).index_add(0, idx, at::ones({n_atom}, q_proj.options()));
  a_token = a_token / counts.clamp_min(1).unsqueeze(-1);
  keep("atom_attention_encoder.a_token", a_token);
  keep("atom_attention_encoder.q_skip", q_l);
  keep("atom_attention_encoder.c_skip", c_l);
  keep("atom_attention_encoder.p_skip", p_lm);

  // Token-level diffusion transformer.
  a_token = a_token + linear_no_bias_s(layernorm_s(s_single));
  a_token = run_stack(diffusion_transformer, c.atom_encoder.n_blocks, a_token, s_single, z_pair, 0, 0);
  keep("diffusion_transformer.a_token", a_token);
  a_token = layernorm_a(a_token);

  // Atom attention decoder (Algorithm 6).
  auto& dec = *atom_attention_decoder;
  auto q = dec.linear_no_bias_a(a_token).index_select(-2, idx) + q_l;
  q = run_stack(dec.transformer, c.atom_encoder.n_blocks + c.transformer.n_blocks, q, c_l, p_lm, nq, nk);
  const auto r_update = dec.linear_no_bias_out(dec.layernorm_q(q));
  keep("atom_attention_decoder.r_update", r_update);

  // x_denoised = c_skip x_noisy + c_out r_update.
  const auto s_ratio = (t / sd).unsqueeze(-1).unsqueeze(-1);
  return 1 / (1 + s_ratio.pow(2)) * x_noisy + t.unsqueeze(-1).unsqueeze(-1) / at::sqrt(1 + s_ratio.pow(2)) * r_update;
}

}  // namespace yeto::protenix
