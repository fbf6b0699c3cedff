#include "protenix_loss.hpp"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace yeto::protenix {

using nlohmann::json;

namespace {

double number(const json& j, const std::string& section, const std::string& key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number())
    throw std::invalid_argument("'" + (section.empty() ? key : section + "." + key) + "' must be a number");
  return j[key].get<double>();
}

const json& section(const json& j, const std::string& key) {
  static const json empty = json::object();
  if (!j.contains(key) || j[key].is_null()) return empty;
  if (!j[key].is_object()) throw std::invalid_argument("'" + key + "' must be an object");
  return j[key];
}

}  // namespace

EdmConfig EdmConfig::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("the EDM schedule config must be a JSON object");
  EdmConfig c;
  const json& inf = section(j, "inference_noise_scheduler");
  c.s_max = number(inf, "inference_noise_scheduler", "s_max", c.s_max);
  c.s_min = number(inf, "inference_noise_scheduler", "s_min", c.s_min);
  c.rho = number(inf, "inference_noise_scheduler", "rho", c.rho);
  c.sigma_data = number(inf, "inference_noise_scheduler", "sigma_data", c.sigma_data);
  const json& tr = section(j, "train_noise_sampler");
  c.p_mean = number(tr, "train_noise_sampler", "p_mean", c.p_mean);
  c.p_std = number(tr, "train_noise_sampler", "p_std", c.p_std);
  const double train_sd = number(tr, "train_noise_sampler", "sigma_data", c.sigma_data);
  if (train_sd != c.sigma_data)
    throw std::invalid_argument("'train_noise_sampler.sigma_data' (" + std::to_string(train_sd) +
                                ") differs from 'inference_noise_scheduler.sigma_data' (" + std::to_string(c.sigma_data) + ")");
  const json& sd = section(j, "sample_diffusion");
  c.gamma0 = number(sd, "sample_diffusion", "gamma0", c.gamma0);
  c.gamma_min = number(sd, "sample_diffusion", "gamma_min", c.gamma_min);
  c.noise_scale_lambda = number(sd, "sample_diffusion", "noise_scale_lambda", c.noise_scale_lambda);
  c.step_scale_eta = number(sd, "sample_diffusion", "step_scale_eta", c.step_scale_eta);
  if (j.contains("N_step") && !j["N_step"].is_null()) {
    if (!j["N_step"].is_number_integer() || j["N_step"].get<std::int64_t>() < 1)
      throw std::invalid_argument("'N_step' must be a positive integer");
    c.n_step = j["N_step"].get<std::int64_t>();
  }
  if (!(c.sigma_data > 0) || !(c.s_max > c.s_min) || !(c.s_min > 0) || !(c.rho > 0))
    throw std::invalid_argument("'inference_noise_scheduler' needs sigma_data > 0 and s_max > s_min > 0, rho > 0");
  return c;
}

at::Tensor inference_noise_schedule(const EdmConfig& c, std::int64_t n) {
  if (n < 1) throw std::invalid_argument("the number of sampler steps must be at least 1, got " + std::to_string(n));
  const double step_size = 1.0 / static_cast<double>(n);
  const auto i = at::arange(n + 1, at::kFloat);
  const double hi = std::pow(c.s_max, 1.0 / c.rho), lo = std::pow(c.s_min, 1.0 / c.rho);
  const at::Scalar rho = c.rho == std::floor(c.rho) ? at::Scalar(static_cast<std::int64_t>(c.rho)) : at::Scalar(c.rho);
  auto t = c.sigma_data * at::pow(hi + i * step_size * (lo - hi), rho);
  t.index_put_({n}, 0);
  return t;
}

at::Tensor training_noise_level(const EdmConfig& c, const at::Tensor& rnd_normal) {
  return (rnd_normal * c.p_std + c.p_mean).exp() * c.sigma_data;
}

SamplerStep sampler_noise(const EdmConfig& c, double c_tau_last, double c_tau, const at::Tensor& x_l,
                          const at::Tensor& eps) {
  SamplerStep s;
  s.gamma = c_tau > c.gamma_min ? c.gamma0 : 0.0;
  const auto last = at::full({}, c_tau_last, x_l.options());
  const auto t_hat = last * (s.gamma + 1);
  const auto delta = at::sqrt(t_hat.pow(2) - last.pow(2));
  s.x_noisy = x_l + (c.noise_scale_lambda * delta) * eps;
  s.t_hat = t_hat.reshape({1}).expand({x_l.size(-3)}).contiguous();
  return s;
}

