// Multistep solvers used for sampling: DPMSolverMultistepScheduler (DPM-Solver++, as PixArt-Alpha
// ships it) and UniPCMultistepScheduler (UniPC bh1/bh2, VP sigmas or flow sigmas as Wan ships
// it), both as Diffusers v0.33.1 implements them. UniPC's flow-sigma timestep table also has the
// rule of Diffusers v0.37.0 and later (TimestepRule::diffusers_0_37), chosen per scheduler.
#pragma once

#include <deque>
#include <string>

#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_config.hpp"

namespace yeto::schedulers {

// Which Diffusers release's set_timesteps rule a scheduler follows where releases differ. Only
// UniPC with use_flow_sigmas is affected (Diffusers v0.37.0 changed it):
//  * diffusers_0_33 (v0.33.1 - v0.36.0): s = 1 - linspace(1, 1/T, n + 1), shifted, reversed,
//    last entry dropped; 4 steps with flow_shift 3: timesteps 999, 899, 749, 499;
//  * diffusers_0_37 (v0.37.0 and later): s = linspace(1, 1/T, n + 1) without its last entry,
//    shifted, the first sigma lowered by 1e-6 when it is 1; the same 4 steps: 999, 900, 750, 500.
// Every other scheduler and UniPC with VP sigmas compute the same table under both.
enum class TimestepRule { diffusers_0_33, diffusers_0_37 };

// "diffusers-0.33" / "diffusers-0.37" (the run key model.scheduler_timesteps); throws
// yeto::Error (bad_input) naming `where` for anything else.
TimestepRule timestep_rule_from_name(const std::string& name, const std::string& where);
std::string timestep_rule_name(TimestepRule rule);
// The rule of a Diffusers release ("0.36.0" -> diffusers_0_33, "0.40.0" -> diffusers_0_37);
// throws yeto::Error (bad_input) naming `where` when `version` is not MAJOR.MINOR[.PATCH...].
TimestepRule timestep_rule_for_diffusers(const std::string& version, const std::string& where);
// Applies `rule` to `scheduler` when its class has one (UniPCMultistepScheduler); a no-op for
// the others. Takes effect at the next set_timesteps.
void set_timestep_rule(Scheduler& scheduler, TimestepRule rule);

// State and tables shared by the two: VP sigmas sqrt((1 - alphas_cumprod) / alphas_cumprod)
// (alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma * alpha_t) or, with use_flow_sigmas,
// flow sigmas (alpha_t = 1 - sigma, sigma_t = sigma); integer timesteps.
class MultistepBase : public Scheduler {
 public:
  at::Tensor timesteps() const override { return timesteps_; }
  at::Tensor sigmas() const override { return sigmas_; }
  at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const override;
  at::Tensor attribute(const std::string& name) const override;
  Prediction prediction() const override { return prediction_; }
  std::int64_t num_train_timesteps() const override { return num_train_; }
  TrainingBatch training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const override;

  // (alpha_t, sigma_t) of a sigma value.
  std::pair<double, double> alpha_sigma(double sigma) const;
  double lambda(double sigma) const;  // log(alpha_t) - log(sigma_t)

 protected:
  void init_common(const ConfigView& cfg, bool allow_flow);
  // Integer timesteps for `n` steps per timestep_spacing (VP) or flow sigmas, and the sigma
  // table with its final entry; resets the multistep state.
  // `rule` only matters with flow sigmas (see TimestepRule).
  void make_schedule(std::int64_t n, std::int64_t last_timestep, TimestepRule rule = TimestepRule::diffusers_0_33);
  std::int64_t step_index_for(const at::Tensor& timestep) const;
  at::Tensor to_x0(const at::Tensor& model_output, const at::Tensor& sample, std::int64_t index) const;

  std::int64_t num_train_ = 1000;
  Prediction prediction_ = Prediction::epsilon;
  bool flow_sigmas_ = false;
  double flow_shift_ = 1.0;
  std::string timestep_spacing_ = "linspace";
  std::int64_t steps_offset_ = 0;
  std::string final_sigmas_type_ = "zero";
  int solver_order_ = 2;
  bool lower_order_final_ = true;
  bool thresholding_ = false;
  double dynamic_thresholding_ratio_ = 0.995;
  double sample_max_value_ = 1.0;
  at::Tensor betas_, alphas_cumprod_, train_sigmas_;  // training schedule (float32)
  at::Tensor timesteps_, sigmas_;                     // current schedule: int64, float32
  std::int64_t num_inference_steps_ = 0;
  std::optional<std::int64_t> step_index_;
  std::deque<at::Tensor> model_outputs_;  // converted outputs (x0 predictions), newest last
  int lower_order_nums_ = 0;
};

class DPMSolverMultistepScheduler : public MultistepBase {
 public:
  DPMSolverMultistepScheduler(const nlohmann::json& config, const std::string& label = "scheduler_config.json");
  std::string class_name() const override { return "DPMSolverMultistepScheduler"; }
  void set_timesteps(const SetTimestepsArgs& args) override;
  using Scheduler::set_timesteps;
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) override;

 private:
  std::string algorithm_type_ = "dpmsolver++";
  std::string solver_type_ = "midpoint";
  bool euler_at_final_ = false;
  double lambda_min_clipped_ = -INFINITY;
  std::string variance_type_;
};

class UniPCMultistepScheduler : public MultistepBase {
 public:
  UniPCMultistepScheduler(const nlohmann::json& config, const std::string& label = "scheduler_config.json");
  std::string class_name() const override { return "UniPCMultistepScheduler"; }
  void set_timesteps(const SetTimestepsArgs& args) override;
  using Scheduler::set_timesteps;
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) override;
  at::Tensor attribute(const std::string& name) const override;
  // The flow-sigma timestep rule of the next set_timesteps (default diffusers_0_33).
  void set_timestep_rule(TimestepRule rule) { timestep_rule_ = rule; }
  TimestepRule timestep_rule() const { return timestep_rule_; }

 private:
  // UniP: advances `sample` from sigmas[i] to sigmas[i + 1]. UniC: recomputes the sample at
  // sigmas[i] from `last_sample` (at sigmas[i - 1]) using this step's model output; the
  // uncorrected sample only enters through that output.
  at::Tensor predictor(const at::Tensor& sample, int order) const;
  at::Tensor corrector(const at::Tensor& this_model_output, const at::Tensor& last_sample, int order) const;

  std::string solver_type_ = "bh2";
  bool predict_x0_ = true;
  std::vector<std::int64_t> disable_corrector_;
  bool dynamic_shifting_ = false;
  TimestepRule timestep_rule_ = TimestepRule::diffusers_0_33;
  at::Tensor last_sample_;
  int this_order_ = 0;
};

}  // namespace yeto::schedulers
