// Protenix's DiffusionModule (AlphaFold 3 Algorithm 20) in LibTorch, with Protenix's own parameter
// names (the state-dict keys of protenix.model.modules.diffusion.DiffusionModule; inside a full
// Protenix checkpoint they carry the prefix `diffusion_module.`):
//
//   diffusion_conditioning.{relpe.linear_no_bias, layernorm_z, linear_no_bias_z, transition_z1/2,
//     layernorm_s, linear_no_bias_s, fourier_embedding.{w,b} (frozen), layernorm_n, linear_no_bias_n,
//     transition_s1/2}
//   atom_attention_encoder.{linear_no_bias_{ref_pos,ref_charge,f,d,invd,v,s,z,r,cl,cm,q}, layernorm_{s,z},
//     small_mlp.{1,3,5}, atom_transformer.diffusion_transformer.blocks.N.*}
//   layernorm_s, linear_no_bias_s, diffusion_transformer.blocks.N.*, layernorm_a
//   atom_attention_decoder.{linear_no_bias_a, layernorm_q, linear_no_bias_out, atom_transformer.*}
//
// A block (blocks.N) is attention_pair_bias.{layernorm_a, layernorm_kv (atom blocks), attention.
// linear_{q,k,v,o,g}, layernorm_z, linear_nobias_z, linear_a_last} + conditioned_transition_block.
// {adaln, linear_nobias_a1/a2/b, linear_s}. Every projection is an nn::Linear (LoRA-capable).
//
// Numerics follow Protenix run with LAYERNORM_TYPE=torch and the explicit attention path:
// LayerNorm eps 1e-5, q scaled by 1/sqrt(head dim) before q k^T, the local atom attention over
// trunks of 32 queries x 128 keys (queries zero-padded to whole trunks, keys padded by 48 on the
// left, the padding masked with -1e10), padded atoms of a trunk mapped to token 0.
//
// Each transformer block (atom encoder, token transformer, atom decoder, numbered in that order)
// honours the kit's activation checkpointing (nn::CheckpointedBlocks).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::protenix {

struct StackConfig {
  std::int64_t n_blocks = 0;
  std::int64_t n_heads = 0;
};

struct DiffusionConfig {
  double sigma_data = 16.0;
  std::int64_t c_atom = 128;
  std::int64_t c_atompair = 16;
  std::int64_t c_token = 768;
  std::int64_t c_s = 384;
  std::int64_t c_z = 128;
  std::int64_t c_s_inputs = 449;
  StackConfig atom_encoder{3, 4};
  StackConfig transformer{24, 16};
  StackConfig atom_decoder{3, 4};
  std::int64_t c_noise_embedding = 256;  // fixed by Protenix
  std::int64_t n_queries = 32;           // fixed by Protenix
  std::int64_t n_keys = 128;             // fixed by Protenix

  // Reads DiffusionModule's keyword arguments (config.json of a case, or the `diffusion_module`
  // section of a Protenix model config). Unknown keys are ignored; a drop path rate other than 0
  // is refused (dropout paths are not implemented). Throws std::invalid_argument naming the key.
  static DiffusionConfig from_json(const nlohmann::json& j);
};

// The features DiffusionModule reads (no batch dimension): atoms [N_atom, ...], tokens
// [N_token, ...], the local-attention features in trunks of 32 x 128.
struct DiffusionInputs {
  at::Tensor ref_pos;              // [N_atom, 3]
  at::Tensor ref_charge;           // [N_atom]
  at::Tensor ref_mask;             // [N_atom]
  at::Tensor ref_element;          // [N_atom, 128]
  at::Tensor ref_atom_name_chars;  // [N_atom, 4, 64] (or [N_atom, 256])
  at::Tensor atom_to_token_idx;    // [N_atom] int64
  at::Tensor relp;                 // [N_token, N_token, 139]
  at::Tensor d_lm;                 // [n_trunks, 32, 128, 3]
  at::Tensor v_lm;                 // [n_trunks, 32, 128, 1] (bool or float)
  at::Tensor mask_trunked;         // [n_trunks, 32, 128] (any shape of that many entries)
  at::Tensor s_inputs;             // [N_token, c_s_inputs]
  at::Tensor s_trunk;              // [N_token, c_s]
  at::Tensor z_trunk;              // [N_token, N_token, c_z]
};

// ---- derived features (protenix.model.protenix.update_input_feature_dict) --------------------

// relp of RelativePositionEncoding.generate_relp (r_max 32, s_max 2): [N_token, N_token, 139].
at::Tensor relative_position_features(const at::Tensor& asym_id, const at::Tensor& residue_index,
                                      const at::Tensor& entity_id, const at::Tensor& token_index,
                                      const at::Tensor& sym_id, std::int64_t r_max = 32, std::int64_t s_max = 2);

