// DPMSolverMultistepScheduler and UniPCMultistepScheduler.
//
// The per-step scalar arithmetic (alpha_t, sigma_t, lambda, h, the B(h) coefficients) runs in
// float32, as upstream computes it on 0-d float32 tensors, so the coefficients applied to the
// samples are the same floats.
#include "schedulers/multistep.hpp"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "schedulers/ddpm.hpp"
#include "schedulers/schedule_math.hpp"

namespace yeto::schedulers {
namespace {

// Solves the small dense system A x = b (Gaussian elimination with partial pivoting) in
// double; only used for UniPC orders >= 2 of the corrector and >= 3 of the predictor.
std::vector<double> solve(std::vector<std::vector<double>> A, std::vector<double> b) {
  const std::size_t n = b.size();
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[p][c])) p = r;
    std::swap(A[c], A[p]);
    std::swap(b[c], b[p]);
    if (A[c][c] == 0.0) throw Error("UniPC: singular coefficient system", ExitCode::failure);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = A[r][c] / A[c][c];
      for (std::size_t k = c; k < n; ++k) A[r][k] -= f * A[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n);
  for (std::size_t i = n; i-- > 0;) {
    double s = b[i];
    for (std::size_t k = i + 1; k < n; ++k) s -= A[i][k] * x[k];
    x[i] = s / A[i][i];
  }
  return x;
}

