#include "schedulers/flow_match_euler.hpp"

#include <cmath>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "schedulers/schedule_math.hpp"

namespace yeto::schedulers {

FlowMatchEulerDiscreteScheduler::FlowMatchEulerDiscreteScheduler(const nlohmann::json& config, const std::string& label) {
  config_ = config;
  const ConfigView cfg(config, label);
  num_train_ = cfg.integer("num_train_timesteps", 1000);
  if (num_train_ < 1) cfg.fail("num_train_timesteps", "must be positive");
  shift_ = cfg.number("shift", 1.0);
  dynamic_ = cfg.boolean("use_dynamic_shifting", false);
  time_shift_type_ = cfg.string("time_shift_type", "exponential");
  cfg.require_one_of("time_shift_type", time_shift_type_, {"exponential", "linear"});
  shift_terminal_ = cfg.opt_number("shift_terminal");
  if (shift_terminal_ && *shift_terminal_ == 0.0) shift_terminal_.reset();  // Diffusers tests truthiness
  invert_sigmas_ = cfg.boolean("invert_sigmas", false);
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"})
    if (cfg.boolean(key, false)) cfg.fail(key, "is not supported by this build (only the default sigma spacing)");

  // np.linspace(1, T, T, dtype=float32)[::-1], then float32 torch arithmetic.
  std::vector<float> ts;
  for (double v : detail::np_linspace(1.0, static_cast<double>(num_train_), num_train_)) ts.push_back(static_cast<float>(v));
  std::reverse(ts.begin(), ts.end());
  const at::Tensor timesteps = at::tensor(ts, at::kFloat);
  at::Tensor sigmas = timesteps / static_cast<double>(num_train_);
  if (!dynamic_) sigmas = shift_ * sigmas / (1.0 + (shift_ - 1.0) * sigmas);
  train_sigmas_ = sigmas;
  train_timesteps_ = sigmas * static_cast<double>(num_train_);
  sigmas_ = train_sigmas_;
  timesteps_ = train_timesteps_;
  sigma_min_ = sigmas[-1].item<float>();
  sigma_max_ = sigmas[0].item<float>();
}

double FlowMatchEulerDiscreteScheduler::time_shift(double mu, double sigma, double t) const {
  if (time_shift_type_ == "exponential") return std::exp(mu) / (std::exp(mu) + std::pow(1.0 / t - 1.0, sigma));
  return mu / (mu + std::pow(1.0 / t - 1.0, sigma));
}

void FlowMatchEulerDiscreteScheduler::set_timesteps(const SetTimestepsArgs& args) {
  if (dynamic_ && !args.mu)
    throw Error("FlowMatchEulerDiscreteScheduler: use_dynamic_shifting is set, so set_timesteps needs mu "
                "(calculate_shift of the image sequence length)",
                ExitCode::bad_input);
  std::vector<double> s;
  if (args.sigmas) {
    // np.array(sigmas).astype(np.float32)
    for (double v : *args.sigmas) s.push_back(static_cast<double>(static_cast<float>(v)));
  } else {
    if (!args.num_inference_steps || *args.num_inference_steps < 1)
      throw Error("FlowMatchEulerDiscreteScheduler.set_timesteps needs num_inference_steps >= 1 or sigmas",
                  ExitCode::bad_input);
    const double T = static_cast<double>(num_train_);
    for (double t : detail::np_linspace(sigma_max_ * T, sigma_min_ * T, *args.num_inference_steps)) s.push_back(t / T);
  }
  if (args.sigmas) {
    // Given sigmas are a float32 array upstream, and NumPy keeps float32 when combining it with
    // Python floats: the shift runs in float32.
    const float e_mu = args.mu ? static_cast<float>(std::exp(*args.mu)) : 0.0f;
    const float mu_f = args.mu ? static_cast<float>(*args.mu) : 0.0f;
    const float sh = static_cast<float>(shift_);
    for (double& v : s) {
      const float t = static_cast<float>(v);
      float r;
      if (!dynamic_) r = sh * t / (1.0f + (sh - 1.0f) * t);
      else if (time_shift_type_ == "exponential") r = e_mu / (e_mu + (1.0f / t - 1.0f));
      else r = mu_f / (mu_f + (1.0f / t - 1.0f));
      v = r;
    }
  } else {
    for (double& v : s) v = dynamic_ ? time_shift(*args.mu, 1.0, v) : shift_ * v / (1.0 + (shift_ - 1.0) * v);
  }
  if (shift_terminal_ && !s.empty()) {
    // Stretch so the last sigma equals shift_terminal (LTX-Video).
    const double scale = (1.0 - s.back()) / (1.0 - *shift_terminal_);
    for (double& v : s) v = 1.0 - (1.0 - v) / scale;
  }
  at::Tensor sig = at::tensor(s, at::kDouble).to(at::kFloat);
  at::Tensor ts = sig * static_cast<double>(num_train_);
  if (invert_sigmas_) {
    sig = 1.0 - sig;
    ts = sig * static_cast<double>(num_train_);
    sig = at::cat({sig, at::ones({1}, at::kFloat)});
  } else {
    sig = at::cat({sig, at::zeros({1}, at::kFloat)});
  }
  timesteps_ = ts;
  sigmas_ = sig;
  step_index_.reset();
}

at::Tensor FlowMatchEulerDiscreteScheduler::scale_noise(const at::Tensor& sample, const at::Tensor& timesteps,
                                                        const at::Tensor& noise) const {
  const at::Tensor ts = timesteps.reshape({-1}).cpu();
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < ts.size(0); ++i) idx.push_back(detail::index_for_timestep(timesteps_, ts[i]));
  const at::Tensor sigma = detail::per_sample(
      sigmas_.index_select(0, at::tensor(idx, at::kLong)).to(sample.device()).to(sample.scalar_type()), sample.dim());
  return sigma * noise + (1.0 - sigma) * sample;
}

at::Tensor FlowMatchEulerDiscreteScheduler::step(const at::Tensor& model_output, const at::Tensor& timestep,
                                                 const at::Tensor& sample) {
  if (!at::isFloatingType(timestep.scalar_type()))
    throw Error("FlowMatchEulerDiscreteScheduler.step: pass a value of scheduler.timesteps, not an integer index",
                ExitCode::bad_input);
  if (!step_index_) step_index_ = detail::index_for_timestep(timesteps_, timestep.cpu());
  const std::int64_t i = *step_index_;
  if (i + 1 >= sigmas_.size(0))
    throw Error("FlowMatchEulerDiscreteScheduler.step: called more times than there are timesteps", ExitCode::bad_input);
  // (sigma_next - sigma) in float32, as the upstream 0-d tensor arithmetic does.
  const float dt = sigmas_[i + 1].item<float>() - sigmas_[i].item<float>();
  at::Tensor prev = sample.to(at::kFloat) + static_cast<double>(dt) * model_output;
  ++*step_index_;
  return prev.to(model_output.scalar_type());
}

at::Tensor FlowMatchEulerDiscreteScheduler::attribute(const std::string& name) const {
  if (name == "timesteps") return timesteps_;
  if (name == "sigmas") return sigmas_;
  if (name == "step_index") return step_index_ ? at::scalar_tensor(*step_index_, at::kLong) : at::Tensor();
  return {};
}

TrainingBatch FlowMatchEulerDiscreteScheduler::training_batch(const at::Tensor& x0, const at::Tensor& noise,
                                                              const at::Tensor& indices) const {
  return detail::flow_training_batch(train_sigmas_, train_timesteps_, x0, noise, indices);
}

}  // namespace yeto::schedulers