struct LocalAtomFeatures {
  at::Tensor d_lm;          // [n_trunks, 32, 128, 3] float
  at::Tensor v_lm;          // [n_trunks, 32, 128, 1] bool
  at::Tensor mask_trunked;  // [n_trunks, 32, 128] bool
};
// d_lm = ref_pos_l - ref_pos_m, v_lm = (ref_space_uid_l == ref_space_uid_m) over the trunks
// (padding: position 0, uid 0), mask_trunked = both atoms real.
LocalAtomFeatures local_atom_features(const at::Tensor& ref_pos, const at::Tensor& ref_space_uid,
                                      std::int64_t n_queries = 32, std::int64_t n_keys = 128);

// ---- modules ----------------------------------------------------------------------------------

// Protenix's LayerNorm (OpenFold's): weight and bias optional, eps 1e-5.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(std::int64_t dim, bool scale, bool offset);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;
  std::int64_t dim;
};
TORCH_MODULE(LayerNorm);

// Algorithm 11: layernorm1 -> linear_no_bias(silu(linear_no_bias_a) * linear_no_bias_b).
class TransitionImpl : public torch::nn::Module {
 public:
  TransitionImpl(std::int64_t c, std::int64_t n);
  at::Tensor forward(const at::Tensor& x);
  LayerNorm layernorm1{nullptr};
  nn::Linear linear_no_bias_a{nullptr}, linear_no_bias_b{nullptr}, linear_no_bias{nullptr};
};
TORCH_MODULE(Transition);

// Algorithm 26: sigmoid(linear_s(LN(s))) * LN(a) + linear_nobias_s(LN(s)).
class AdaptiveLayerNormImpl : public torch::nn::Module {
 public:
  AdaptiveLayerNormImpl(std::int64_t c_a, std::int64_t c_s);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s);
  LayerNorm layernorm_a{nullptr}, layernorm_s{nullptr};
  nn::Linear linear_s{nullptr}, linear_nobias_s{nullptr};
};
TORCH_MODULE(AdaptiveLayerNorm);

// Gated multi-head attention (linear_q with bias; k, v, o, g without).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(std::int64_t c, std::int64_t heads);
  // Full attention with bias [.., H, Q, K]; or, with n_queries > 0, the local attention over
  // trunks with the trunked bias [.., H, n_trunks, n_queries, n_keys].
  at::Tensor forward(const at::Tensor& q_x, const at::Tensor& kv_x, const at::Tensor& bias, std::int64_t n_queries = 0,
                     std::int64_t n_keys = 0);
  nn::Linear linear_q{nullptr}, linear_k{nullptr}, linear_v{nullptr}, linear_o{nullptr}, linear_g{nullptr};
  std::int64_t heads, head_dim;
};
TORCH_MODULE(Attention);

// Algorithm 24 with s (adaLN), per-head pair bias and the adaLN-Zero output gate.
class AttentionPairBiasImpl : public torch::nn::Module {
 public:
  AttentionPairBiasImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z, std::int64_t heads, bool cross);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& z, std::int64_t n_queries,
                     std::int64_t n_keys);
  AdaptiveLayerNorm layernorm_a{nullptr}, layernorm_kv{nullptr};
  Attention attention{nullptr};
  LayerNorm layernorm_z{nullptr};
  nn::Linear linear_nobias_z{nullptr}, linear_a_last{nullptr};
};
TORCH_MODULE(AttentionPairBias);

// Algorithm 25.
class ConditionedTransitionBlockImpl : public torch::nn::Module {
 public:
  ConditionedTransitionBlockImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t n = 2);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s);
  AdaptiveLayerNorm adaln{nullptr};
  nn::Linear linear_nobias_a1{nullptr}, linear_nobias_a2{nullptr}, linear_nobias_b{nullptr}, linear_s{nullptr};
};
TORCH_MODULE(ConditionedTransitionBlock);

class DiffusionTransformerBlockImpl : public torch::nn::Module {
 public:
  DiffusionTransformerBlockImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z, std::int64_t heads, bool cross);
  at::Tensor forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& z, std::int64_t n_queries,
                     std::int64_t n_keys);
  AttentionPairBias attention_pair_bias{nullptr};
  ConditionedTransitionBlock conditioned_transition_block{nullptr};
};
TORCH_MODULE(DiffusionTransformerBlock);

class DiffusionModuleImpl;