at::Tensor scale(const at::Tensor& t, float f) { return t * static_cast<double>(f); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Timestep rules

TimestepRule timestep_rule_from_name(const std::string& name, const std::string& where) {
  if (name == "diffusers-0.33") return TimestepRule::diffusers_0_33;
  if (name == "diffusers-0.37") return TimestepRule::diffusers_0_37;
  throw Error(where + ": unknown scheduler timestep rule '" + name + "' (diffusers-0.33 or diffusers-0.37)",
              ExitCode::bad_input);
}

std::string timestep_rule_name(TimestepRule rule) {
  return rule == TimestepRule::diffusers_0_37 ? "diffusers-0.37" : "diffusers-0.33";
}

TimestepRule timestep_rule_for_diffusers(const std::string& version, const std::string& where) {
  // MAJOR.MINOR with an optional rest (".PATCH", ".dev0", ...).
  std::size_t pos = 0;
  auto number = [&]() -> long {
    const std::size_t start = pos;
    while (pos < version.size() && version[pos] >= '0' && version[pos] <= '9') ++pos;
    if (pos == start || pos - start > 6)
      throw Error(where + ": Diffusers version '" + version + "' is not MAJOR.MINOR[.PATCH]", ExitCode::bad_input);
    return std::stol(version.substr(start, pos - start));
  };
  const long major = number();
  if (pos >= version.size() || version[pos] != '.')
    throw Error(where + ": Diffusers version '" + version + "' is not MAJOR.MINOR[.PATCH]", ExitCode::bad_input);
  ++pos;
  const long minor = number();
  return (major > 0 || minor >= 37) ? TimestepRule::diffusers_0_37 : TimestepRule::diffusers_0_33;
}

void set_timestep_rule(Scheduler& scheduler, TimestepRule rule) {
  if (auto* unipc = dynamic_cast<UniPCMultistepScheduler*>(&scheduler)) unipc->set_timestep_rule(rule);
}

// ---------------------------------------------------------------------------------------------
// MultistepBase

void MultistepBase::init_common(const ConfigView& cfg, bool allow_flow) {
  num_train_ = cfg.integer("num_train_timesteps", 1000);
  if (num_train_ < 2) cfg.fail("num_train_timesteps", "must be at least 2");
  betas_ = detail::make_betas(cfg, num_train_);
  alphas_cumprod_ = detail::make_alphas_cumprod(betas_, cfg.boolean("rescale_betas_zero_snr", false));
  train_sigmas_ = ((1.0 - alphas_cumprod_) / alphas_cumprod_).pow(0.5);
  prediction_ = detail::parse_prediction(cfg, allow_flow);
  flow_sigmas_ = cfg.boolean("use_flow_sigmas", false);
  flow_shift_ = cfg.number("flow_shift", 1.0);
  timestep_spacing_ = cfg.string("timestep_spacing", "linspace");
  cfg.require_one_of("timestep_spacing", timestep_spacing_, {"linspace", "leading", "trailing"});
  steps_offset_ = cfg.integer("steps_offset", 0);
  final_sigmas_type_ = cfg.string("final_sigmas_type", "zero");
  cfg.require_one_of("final_sigmas_type", final_sigmas_type_, {"zero", "sigma_min"});
  solver_order_ = static_cast<int>(cfg.integer("solver_order", 2));
  if (solver_order_ < 1 || solver_order_ > 3) cfg.fail("solver_order", "must be 1, 2 or 3");
  lower_order_final_ = cfg.boolean("lower_order_final", true);
  thresholding_ = cfg.boolean("thresholding", false);
  dynamic_thresholding_ratio_ = cfg.number("dynamic_thresholding_ratio", 0.995);
  sample_max_value_ = cfg.number("sample_max_value", 1.0);
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas"})
    if (cfg.boolean(key, false)) cfg.fail(key, "is not supported by this build (only the default sigma spacing)");
  if (prediction_ == Prediction::flow && !flow_sigmas_)
    cfg.fail("prediction_type", "flow_prediction needs use_flow_sigmas = true");
  // Until set_timesteps: the full training schedule, descending.
  timesteps_ = at::arange(num_train_ - 1, -1, -1, at::kLong);
  sigmas_ = train_sigmas_;
}

std::pair<double, double> MultistepBase::alpha_sigma(double sigma_in) const {
  const float sigma = static_cast<float>(sigma_in);
  if (flow_sigmas_) return {1.0f - sigma, sigma};
  const float alpha_t = 1.0f / std::sqrt(sigma * sigma + 1.0f);
  return {alpha_t, sigma * alpha_t};
}

double MultistepBase::lambda(double sigma) const {
  const auto [a, s] = alpha_sigma(sigma);
  return static_cast<float>(std::log(static_cast<float>(a)) - std::log(static_cast<float>(s)));
}

void MultistepBase::make_schedule(std::int64_t n, std::int64_t last_timestep, TimestepRule rule) {
  if (n < 1) throw Error(class_name() + ".set_timesteps needs num_inference_steps >= 1", ExitCode::bad_input);
  const double T = static_cast<double>(num_train_);
  std::vector<std::int64_t> ts;
  std::vector<double> sig;
  if (flow_sigmas_) {
    // Both rules work in float64 and truncate s * T to integer timesteps.
    std::vector<double> s;
    const auto shift = [this](double v) { return flow_shift_ * v / (1.0 + (flow_shift_ - 1.0) * v); };
    if (rule == TimestepRule::diffusers_0_33) {
      // s = 1 - linspace(1, 1/T, n + 1), shifted, reversed, last entry dropped.
      for (double a : detail::np_linspace(1.0, 1.0 / T, n + 1)) s.push_back(shift(1.0 - a));
      std::reverse(s.begin(), s.end());
      s.pop_back();
    } else {
      // s = linspace(1, 1/T, n + 1) without its last entry, shifted; a first sigma of 1 is
      // lowered by 1e-6 (so its timestep is T - 1, not T).
      for (double a : detail::np_linspace(1.0, 1.0 / T, n + 1)) s.push_back(shift(a));
      s.pop_back();
      if (std::fabs(s.front() - 1.0) < 1e-6) s.front() -= 1e-6;
    }
    for (double v : s) {
      sig.push_back(v);
      ts.push_back(static_cast<std::int64_t>(v * T));
    }
  } else {
    if (timestep_spacing_ == "linspace") {
      std::vector<double> lin = detail::np_linspace(0.0, static_cast<double>(last_timestep - 1), n + 1);
      for (std::int64_t i = n; i >= 1; --i) ts.push_back(static_cast<std::int64_t>(detail::np_round(lin[i])));
    } else if (timestep_spacing_ == "leading") {
      const std::int64_t ratio = last_timestep / (n + 1);
      for (std::int64_t i = n; i >= 1; --i) ts.push_back(i * ratio + steps_offset_);
    } else {
      const double ratio = T / static_cast<double>(n);
      for (std::int64_t i = 0;; ++i) {
        const double v = static_cast<double>(last_timestep) - static_cast<double>(i) * ratio;
        if (v <= 0.0) break;
        ts.push_back(static_cast<std::int64_t>(detail::np_round(v)) - 1);
      }
    }
    const at::Tensor table = train_sigmas_.contiguous();
    const float* p = table.data_ptr<float>();
    for (std::int64_t t : ts) {
      if (t < 0 || t >= num_train_) throw Error(class_name() + ": timestep spacing left the training range", ExitCode::bad_input);
      sig.push_back(p[t]);
    }
  }
  double last = 0.0;
  if (final_sigmas_type_ == "sigma_min") {
    if (flow_sigmas_ && class_name() == "UniPCMultistepScheduler") last = sig.back();
    else last = train_sigmas_[0].item<float>();
  }
  sig.push_back(last);
  sigmas_ = at::tensor(sig, at::kDouble).to(at::kFloat);
  timesteps_ = at::tensor(ts, at::kLong);
  num_inference_steps_ = static_cast<std::int64_t>(ts.size());
  model_outputs_.clear();
  lower_order_nums_ = 0;
  step_index_.reset();
}

std::int64_t MultistepBase::step_index_for(const at::Tensor& timestep) const {
  return detail::index_for_timestep(timesteps_, timestep.cpu(), timesteps_.size(0) - 1);
}

at::Tensor MultistepBase::to_x0(const at::Tensor& model_output, const at::Tensor& sample, std::int64_t index) const {
  const double sigma = sigmas_[index].item<float>();
  const auto [alpha_t, sigma_t] = alpha_sigma(sigma);
  at::Tensor x0;
  switch (prediction_) {
    case Prediction::epsilon:
      x0 = (sample - scale(model_output, static_cast<float>(sigma_t))) / static_cast<double>(static_cast<float>(alpha_t));
      break;
    case Prediction::sample: x0 = model_output; break;
    case Prediction::v_prediction:
      x0 = scale(sample, static_cast<float>(alpha_t)) - scale(model_output, static_cast<float>(sigma_t));
      break;
    case Prediction::flow: x0 = sample - scale(model_output, static_cast<float>(sigma)); break;
  }
  if (thresholding_) x0 = threshold_sample(x0, dynamic_thresholding_ratio_, sample_max_value_);
  return x0;
}

at::Tensor MultistepBase::add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const {
  const at::Tensor ts = timesteps.reshape({-1}).cpu();
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < ts.size(0); ++i) idx.push_back(step_index_for(ts[i]));
  const at::Tensor sigma = detail::per_sample(
      sigmas_.index_select(0, at::tensor(idx, at::kLong)).to(original.device()).to(original.scalar_type()),
      original.dim());
  at::Tensor alpha_t, sigma_t;
  if (flow_sigmas_) {
    alpha_t = 1.0 - sigma;
    sigma_t = sigma;
  } else {
    alpha_t = 1.0 / (sigma.pow(2) + 1.0).pow(0.5);
    sigma_t = sigma * alpha_t;
  }
  return alpha_t * original + sigma_t * noise;
}