at::Tensor sampler_update(const EdmConfig& c, const SamplerStep& s, double c_tau, const at::Tensor& x_denoised) {
  const auto th = s.t_hat.unsqueeze(-1).unsqueeze(-1);
  const auto delta = (s.x_noisy - x_denoised) / th;
  const auto dt = at::full({}, c_tau, s.t_hat.options()) - s.t_hat;
  return s.x_noisy + c.step_scale_eta * dt.unsqueeze(-1).unsqueeze(-1) * delta;
}

std::pair<at::Tensor, at::Tensor> random_rigid(std::int64_t n, at::Generator& gen, const at::TensorOptions& options,
                                               double s_trans) {
  const auto q = at::normal(0.0, 1.0, {n, 4}, gen, options);
  const auto u = q / q.norm(2, -1, true);
  const auto w = u.select(-1, 0), a = u.select(-1, 1), b = u.select(-1, 2), c = u.select(-1, 3);
  const auto rot = at::stack({1 - 2 * (b * b + c * c), 2 * (a * b - c * w), 2 * (a * c + b * w),
                              2 * (a * b + c * w), 1 - 2 * (a * a + c * c), 2 * (b * c - a * w),
                              2 * (a * c - b * w), 2 * (b * c + a * w), 1 - 2 * (a * a + b * b)},
                             -1)
                       .view({n, 3, 3});
  return {rot, s_trans * at::normal(0.0, 1.0, {n, 1, 3}, gen, options)};
}

at::Tensor centre_random_augmentation(const at::Tensor& x, std::int64_t n_sample, const at::Tensor& mask,
                                      at::Generator& gen, double s_trans) {
  const auto m = mask.to(x.scalar_type());
  const auto centre = (x * m.unsqueeze(-1)).sum(-2) / (m.sum(-1) + 1e-12);
  const auto centred = (x - centre.unsqueeze(-2)).unsqueeze(0).expand({n_sample, x.size(0), 3});
  const auto [rot, t] = random_rigid(n_sample, gen, x.options(), s_trans);
  return at::matmul(centred, rot.transpose(-1, -2)) + t;
}

at::Tensor weighted_rigid_align(const at::Tensor& x, const at::Tensor& target, const at::Tensor& weight) {
  at::NoGradGuard no_grad;
  const auto w = weight.unsqueeze(-1);
  const auto n = weight.sum(-1, true).unsqueeze(-1);
  const auto x_centroid = (x * w).sum(-2, true) / n;
  const auto t_centroid = (target * w).sum(-2, true) / n;
  const auto xc = x - x_centroid;
  const auto tc = target - t_centroid;
  const auto h = at::matmul((xc * w).transpose(-2, -1), tc);
  const auto svd = at::linalg_svd(h, false);
  const auto u = std::get<0>(svd).transpose(-1, -2);
  const auto v = std::get<2>(svd).transpose(-1, -2);
  const auto det = at::linalg_det(at::matmul(v, u));
  const auto diagonal = at::stack({at::ones_like(det), at::ones_like(det), det}, -1);
  const auto rot = at::matmul(v, at::matmul(at::diag_embed(diagonal), u));
  return (at::matmul(xc, rot.transpose(-1, -2)) + t_centroid).detach();
}

LossWeights LossWeights::from_json(const json& loss, LossWeights w) {
  if (!loss.is_object()) throw std::invalid_argument("'loss' must be an object");
  const json& weight = section(loss, "weight");
  w.alpha_diffusion = number(weight, "loss.weight", "alpha_diffusion", w.alpha_diffusion);
  w.alpha_bond = number(weight, "loss.weight", "alpha_bond", w.alpha_bond);
  w.smooth_lddt = number(weight, "loss.weight", "smooth_lddt", w.smooth_lddt);
  const json& mse = section(section(loss, "diffusion"), "mse");
  w.weight_mse = number(mse, "loss.diffusion.mse", "weight_mse", w.weight_mse);
  w.weight_dna = number(mse, "loss.diffusion.mse", "weight_dna", w.weight_dna);
  w.weight_rna = number(mse, "loss.diffusion.mse", "weight_rna", w.weight_rna);
  w.weight_ligand = number(mse, "loss.diffusion.mse", "weight_ligand", w.weight_ligand);
  w.eps = number(mse, "loss.diffusion.mse", "eps", w.eps);
  return w;
}