// Algorithm 23: `blocks`, run through the owner's block checkpointing from block number `first`.
class DiffusionTransformerImpl : public torch::nn::Module {
 public:
  DiffusionTransformerImpl(std::int64_t c_a, std::int64_t c_s, std::int64_t c_z, const StackConfig& stack, bool cross);
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(DiffusionTransformer);

class DiffusionConditioningImpl : public torch::nn::Module {
 public:
  explicit DiffusionConditioningImpl(const DiffusionConfig& c);
  std::shared_ptr<torch::nn::Module> relpe, fourier_embedding;
  nn::Linear relpe_linear{nullptr};  // relpe.linear_no_bias
  at::Tensor fourier_w, fourier_b;   // fourier_embedding.w / .b (frozen)
  LayerNorm layernorm_z{nullptr}, layernorm_s{nullptr}, layernorm_n{nullptr};
  nn::Linear linear_no_bias_z{nullptr}, linear_no_bias_s{nullptr}, linear_no_bias_n{nullptr};
  Transition transition_z1{nullptr}, transition_z2{nullptr}, transition_s1{nullptr}, transition_s2{nullptr};
};
TORCH_MODULE(DiffusionConditioning);

class AtomAttentionEncoderImpl : public torch::nn::Module {
 public:
  explicit AtomAttentionEncoderImpl(const DiffusionConfig& c);
  nn::Linear linear_no_bias_ref_pos{nullptr}, linear_no_bias_ref_charge{nullptr}, linear_no_bias_f{nullptr},
      linear_no_bias_d{nullptr}, linear_no_bias_invd{nullptr}, linear_no_bias_v{nullptr}, linear_no_bias_s{nullptr},
      linear_no_bias_z{nullptr}, linear_no_bias_r{nullptr}, linear_no_bias_cl{nullptr}, linear_no_bias_cm{nullptr},
      linear_no_bias_q{nullptr};
  LayerNorm layernorm_s{nullptr}, layernorm_z{nullptr};
  std::shared_ptr<torch::nn::Module> small_mlp, atom_transformer;
  nn::Linear mlp1{nullptr}, mlp3{nullptr}, mlp5{nullptr};  // small_mlp.1 / .3 / .5
  DiffusionTransformer transformer{nullptr};                // atom_transformer.diffusion_transformer
};
TORCH_MODULE(AtomAttentionEncoder);

class AtomAttentionDecoderImpl : public torch::nn::Module {
 public:
  explicit AtomAttentionDecoderImpl(const DiffusionConfig& c);
  nn::Linear linear_no_bias_a{nullptr}, linear_no_bias_out{nullptr};
  LayerNorm layernorm_q{nullptr};
  std::shared_ptr<torch::nn::Module> atom_transformer;
  DiffusionTransformer transformer{nullptr};  // atom_transformer.diffusion_transformer
};
TORCH_MODULE(AtomAttentionDecoder);

// Intermediate activations of one forward, by the names the parity cases record
// ("diffusion_conditioning.s_single", "atom_attention_encoder.q_skip", ...).
using Intermediates = std::map<std::string, at::Tensor>;

class DiffusionModuleImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit DiffusionModuleImpl(const DiffusionConfig& config);

  // x_noisy [N_sample, N_atom, 3] (Angstrom), t_hat_noise_level [N_sample] -> x_denoised
  // [N_sample, N_atom, 3] = c_skip x_noisy + c_out F(c_in x_noisy, sigma). use_conditioning = false
  // zeroes s_trunk and z_trunk inside the conditioning (the dropped-condition call). Throws
  // std::invalid_argument naming the input whose shape is wrong.
  at::Tensor forward(const at::Tensor& x_noisy, const at::Tensor& t_hat_noise_level, const DiffusionInputs& in,
                     bool use_conditioning = true, Intermediates* intermediates = nullptr);

  const DiffusionConfig& config() const { return config_; }
  std::int64_t block_count() const;

  DiffusionConditioning diffusion_conditioning{nullptr};
  AtomAttentionEncoder atom_attention_encoder{nullptr};
  LayerNorm layernorm_s{nullptr}, layernorm_a{nullptr};
  nn::Linear linear_no_bias_s{nullptr};
  DiffusionTransformer diffusion_transformer{nullptr};
  AtomAttentionDecoder atom_attention_decoder{nullptr};

 private:
  at::Tensor run_stack(const DiffusionTransformer& stack, std::int64_t first, at::Tensor a, const at::Tensor& s,
                       const at::Tensor& z, std::int64_t n_queries, std::int64_t n_keys) const;
  void check(const at::Tensor& x_noisy, const at::Tensor& t, const DiffusionInputs& in) const;
  DiffusionConfig config_;
};
TORCH_MODULE(DiffusionModule);

}  // namespace yeto::protenix
