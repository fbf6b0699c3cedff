// DDPMScheduler, the schedule arithmetic the DDPM family shares, the scheduler factory and
// the training-side helpers.
#include "schedulers/ddpm.hpp"

#include <cmath>
#include <fenv.h>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "schedulers/schedule_math.hpp"

namespace yeto::schedulers {

std::string prediction_name(Prediction p) {
  switch (p) {
    case Prediction::epsilon: return "epsilon";
    case Prediction::v_prediction: return "v_prediction";
    case Prediction::sample: return "sample";
    case Prediction::flow: return "flow_prediction";
  }
  return "?";
}

at::Tensor Scheduler::attribute(const std::string&) const { return {}; }

at::Tensor Scheduler::indices_from_uniform(const at::Tensor& u) const {
  const std::int64_t n = num_train_timesteps();
  return (u.to(at::kDouble) * static_cast<double>(n)).floor().clamp(0, static_cast<double>(n - 1)).to(at::kLong);
}

double calculate_shift(double image_seq_len, double base_seq_len, double max_seq_len, double base_shift,
                       double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double b = base_shift - m * base_seq_len;
  return image_seq_len * m + b;
}

namespace detail {

std::vector<double> np_linspace(double start, double stop, std::int64_t num) {
  std::vector<double> out(static_cast<std::size_t>(std::max<std::int64_t>(num, 0)));
  if (num <= 0) return out;
  const double div = static_cast<double>(num - 1);
  const double step = num > 1 ? (stop - start) / div : 0.0;
  for (std::int64_t i = 0; i < num; ++i) out[static_cast<std::size_t>(i)] = static_cast<double>(i) * step + start;
  if (num > 1) out.back() = stop;
  return out;
}

double np_round(double x) {
  // std::nearbyint rounds in the current mode; the default (and what NumPy uses) is half-to-even.
  return std::nearbyint(x);
}

namespace {

at::Tensor betas_for_alpha_bar(std::int64_t n, double max_beta = 0.999) {
  auto alpha_bar = [](double t) {
    const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2.0);
    return c * c;
  };
  std::vector<float> betas(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double t1 = static_cast<double>(i) / static_cast<double>(n);
    const double t2 = static_cast<double>(i + 1) / static_cast<double>(n);
    betas[static_cast<std::size_t>(i)] = static_cast<float>(std::min(1.0 - alpha_bar(t2) / alpha_bar(t1), max_beta));
  }
  return at::tensor(betas, at::kFloat);
}

// Lin et al. 2023, "Common Diffusion Noise Schedules and Sample Steps are Flawed", algorithm 1.
at::Tensor rescale_zero_terminal_snr(const at::Tensor& betas) {
  at::Tensor alphas_bar_sqrt = at::cumprod(1.0 - betas, 0).sqrt();
  const at::Tensor a0 = alphas_bar_sqrt[0].clone();
  const at::Tensor a_last = alphas_bar_sqrt[-1].clone();
  alphas_bar_sqrt = (alphas_bar_sqrt - a_last) * (a0 / (a0 - a_last));
  const at::Tensor alphas_bar = alphas_bar_sqrt * alphas_bar_sqrt;
  const at::Tensor alphas = at::cat({alphas_bar.slice(0, 0, 1), alphas_bar.slice(0, 1) / alphas_bar.slice(0, 0, -1)});
  return 1.0 - alphas;
}

}  // namespace

at::Tensor make_betas(const ConfigView& cfg, std::int64_t n) {
  at::Tensor betas;
  if (auto trained = cfg.numbers("trained_betas")) {
    if (static_cast<std::int64_t>(trained->size()) != n)
      cfg.fail("trained_betas", "has " + std::to_string(trained->size()) + " entries, expected num_train_timesteps = " +
                                    std::to_string(n));
    betas = at::tensor(*trained, at::kDouble).to(at::kFloat);
  } else {
    const std::string schedule = cfg.string("beta_schedule", "linear");
    cfg.require_one_of("beta_schedule", schedule, {"linear", "scaled_linear", "squaredcos_cap_v2"});
    const double start = cfg.number("beta_start", 0.0001);
    const double end = cfg.number("beta_end", 0.02);
    if (schedule == "linear") {
      betas = at::linspace(start, end, n, at::kFloat);
    } else if (schedule == "scaled_linear") {
      betas = at::linspace(std::sqrt(start), std::sqrt(end), n, at::kFloat).pow(2);
    } else {
      betas = betas_for_alpha_bar(n);
    }
  }
  if (cfg.boolean("rescale_betas_zero_snr", false)) betas = rescale_zero_terminal_snr(betas);
  return betas;
}

at::Tensor make_alphas_cumprod(const at::Tensor& betas, bool rescale_zero_snr) {
  at::Tensor ac = at::cumprod(1.0 - betas, 0);
  // Close to 0 without being 0, so the first sigma is finite (Diffusers uses 2^-24).
  if (rescale_zero_snr) ac[-1] = std::ldexp(1.0, -24);
  return ac;
}

Prediction parse_prediction(const ConfigView& cfg, bool allow_flow) {
  const std::string p = cfg.string("prediction_type", "epsilon");
  std::vector<std::string> allowed = {"epsilon", "v_prediction", "sample"};
  if (allow_flow) allowed.push_back("flow_prediction");
  cfg.require_one_of("prediction_type", p, allowed);
  if (p == "epsilon") return Prediction::epsilon;
  if (p == "v_prediction") return Prediction::v_prediction;
  if (p == "sample") return Prediction::sample;
  return Prediction::flow;
}

std::int64_t index_for_timestep(const at::Tensor& schedule, const at::Tensor& timestep, std::int64_t missing) {
  const at::Tensor t = timestep.to(schedule.scalar_type()).reshape({});
  const at::Tensor hits = (schedule == t).nonzero();
  const std::int64_t n = hits.size(0);
  if (n == 0) {
    if (missing >= 0) return missing;
    throw Error("timestep " + std::to_string(timestep.to(at::kDouble).item<double>()) +
                    " is not in the scheduler's current timesteps (pass a value of scheduler.timesteps)",
                ExitCode::bad_input);
  }
  return hits[n > 1 ? 1 : 0][0].item<std::int64_t>();
}

at::Tensor per_sample(const at::Tensor& v, std::int64_t ndim) {
  at::Tensor out = v.reshape({-1});
  while (out.dim() < ndim) out = out.unsqueeze(-1);
  return out;
}

void check_indices(const at::Tensor& indices, std::int64_t n, const std::string& who) {
  if (indices.scalar_type() != at::kLong || indices.dim() != 1)
    throw Error(who + ": training indices must be a 1-d int64 tensor", ExitCode::bad_input);
  if (indices.numel() > 0 && (indices.min().item<std::int64_t>() < 0 || indices.max().item<std::int64_t>() >= n))
    throw Error(who + ": training indices must lie in [0, " + std::to_string(n) + ")", ExitCode::bad_input);
}

TrainingBatch vp_training_batch(const at::Tensor& alphas_cumprod, Prediction prediction, const at::Tensor& x0,
                                const at::Tensor& noise, const at::Tensor& indices) {
  check_indices(indices, alphas_cumprod.size(0), "training_batch");
  if (x0.sizes() != noise.sizes()) throw Error("training_batch: x0 and noise shapes differ", ExitCode::bad_input);
  if (x0.size(0) != indices.size(0))
    throw Error("training_batch: one training index per sample is needed", ExitCode::bad_input);
  TrainingBatch b;
  b.prediction = prediction;
  b.indices = indices;
  b.timesteps = indices.clone();
  const at::Tensor ac = alphas_cumprod.index_select(0, indices.cpu());
  b.alpha_t = ac.sqrt();
  b.sigma_t = (1.0 - ac).sqrt();
  b.snr = ac / (1.0 - ac);
  const auto opts = x0.options();
  const at::Tensor a = per_sample(b.alpha_t.to(opts), x0.dim());
  const at::Tensor s = per_sample(b.sigma_t.to(opts), x0.dim());
  b.noisy = a * x0 + s * noise;
  switch (prediction) {
    case Prediction::epsilon: b.target = noise; break;
    case Prediction::v_prediction: b.target = a * noise - s * x0; break;
    case Prediction::sample: b.target = x0; break;
    case Prediction::flow: b.target = noise - x0; break;
  }
  return b;
}

TrainingBatch flow_training_batch(const at::Tensor& train_sigmas, const at::Tensor& train_timesteps,
                                  const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) {
  check_indices(indices, train_sigmas.size(0), "training_batch");
  if (x0.sizes() != noise.sizes()) throw Error("training_batch: x0 and noise shapes differ", ExitCode::bad_input);
  if (x0.size(0) != indices.size(0))
    throw Error("training_batch: one training index per sample is needed", ExitCode::bad_input);
  TrainingBatch b;
  b.prediction = Prediction::flow;
  b.indices = indices;
  const at::Tensor idx = indices.cpu();
  b.sigma_t = train_sigmas.index_select(0, idx);
  b.timesteps = train_timesteps.index_select(0, idx);
  b.alpha_t = 1.0 - b.sigma_t;
  b.snr = (b.alpha_t / b.sigma_t).pow(2);
  const at::Tensor s = per_sample(b.sigma_t.to(x0.options()), x0.dim());
  b.noisy = (1.0 - s) * x0 + s * noise;
  b.target = noise - x0;
  return b;
}

}  // namespace detail

