// FlowMatchEulerDiscreteScheduler (SD3, Flux, LTX, ...) as Diffusers v0.33.1 implements it:
// sigma(t) with a static `shift` or resolution-dependent dynamic shifting (mu), Euler steps.
#pragma once

#include "schedulers/scheduler.hpp"

namespace yeto::schedulers {

class FlowMatchEulerDiscreteScheduler : public Scheduler {
 public:
  FlowMatchEulerDiscreteScheduler(const nlohmann::json& config, const std::string& label = "scheduler_config.json");

  std::string class_name() const override { return "FlowMatchEulerDiscreteScheduler"; }
  // num_inference_steps and/or explicit sigmas; mu is required when use_dynamic_shifting.
  void set_timesteps(const SetTimestepsArgs& args) override;
  using Scheduler::set_timesteps;
  at::Tensor timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) override;
  // The flow-matching forward process: sigma * noise + (1 - sigma) * sample, sigma looked up
  // per batch element from the current timesteps.
  at::Tensor scale_noise(const at::Tensor& sample, const at::Tensor& timesteps, const at::Tensor& noise) const;
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const override {
    return scale_noise(original, timesteps, noise);
  }
  at::Tensor attribute(const std::string& name) const override;

  Prediction prediction() const override { return Prediction::flow; }
  std::int64_t num_train_timesteps() const override { return num_train_; }
  // Positions index the construction-time (training) schedule, as the Diffusers training
  // scripts index `scheduler.sigmas` / `scheduler.timesteps` of a fresh scheduler.
  TrainingBatch training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const override;

  double shift() const { return shift_; }
  bool use_dynamic_shifting() const { return dynamic_; }
  // The time shift applied to sigmas in [0, 1] (exponential: e^mu / (e^mu + (1/t - 1)^sigma),
  // linear: mu / (mu + (1/t - 1)^sigma)).
  double time_shift(double mu, double sigma, double t) const;

 private:
  std::int64_t num_train_ = 1000;
  double shift_ = 1.0;
  bool dynamic_ = false;
  std::string time_shift_type_ = "exponential";
  std::optional<double> shift_terminal_;
  bool invert_sigmas_ = false;
  double sigma_min_ = 0.0, sigma_max_ = 1.0;
  at::Tensor timesteps_, sigmas_;              // current (float32)
  at::Tensor train_timesteps_, train_sigmas_;  // at construction (float32, num_train entries)
  std::optional<std::int64_t> step_index_;
};

}  // namespace yeto::schedulers
