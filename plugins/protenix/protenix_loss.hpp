// Protenix's EDM noise schedule, training noise sampler and sampler step (protenix/model/generator.py)
// and the diffusion terms of ProtenixLoss (protenix/model/loss.py): the weighted rigid alignment of
// the ground truth onto each prediction (AF3 Algorithm 28, detached), the aligned weighted MSE
// (DNA / RNA atoms x 5, ligand atoms x 10), the bond loss and the smooth LDDT loss, scaled per
// sample by (sigma^2 + sigma_data^2) / (sigma_data sigma)^2 (not smooth LDDT).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

namespace yeto::protenix {

struct EdmConfig {
  double sigma_data = 16.0;
  // InferenceNoiseScheduler
  double s_max = 160.0;
  double s_min = 4e-4;
  double rho = 7.0;
  // TrainingNoiseSampler
  double p_mean = -1.2;
  double p_std = 1.5;
  // sample_diffusion
  double gamma0 = 0.8;
  double gamma_min = 1.0;
  double noise_scale_lambda = 1.003;
  double step_scale_eta = 1.5;
  std::int64_t n_step = 200;

  // Reads {"inference_noise_scheduler": {...}, "train_noise_sampler": {...}, "sample_diffusion":
  // {...}, "N_step": n} (every section and key optional). Throws std::invalid_argument naming the key.
  static EdmConfig from_json(const nlohmann::json& j);
};

// sigma_data (s_max^(1/rho) + i/N (s_min^(1/rho) - s_max^(1/rho)))^rho for i = 0..N in float32, the
// last entry 0: [N + 1].
at::Tensor inference_noise_schedule(const EdmConfig& c, std::int64_t n_step);
// exp(rnd_normal p_std + p_mean) sigma_data.
at::Tensor training_noise_level(const EdmConfig& c, const at::Tensor& rnd_normal);

// One predictor-corrector step of sample_diffusion from c_tau_last to c_tau.
struct SamplerStep {
  double gamma = 0;
  at::Tensor t_hat;    // [N_sample]
  at::Tensor x_noisy;  // x_l + lambda sqrt(t_hat^2 - c_tau_last^2) eps
};
SamplerStep sampler_noise(const EdmConfig& c, double c_tau_last, double c_tau, const at::Tensor& x_l,
                          const at::Tensor& eps);
// x_noisy + eta (c_tau - t_hat) (x_noisy - x_denoised) / t_hat.
at::Tensor sampler_update(const EdmConfig& c, const SamplerStep& step, double c_tau, const at::Tensor& x_denoised);

// Uniformly random rotations [n, 3, 3] (from normalised Gaussian quaternions) and N(0, s_trans^2)
// translations [n, 1, 3].
std::pair<at::Tensor, at::Tensor> random_rigid(std::int64_t n, at::Generator& gen, const at::TensorOptions& options,
                                               double s_trans = 1.0);

// Centres x [N_atom, 3] on the mean of the atoms with mask 1 and applies N_sample uniformly random
// rotations and N(0, s_trans^2) translations (Protenix's centre_random_augmentation): [N_sample, N_atom, 3].
at::Tensor centre_random_augmentation(const at::Tensor& x, std::int64_t n_sample, const at::Tensor& mask,
                                      at::Generator& gen, double s_trans = 1.0);

// align_pred_to_true without reflection: x [.., N, 3] rotated and translated onto x_target with
// per-atom weights [.., N] (or [N]).
at::Tensor weighted_rigid_align(const at::Tensor& x, const at::Tensor& x_target, const at::Tensor& weight);

struct LossWeights {
  double alpha_diffusion = 4.0;
  double alpha_bond = 0.0;
  double smooth_lddt = 1.0;
  double weight_mse = 1.0 / 3.0;
  double weight_dna = 5.0;
  double weight_rna = 5.0;
  double weight_ligand = 10.0;
  double eps = 1e-6;
  // The defaults of configs_base.py, or the fine-tuning stage's (alpha_bond 1, smooth_lddt 0).
  static LossWeights defaults() { return {}; }
  static LossWeights finetune() {
    LossWeights w;
    w.alpha_bond = 1.0;
    w.smooth_lddt = 0.0;
    return w;
  }
  // The `loss` section of a Protenix config (weight.alpha_diffusion / alpha_bond / smooth_lddt,
  // diffusion.mse.weight_*); absent keys keep `base` (e.g. defaults()). Throws std::invalid_argument naming the key.
  static LossWeights from_json(const nlohmann::json& loss, LossWeights base);
};

struct DiffusionLossInputs {
  at::Tensor pred;             // [N_sample, N_atom, 3] x_denoised
  at::Tensor noise_level;      // [N_sample] sigma
  at::Tensor true_coordinate;  // [N_atom, 3]
  at::Tensor coordinate_mask;  // [N_atom]
  at::Tensor is_dna, is_rna, is_ligand;  // [N_atom]
  at::Tensor bond_mask;        // [N_atom, N_atom] (undefined: no bonds)
};

// The terms by name: loss, mse_loss, mse_loss_unscaled, bond_loss, smooth_lddt_loss,
// smooth_lddt_loss_sparse, weighted_{mse,bond,smooth_lddt}_loss, diffusion_per_sample_scale,
// label_dict.{distance,distance_mask,lddt_mask}, mse.true_coordinate_aligned, mse.weight.
// `loss` keeps its graph to `pred`; the others are detached.
std::map<std::string, at::Tensor> diffusion_loss(const DiffusionLossInputs& in, const LossWeights& w,
                                                 double sigma_data = 16.0);

}  // namespace yeto::protenix