at::Tensor threshold_sample(const at::Tensor& x0, double ratio, double max_value) {
  const auto dtype = x0.scalar_type();
  at::Tensor s = x0;
  if (dtype != at::kFloat && dtype != at::kDouble) s = s.to(at::kFloat);
  const auto sizes = s.sizes().vec();
  at::Tensor flat = s.reshape({sizes[0], -1});
  at::Tensor q = at::quantile(flat.abs(), ratio, 1);
  q = q.clamp(1.0, max_value).unsqueeze(1);
  flat = at::max(at::min(flat, q), -q) / q;
  return flat.reshape(sizes).to(dtype);
}

// ---------------------------------------------------------------------------------------------

DDPMScheduler::DDPMScheduler(const nlohmann::json& config, const std::string& label) {
  config_ = config;
  const ConfigView cfg(config, label);
  num_train_ = cfg.integer("num_train_timesteps", 1000);
  if (num_train_ < 2) cfg.fail("num_train_timesteps", "must be at least 2");
  betas_ = detail::make_betas(cfg, num_train_);
  alphas_ = 1.0 - betas_;
  alphas_cumprod_ = detail::make_alphas_cumprod(betas_, cfg.boolean("rescale_betas_zero_snr", false));
  prediction_ = detail::parse_prediction(cfg, false);
  variance_type_ = cfg.string("variance_type", "fixed_small");
  cfg.require_one_of("variance_type", variance_type_,
                     {"fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log", "learned", "learned_range"});
  clip_sample_ = cfg.boolean("clip_sample", true);
  clip_sample_range_ = cfg.number("clip_sample_range", 1.0);
  thresholding_ = cfg.boolean("thresholding", false);
  dynamic_thresholding_ratio_ = cfg.number("dynamic_thresholding_ratio", 0.995);
  sample_max_value_ = cfg.number("sample_max_value", 1.0);
  timestep_spacing_ = cfg.string("timestep_spacing", "leading");
  cfg.require_one_of("timestep_spacing", timestep_spacing_, {"linspace", "leading", "trailing"});
  steps_offset_ = cfg.integer("steps_offset", 0);
  timesteps_ = at::arange(num_train_ - 1, -1, -1, at::kLong);
}