std::map<std::string, at::Tensor> diffusion_loss(const DiffusionLossInputs& in, const LossWeights& w, double sd) {
  std::map<std::string, at::Tensor> out;
  const auto& pred = in.pred;
  const auto dtype = pred.scalar_type();
  const auto mask = in.coordinate_mask.to(dtype);
  const auto truth = in.true_coordinate.to(dtype);
  const std::int64_t n_sample = pred.size(0), n_atom = pred.size(1);

  // Labels (no gradient).
  at::Tensor distance_mask, lddt_mask;
  {
    at::NoGradGuard no_grad;
    distance_mask = mask.unsqueeze(-1) * mask.unsqueeze(-2);
    const auto distance = at::cdist(truth, truth, 2.0, /*compute_mode=*/2) * distance_mask;
    const auto is_nuc = in.is_rna.to(at::kBool).logical_or(in.is_dna.to(at::kBool)).unsqueeze(-1);
    lddt_mask = (distance < 30.0).logical_and(is_nuc).to(dtype) + (distance < 15.0).logical_and(is_nuc.logical_not()).to(dtype);
    lddt_mask = lddt_mask * (1 - at::eye(n_atom, pred.options())) * distance_mask;
    out["label_dict.distance"] = distance;
    out["label_dict.distance_mask"] = distance_mask;
    out["label_dict.lddt_mask"] = lddt_mask;
  }
  const auto scale = (in.noise_level.pow(2) + sd * sd) / (sd * in.noise_level).pow(2);
  out["diffusion_per_sample_scale"] = scale.detach();

  // Aligned weighted MSE.
  const auto weight = (1 + w.weight_dna * in.is_dna.to(dtype) + w.weight_rna * in.is_rna.to(dtype) +
                       w.weight_ligand * in.is_ligand.to(dtype)) *
                      mask;
  const auto aligned = weighted_rigid_align((truth * mask.unsqueeze(-1)).unsqueeze(0).expand({n_sample, n_atom, 3}),
                                            pred.detach() * mask.unsqueeze(0).unsqueeze(-1), weight);
  const auto per_atom_se = (pred - aligned).pow(2).sum(-1);
  const auto per_sample = (weight * per_atom_se).sum(-1) / (mask.sum(-1, true) + w.eps);
  const auto mse = w.weight_mse * (per_sample * scale).mean(-1);
  out["mse.true_coordinate_aligned"] = aligned;
  out["mse.weight"] = weight.detach();
  out["mse_loss_unscaled"] = (w.weight_mse * per_sample.mean(-1)).detach();

  // Smooth LDDT (dense: over the lddt mask, per sample).
  auto smooth = [](const at::Tensor& diff) {
    at::Tensor e = at::zeros({}, diff.options());
    for (double th : {0.5, 1.0, 2.0, 4.0}) e = e + 0.25 * at::sigmoid(th - diff);
    return e;
  };
  const auto c_lm = lddt_mask.to(at::kBool).to(dtype);
  const auto true_distance = at::cdist(truth, truth);
  std::vector<at::Tensor> lddts;
  for (std::int64_t i = 0; i < n_sample; ++i) {
    const auto p = pred.narrow(0, i, 1);
    const auto e = smooth(at::abs(at::cdist(p, p) - true_distance));
    lddts.push_back((c_lm * e).sum({-1, -2}) / (c_lm.sum({-1, -2}) + 1e-6));
  }
  const auto lddt_loss = 1 - at::cat(lddts, -1).mean(-1);
  {
    at::NoGradGuard no_grad;
    const auto idx = at::nonzero(lddt_mask);
    const auto l = idx.select(1, 0), m = idx.select(1, 1);
    const auto td = (truth.index_select(0, l) - truth.index_select(0, m)).norm(2, -1);
    const auto pd = (pred.index_select(1, l) - pred.index_select(1, m)).norm(2, -1);
    out["smooth_lddt_loss_sparse"] = 1 - smooth(at::abs(pd - td)).mean(-1).mean(-1);
  }

  // Bond loss (sparse, over bond_mask x distance_mask).
  at::Tensor bond = at::zeros({}, pred.options());
  if (in.bond_mask.defined()) {
    const auto bonds = at::nonzero(in.bond_mask.to(dtype) * distance_mask);
    if (bonds.size(0) > 0) {
      const auto i = bonds.select(1, 0), j = bonds.select(1, 1);
      const auto pd = (pred.index_select(1, i) - pred.index_select(1, j)).norm(2, -1);
      const auto td = (truth.index_select(0, i) - truth.index_select(0, j)).norm(2, -1);
      bond = ((pd - td).pow(2).mean(-1) * scale).mean(-1);
    }
  }

  const double w_mse = w.alpha_diffusion, w_bond = w.alpha_diffusion * w.alpha_bond,
               w_lddt = w.alpha_diffusion * w.smooth_lddt;
  out["mse_loss"] = mse.detach();
  out["bond_loss"] = bond.detach();
  out["smooth_lddt_loss"] = lddt_loss.detach();
  out["weighted_mse_loss"] = (w_mse * mse).detach();
  out["weighted_bond_loss"] = (w_bond * bond).detach();
  out["weighted_smooth_lddt_loss"] = (w_lddt * lddt_loss).detach();
  out["loss"] = w_lddt * lddt_loss + w_bond * bond + w_mse * mse;
  return out;
}

}  // namespace yeto::protenix