at::Tensor MultistepBase::attribute(const std::string& name) const {
  if (name == "betas") return betas_;
  if (name == "alphas_cumprod") return alphas_cumprod_;
  if (name == "timesteps") return timesteps_;
  if (name == "sigmas") return sigmas_;
  if (name == "lower_order_nums") return at::scalar_tensor(static_cast<std::int64_t>(lower_order_nums_), at::kLong);
  if (name == "step_index") return step_index_ ? at::scalar_tensor(*step_index_, at::kLong) : at::Tensor();
  if (name == "model_outputs") {
    if (model_outputs_.empty()) return {};
    return at::stack(std::vector<at::Tensor>(model_outputs_.begin(), model_outputs_.end()));
  }
  return {};
}

TrainingBatch MultistepBase::training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const {
  if (!flow_sigmas_) return detail::vp_training_batch(alphas_cumprod_, prediction_, x0, noise, indices);
  // Flow sigmas: the flow-matching training schedule with this config's flow_shift, index 0 = sigma 1.
  const at::Tensor s = at::arange(num_train_, 0, -1, at::kDouble) / static_cast<double>(num_train_);
  const at::Tensor sig = (flow_shift_ * s / (1.0 + (flow_shift_ - 1.0) * s)).to(at::kFloat);
  return detail::flow_training_batch(sig, sig * static_cast<double>(num_train_), x0, noise, indices);
}