void DDPMScheduler::set_timesteps(const SetTimestepsArgs& args) {
  if (!args.num_inference_steps)
    throw Error("DDPMScheduler.set_timesteps needs num_inference_steps", ExitCode::bad_input);
  if (args.sigmas) throw Error("DDPMScheduler.set_timesteps takes no sigmas", ExitCode::bad_input);
  const std::int64_t n = *args.num_inference_steps;
  if (n < 1 || n > num_train_)
    throw Error("DDPMScheduler: num_inference_steps (" + std::to_string(n) + ") must be in [1, num_train_timesteps = " +
                    std::to_string(num_train_) + "]",
                ExitCode::bad_input);
  std::vector<std::int64_t> ts;
  if (timestep_spacing_ == "linspace") {
    for (double v : detail::np_linspace(0.0, static_cast<double>(num_train_ - 1), n))
      ts.push_back(static_cast<std::int64_t>(detail::np_round(v)));
    std::reverse(ts.begin(), ts.end());
  } else if (timestep_spacing_ == "leading") {
    const std::int64_t ratio = num_train_ / n;
    for (std::int64_t i = n - 1; i >= 0; --i) ts.push_back(i * ratio + steps_offset_);
  } else {
    const double ratio = static_cast<double>(num_train_) / static_cast<double>(n);
    // np.arange(T, 0, -ratio): T - i * ratio while > 0, rounded, minus one.
    for (std::int64_t i = 0;; ++i) {
      const double v = static_cast<double>(num_train_) - static_cast<double>(i) * ratio;
      if (v <= 0.0) break;
      ts.push_back(static_cast<std::int64_t>(detail::np_round(v)) - 1);
    }
  }
  timesteps_ = at::tensor(ts, at::kLong);
  num_inference_steps_ = n;
}

