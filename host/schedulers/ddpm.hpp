// DDPMScheduler (Ho et al. 2020) as Diffusers v0.33.1 implements it.
#pragma once

#include "schedulers/scheduler.hpp"

namespace yeto::schedulers {

class DDPMScheduler : public Scheduler {
 public:
  DDPMScheduler(const nlohmann::json& config, const std::string& label = "scheduler_config.json");

  std::string class_name() const override { return "DDPMScheduler"; }
  void set_timesteps(const SetTimestepsArgs& args) override;
  using Scheduler::set_timesteps;
  at::Tensor timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return {}; }
  // Draws the variance noise from LibTorch's default generator; step_with_noise() takes it.
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) override;
  at::Tensor step_with_noise(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample,
                             const at::Tensor& variance_noise) const;
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const override;
  // v = sqrt(alphas_cumprod[t]) * noise - sqrt(1 - alphas_cumprod[t]) * sample
  at::Tensor get_velocity(const at::Tensor& sample, const at::Tensor& noise, const at::Tensor& timesteps) const;
  at::Tensor attribute(const std::string& name) const override;

  Prediction prediction() const override { return prediction_; }
  std::int64_t num_train_timesteps() const override { return num_train_; }
  TrainingBatch training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const override;

  const at::Tensor& betas() const { return betas_; }
  const at::Tensor& alphas_cumprod() const { return alphas_cumprod_; }

 private:
  std::int64_t previous_timestep(std::int64_t t) const;

  std::int64_t num_train_ = 1000;
  Prediction prediction_ = Prediction::epsilon;
  std::string variance_type_ = "fixed_small";
  bool clip_sample_ = true;
  double clip_sample_range_ = 1.0;
  bool thresholding_ = false;
  double dynamic_thresholding_ratio_ = 0.995;
  double sample_max_value_ = 1.0;
  std::string timestep_spacing_ = "leading";
  std::int64_t steps_offset_ = 0;
  at::Tensor betas_, alphas_, alphas_cumprod_, timesteps_;
  std::optional<std::int64_t> num_inference_steps_;
};

// Dynamic thresholding of an x0 prediction (Saharia et al. 2022), as Diffusers' _threshold_sample.
at::Tensor threshold_sample(const at::Tensor& x0, double ratio, double max_value);

}  // namespace yeto::schedulers