// ---------------------------------------------------------------------------------------------
// DPMSolverMultistepScheduler

DPMSolverMultistepScheduler::DPMSolverMultistepScheduler(const nlohmann::json& config, const std::string& label) {
  config_ = config;
  const ConfigView cfg(config, label);
  init_common(cfg, true);
  algorithm_type_ = cfg.string("algorithm_type", "dpmsolver++");
  if (algorithm_type_ == "deis") algorithm_type_ = "dpmsolver++";  // as upstream
  cfg.require_one_of("algorithm_type", algorithm_type_, {"dpmsolver++"});
  solver_type_ = cfg.string("solver_type", "midpoint");
  if (solver_type_ == "logrho" || solver_type_ == "bh1" || solver_type_ == "bh2") solver_type_ = "midpoint";
  cfg.require_one_of("solver_type", solver_type_, {"midpoint", "heun"});
  euler_at_final_ = cfg.boolean("euler_at_final", false);
  lambda_min_clipped_ = cfg.number("lambda_min_clipped", -INFINITY);
  variance_type_ = cfg.string("variance_type", "");
}

void DPMSolverMultistepScheduler::set_timesteps(const SetTimestepsArgs& args) {
  if (!args.num_inference_steps)
    throw Error("DPMSolverMultistepScheduler.set_timesteps needs num_inference_steps", ExitCode::bad_input);
  // Clip the minimum lambda(t) for numerical stability (matters for the cosine schedule).
  const at::Tensor lambdas = (alphas_cumprod_.sqrt().log() - (1.0 - alphas_cumprod_).sqrt().log()).flip({0});
  const std::int64_t clipped =
      at::searchsorted(lambdas, at::scalar_tensor(lambda_min_clipped_, at::kFloat).reshape({1})).item<std::int64_t>();
  make_schedule(*args.num_inference_steps, num_train_ - clipped);
}

at::Tensor DPMSolverMultistepScheduler::step(const at::Tensor& model_output_in, const at::Tensor& timestep,
                                             const at::Tensor& sample_in) {
  if (num_inference_steps_ == 0)
    throw Error("DPMSolverMultistepScheduler.step: call set_timesteps first", ExitCode::bad_input);
  if (!step_index_) step_index_ = step_index_for(timestep);
  const std::int64_t i = *step_index_;
  const std::int64_t n = timesteps_.size(0);
  if (i >= n) throw Error("DPMSolverMultistepScheduler.step: called more times than there are timesteps", ExitCode::bad_input);
  const bool final_low = (i == n - 1) && (euler_at_final_ || (lower_order_final_ && n < 15) || final_sigmas_type_ == "zero");
  const bool second_low = (i == n - 2) && lower_order_final_ && n < 15;

  at::Tensor model_output = model_output_in;
  if (prediction_ == Prediction::epsilon && (variance_type_ == "learned" || variance_type_ == "learned_range"))
    model_output = model_output.slice(1, 0, 3);
  const at::Tensor converted = to_x0(model_output, sample_in, i);
  model_outputs_.push_back(converted);
  while (static_cast<int>(model_outputs_.size()) > solver_order_) model_outputs_.pop_front();
  const at::Tensor sample = sample_in.to(at::kFloat);

  auto as = [&](std::int64_t k) { return alpha_sigma(sigmas_[k].item<float>()); };
  const auto [alpha_t, sigma_t] = as(i + 1);
  const auto [alpha_s0, sigma_s0] = as(i);
  const float lambda_t = static_cast<float>(lambda(sigmas_[i + 1].item<float>()));
  const float lambda_s0 = static_cast<float>(lambda(sigmas_[i].item<float>()));
  const float h = lambda_t - lambda_s0;
  const float ratio = static_cast<float>(sigma_t) / static_cast<float>(sigma_s0);
  const float em1 = std::exp(-h) - 1.0f;
  const float a_em1 = static_cast<float>(alpha_t) * em1;
  const at::Tensor& m0 = model_outputs_.back();
  at::Tensor prev;
  if (solver_order_ == 1 || lower_order_nums_ < 1 || final_low) {
    prev = scale(sample, ratio) - scale(m0, a_em1);
  } else {
    const float lambda_s1 = static_cast<float>(lambda(sigmas_[i - 1].item<float>()));
    const at::Tensor& m1 = model_outputs_[model_outputs_.size() - 2];
    const float h0 = lambda_s0 - lambda_s1;
    const float r0 = h0 / h;
    if (solver_order_ == 2 || lower_order_nums_ < 2 || second_low) {
      const at::Tensor D1 = scale(m0 - m1, 1.0f / r0);
      if (solver_type_ == "midpoint") {
        prev = scale(sample, ratio) - scale(m0, a_em1) - scale(D1, 0.5f * a_em1);
      } else {
        prev = scale(sample, ratio) - scale(m0, a_em1) + scale(D1, static_cast<float>(alpha_t) * (em1 / h + 1.0f));
      }
    } else {
      const float lambda_s2 = static_cast<float>(lambda(sigmas_[i - 2].item<float>()));
      const at::Tensor& m2 = model_outputs_[model_outputs_.size() - 3];
      const float h1 = lambda_s1 - lambda_s2;
      const float r1 = h1 / h;
      const at::Tensor D1_0 = scale(m0 - m1, 1.0f / r0);
      const at::Tensor D1_1 = scale(m1 - m2, 1.0f / r1);
      const at::Tensor D1 = D1_0 + scale(D1_0 - D1_1, r0 / (r0 + r1));
      const at::Tensor D2 = scale(D1_0 - D1_1, 1.0f / (r0 + r1));
      const float a = static_cast<float>(alpha_t);
      prev = scale(sample, ratio) - scale(m0, a_em1) + scale(D1, a * (em1 / h + 1.0f)) -
             scale(D2, a * ((em1 + h) / (h * h) - 0.5f));
    }
  }
  if (lower_order_nums_ < solver_order_) ++lower_order_nums_;
  ++*step_index_;
  return prev.to(model_output.scalar_type());
}