std::int64_t DDPMScheduler::previous_timestep(std::int64_t t) const {
  if (!num_inference_steps_) return t - 1;
  const std::int64_t idx = (timesteps_ == t).nonzero()[0][0].item<std::int64_t>();
  if (idx == timesteps_.size(0) - 1) return -1;
  return timesteps_[idx + 1].item<std::int64_t>();
}

at::Tensor DDPMScheduler::step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) {
  const std::int64_t t = timestep.to(at::kLong).item<std::int64_t>();
  at::Tensor noise;
  if (t > 0) noise = at::randn(model_output.sizes(), model_output.options().dtype(at::kFloat)).to(model_output.dtype());
  return step_with_noise(model_output, timestep, sample, noise);
}

at::Tensor DDPMScheduler::step_with_noise(const at::Tensor& model_output_in, const at::Tensor& timestep,
                                          const at::Tensor& sample, const at::Tensor& variance_noise) const {
  const std::int64_t t = timestep.to(at::kLong).item<std::int64_t>();
  if (t < 0 || t >= num_train_) throw Error("DDPMScheduler.step: timestep out of range", ExitCode::bad_input);
  const std::int64_t prev_t = previous_timestep(t);
  at::Tensor model_output = model_output_in;
  at::Tensor predicted_variance;
  const bool learned = variance_type_ == "learned" || variance_type_ == "learned_range";
  if (learned && model_output.size(1) == sample.size(1) * 2) {
    auto parts = model_output.split(sample.size(1), 1);
    model_output = parts[0];
    predicted_variance = parts[1];
  }
  const at::Tensor alpha_prod_t = alphas_cumprod_[t];
  const at::Tensor alpha_prod_t_prev = prev_t >= 0 ? alphas_cumprod_[prev_t] : at::scalar_tensor(1.0, at::kFloat);
  const at::Tensor beta_prod_t = 1.0 - alpha_prod_t;
  const at::Tensor beta_prod_t_prev = 1.0 - alpha_prod_t_prev;
  const at::Tensor current_alpha_t = alpha_prod_t / alpha_prod_t_prev;
  const at::Tensor current_beta_t = 1.0 - current_alpha_t;

  at::Tensor x0;
  switch (prediction_) {
    case Prediction::epsilon: x0 = (sample - beta_prod_t.sqrt() * model_output) / alpha_prod_t.sqrt(); break;
    case Prediction::sample: x0 = model_output; break;
    case Prediction::v_prediction: x0 = alpha_prod_t.sqrt() * sample - beta_prod_t.sqrt() * model_output; break;
    case Prediction::flow: throw Error("DDPMScheduler does not support flow_prediction", ExitCode::bad_input);
  }
  if (thresholding_) x0 = threshold_sample(x0, dynamic_thresholding_ratio_, sample_max_value_);
  else if (clip_sample_) x0 = x0.clamp(-clip_sample_range_, clip_sample_range_);

  const at::Tensor x0_coeff = (alpha_prod_t_prev.sqrt() * current_beta_t) / beta_prod_t;
  const at::Tensor sample_coeff = current_alpha_t.sqrt() * beta_prod_t_prev / beta_prod_t;
  at::Tensor prev = x0_coeff * x0 + sample_coeff * sample;

  if (t > 0) {
    if (!variance_noise.defined())
      throw Error("DDPMScheduler.step: variance noise is needed for t > 0", ExitCode::bad_input);
    // Posterior variance (formula 7 of the DDPM paper), clamped so its log stays finite.
    at::Tensor variance = (beta_prod_t_prev / beta_prod_t * current_beta_t).clamp_min(1e-20);
    at::Tensor std_dev;
    if (variance_type_ == "fixed_small") {
      std_dev = variance.sqrt();
    } else if (variance_type_ == "fixed_small_log") {
      std_dev = (0.5 * variance.log()).exp();
    } else if (variance_type_ == "fixed_large") {
      std_dev = current_beta_t.sqrt();
    } else if (variance_type_ == "fixed_large_log") {
      std_dev = (0.5 * current_beta_t.log()).exp();
    } else if (variance_type_ == "learned") {
      return prev + (0.5 * predicted_variance).exp() * variance_noise;  // predicted log-variance
    } else {  // learned_range
      const at::Tensor min_log = variance.log();
      const at::Tensor max_log = current_beta_t.log();
      const at::Tensor frac = (predicted_variance + 1.0) / 2.0;
      return prev + (0.5 * (frac * max_log + (1.0 - frac) * min_log)).exp() * variance_noise;
    }
    prev = prev + std_dev * variance_noise;
  }
  return prev;
}