// ---------------------------------------------------------------------------------------------
// UniPCMultistepScheduler

UniPCMultistepScheduler::UniPCMultistepScheduler(const nlohmann::json& config, const std::string& label) {
  config_ = config;
  const ConfigView cfg(config, label);
  init_common(cfg, true);
  solver_type_ = cfg.string("solver_type", "bh2");
  if (solver_type_ == "midpoint" || solver_type_ == "heun" || solver_type_ == "logrho") solver_type_ = "bh2";
  cfg.require_one_of("solver_type", solver_type_, {"bh1", "bh2"});
  predict_x0_ = cfg.boolean("predict_x0", true);
  if (!predict_x0_ && prediction_ == Prediction::flow)
    cfg.fail("predict_x0", "must be true with prediction_type flow_prediction");
  disable_corrector_ = cfg.integers("disable_corrector");
  if (config.contains("solver_p") && !config["solver_p"].is_null())
    cfg.fail("solver_p", "(an external predictor scheduler) is not supported");
  dynamic_shifting_ = cfg.boolean("use_dynamic_shifting", false);
}

void UniPCMultistepScheduler::set_timesteps(const SetTimestepsArgs& args) {
  if (!args.num_inference_steps)
    throw Error("UniPCMultistepScheduler.set_timesteps needs num_inference_steps", ExitCode::bad_input);
  if (args.mu) {
    if (!dynamic_shifting_)
      throw Error("UniPCMultistepScheduler.set_timesteps: mu needs use_dynamic_shifting = true", ExitCode::bad_input);
    flow_shift_ = std::exp(*args.mu);
  }
  make_schedule(*args.num_inference_steps, num_train_, timestep_rule_);
  last_sample_ = at::Tensor();
  this_order_ = 0;
}

at::Tensor UniPCMultistepScheduler::predictor(const at::Tensor& x, int order) const {
  const std::int64_t i = *step_index_;
  const at::Tensor& m0 = model_outputs_.back();
  const auto [alpha_t, sigma_t] = alpha_sigma(sigmas_[i + 1].item<float>());
  const auto [alpha_s0, sigma_s0] = alpha_sigma(sigmas_[i].item<float>());
  const float lambda_s0 = static_cast<float>(lambda(sigmas_[i].item<float>()));
  const float h = static_cast<float>(lambda(sigmas_[i + 1].item<float>())) - lambda_s0;

  std::vector<float> rks;
  std::vector<at::Tensor> D1s;
  for (int k = 1; k < order; ++k) {
    const float lambda_si = static_cast<float>(lambda(sigmas_[i - k].item<float>()));
    const float rk = (lambda_si - lambda_s0) / h;
    rks.push_back(rk);
    D1s.push_back((model_outputs_[model_outputs_.size() - 1 - static_cast<std::size_t>(k)] - m0) /
                  static_cast<double>(rk));
  }
  rks.push_back(1.0f);
  const float hh = predict_x0_ ? -h : h;
  const float h_phi_1 = std::expm1(hh);
  float h_phi_k = h_phi_1 / hh - 1.0f;
  float factorial = 1.0f;
  const float B_h = solver_type_ == "bh1" ? hh : std::expm1(hh);
  std::vector<std::vector<double>> R;
  std::vector<double> b;
  for (int k = 1; k <= order; ++k) {
    std::vector<double> row;
    for (float r : rks) row.push_back(std::pow(static_cast<double>(r), k - 1));
    R.push_back(row);
    b.push_back(h_phi_k * factorial / B_h);
    factorial *= static_cast<float>(k + 1);
    h_phi_k = h_phi_k / hh - 1.0f / factorial;
  }
  at::Tensor pred_res;
  if (!D1s.empty()) {
    std::vector<double> rhos;
    if (order == 2) {
      rhos = {0.5};
    } else {
      std::vector<std::vector<double>> A(R.begin(), R.end() - 1);
      for (auto& row : A) row.pop_back();
      rhos = solve(A, std::vector<double>(b.begin(), b.end() - 1));
    }
    pred_res = D1s[0] * static_cast<double>(static_cast<float>(rhos[0]));
    for (std::size_t k = 1; k < D1s.size(); ++k) pred_res = pred_res + D1s[k] * static_cast<double>(static_cast<float>(rhos[k]));
  }
  at::Tensor x_t;
  if (predict_x0_) {
    x_t = scale(x, static_cast<float>(sigma_t) / static_cast<float>(sigma_s0)) -
          scale(m0, static_cast<float>(alpha_t) * h_phi_1);
    if (pred_res.defined()) x_t = x_t - scale(pred_res, static_cast<float>(alpha_t) * B_h);
  } else {
    x_t = scale(x, static_cast<float>(alpha_t) / static_cast<float>(alpha_s0)) -
          scale(m0, static_cast<float>(sigma_t) * h_phi_1);
    if (pred_res.defined()) x_t = x_t - scale(pred_res, static_cast<float>(sigma_t) * B_h);
  }
  return x_t.to(x.scalar_type());
}

at::Tensor UniPCMultistepScheduler::corrector(const at::Tensor& model_t, const at::Tensor& x, int order) const {
  const std::int64_t i = *step_index_;
  const at::Tensor& m0 = model_outputs_.back();
  const auto [alpha_t, sigma_t] = alpha_sigma(sigmas_[i].item<float>());
  const auto [alpha_s0, sigma_s0] = alpha_sigma(sigmas_[i - 1].item<float>());
  const float lambda_s0 = static_cast<float>(lambda(sigmas_[i - 1].item<float>()));
  const float h = static_cast<float>(lambda(sigmas_[i].item<float>())) - lambda_s0;

  std::vector<float> rks;
  std::vector<at::Tensor> D1s;
  for (int k = 1; k < order; ++k) {
    const float lambda_si = static_cast<float>(lambda(sigmas_[i - (k + 1)].item<float>()));
    const float rk = (lambda_si - lambda_s0) / h;
    rks.push_back(rk);
    D1s.push_back((model_outputs_[model_outputs_.size() - 1 - static_cast<std::size_t>(k)] - m0) /
                  static_cast<double>(rk));
  }
  rks.push_back(1.0f);
  const float hh = predict_x0_ ? -h : h;
  const float h_phi_1 = std::expm1(hh);
  float h_phi_k = h_phi_1 / hh - 1.0f;
  float factorial = 1.0f;
  const float B_h = solver_type_ == "bh1" ? hh : std::expm1(hh);
  std::vector<std::vector<double>> R;
  std::vector<double> b;
  for (int k = 1; k <= order; ++k) {
    std::vector<double> row;
    for (float r : rks) row.push_back(std::pow(static_cast<double>(r), k - 1));
    R.push_back(row);
    b.push_back(h_phi_k * factorial / B_h);
    factorial *= static_cast<float>(k + 1);
    h_phi_k = h_phi_k / hh - 1.0f / factorial;
  }
  std::vector<double> rhos = order == 1 ? std::vector<double>{0.5} : solve(R, b);
  at::Tensor corr_res;
  for (std::size_t k = 0; k < D1s.size(); ++k) {
    const at::Tensor term = D1s[k] * static_cast<double>(static_cast<float>(rhos[k]));
    corr_res = corr_res.defined() ? corr_res + term : term;
  }
  const at::Tensor D1_t = model_t - m0;
  at::Tensor res = D1_t * static_cast<double>(static_cast<float>(rhos.back()));
  if (corr_res.defined()) res = corr_res + res;
  at::Tensor x_t;
  if (predict_x0_) {
    x_t = scale(x, static_cast<float>(sigma_t) / static_cast<float>(sigma_s0)) -
          scale(m0, static_cast<float>(alpha_t) * h_phi_1) - scale(res, static_cast<float>(alpha_t) * B_h);
  } else {
    x_t = scale(x, static_cast<float>(alpha_t) / static_cast<float>(alpha_s0)) -
          scale(m0, static_cast<float>(sigma_t) * h_phi_1) - scale(res, static_cast<float>(sigma_t) * B_h);
  }
  return x_t.to(x.scalar_type());
}