at::Tensor DDPMScheduler::add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const {
  const at::Tensor ac = alphas_cumprod_.to(original.device()).to(original.scalar_type());
  const at::Tensor t = timesteps.to(original.device()).to(at::kLong).reshape({-1});
  const at::Tensor a = detail::per_sample(ac.index_select(0, t).pow(0.5), original.dim());
  const at::Tensor s = detail::per_sample((1.0 - ac.index_select(0, t)).pow(0.5), original.dim());
  return a * original + s * noise;
}

at::Tensor DDPMScheduler::get_velocity(const at::Tensor& sample, const at::Tensor& noise, const at::Tensor& timesteps) const {
  const at::Tensor ac = alphas_cumprod_.to(sample.device()).to(sample.scalar_type());
  const at::Tensor t = timesteps.to(sample.device()).to(at::kLong).reshape({-1});
  const at::Tensor a = detail::per_sample(ac.index_select(0, t).pow(0.5), sample.dim());
  const at::Tensor s = detail::per_sample((1.0 - ac.index_select(0, t)).pow(0.5), sample.dim());
  return a * noise - s * sample;
}

at::Tensor DDPMScheduler::attribute(const std::string& name) const {
  if (name == "betas") return betas_;
  if (name == "alphas") return alphas_;
  if (name == "alphas_cumprod") return alphas_cumprod_;
  if (name == "timesteps") return timesteps_;
  return {};
}

TrainingBatch DDPMScheduler::training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const {
  return detail::vp_training_batch(alphas_cumprod_, prediction_, x0, noise, indices);
}

}  // namespace yeto::schedulers