at::Tensor UniPCMultistepScheduler::step(const at::Tensor& model_output, const at::Tensor& timestep,
                                         const at::Tensor& sample_in) {
  if (num_inference_steps_ == 0)
    throw Error("UniPCMultistepScheduler.step: call set_timesteps first", ExitCode::bad_input);
  if (!step_index_) step_index_ = step_index_for(timestep);
  const std::int64_t i = *step_index_;
  const std::int64_t n = timesteps_.size(0);
  if (i >= n) throw Error("UniPCMultistepScheduler.step: called more times than there are timesteps", ExitCode::bad_input);
  const bool corrector_disabled =
      std::find(disable_corrector_.begin(), disable_corrector_.end(), i - 1) != disable_corrector_.end();
  const bool use_corrector = i > 0 && !corrector_disabled && last_sample_.defined();

  // The x0 (or epsilon) form of this step's output, from the incoming (uncorrected) sample.
  at::Tensor converted;
  if (predict_x0_) {
    converted = to_x0(model_output, sample_in, i);
  } else {
    const auto [alpha_t, sigma_t] = alpha_sigma(sigmas_[i].item<float>());
    switch (prediction_) {
      case Prediction::epsilon: converted = model_output; break;
      case Prediction::sample:
        converted = (sample_in - scale(model_output, static_cast<float>(alpha_t))) / static_cast<double>(static_cast<float>(sigma_t));
        break;
      case Prediction::v_prediction:
        converted = scale(model_output, static_cast<float>(alpha_t)) + scale(sample_in, static_cast<float>(sigma_t));
        break;
      case Prediction::flow: throw Error("UniPC: flow_prediction needs predict_x0", ExitCode::bad_input);
    }
  }
  at::Tensor sample = sample_in;
  if (use_corrector) sample = corrector(converted, last_sample_, this_order_);

  model_outputs_.push_back(converted);
  while (static_cast<int>(model_outputs_.size()) > solver_order_) model_outputs_.pop_front();

  int order = solver_order_;
  if (lower_order_final_) order = static_cast<int>(std::min<std::int64_t>(solver_order_, n - i));
  this_order_ = std::min(order, lower_order_nums_ + 1);
  last_sample_ = sample;
  at::Tensor prev = predictor(sample, this_order_);
  if (lower_order_nums_ < solver_order_) ++lower_order_nums_;
  ++*step_index_;
  return prev;
}

at::Tensor UniPCMultistepScheduler::attribute(const std::string& name) const {
  if (name == "this_order") return at::scalar_tensor(static_cast<std::int64_t>(this_order_), at::kLong);
  if (name == "last_sample") return last_sample_;
  return MultistepBase::attribute(name);
}

}  // namespace yeto::schedulers
