#include "learner/settings.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::learner {

const std::vector<std::string>& accepted_losses() {
  static const std::vector<std::string> names = {"flow_matching"};
  return names;
}

void check_loss_name(const std::string& name, const std::string& where) {
  const auto& ok = accepted_losses();
  if (std::find(ok.begin(), ok.end(), name) != ok.end()) return;
  throw UsageError(where + ": unknown loss '" + name + "'; accepted: " + join(ok, ", ") +
                   " (the scheduler's prediction type decides whether the target is the velocity, the noise, "
                   "the sample or v)");
}

TimestepSampling parse_timestep_sampling(const std::string& name) {
  if (name == "uniform") return TimestepSampling::uniform;
  if (name == "logit-normal") return TimestepSampling::logit_normal;
  if (name == "mode") return TimestepSampling::mode;
  throw UsageError("diffusion.timestep_sampling: unknown value '" + name + "'; accepted: uniform, logit-normal, mode");
}

LossWeighting parse_loss_weighting(const std::string& name) {
  if (name == "none") return LossWeighting::none;
  if (name == "linear") return LossWeighting::linear;
  if (name == "sigma") return LossWeighting::sigma;
  if (name == "snr") return LossWeighting::snr;
  if (name == "min-snr") return LossWeighting::min_snr;
  throw UsageError("diffusion.loss_weighting: unknown value '" + name +
                   "'; accepted: none, linear, sigma, snr, min-snr");
}

const char* loss_weighting_name(LossWeighting w) {
  switch (w) {
    case LossWeighting::none: return "none";
    case LossWeighting::linear: return "linear";
    case LossWeighting::sigma: return "sigma";
    case LossWeighting::snr: return "snr";
    case LossWeighting::min_snr: return "min-snr";
  }
  return "?";
}

LrSchedule parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::constant;
  if (name == "linear") return LrSchedule::linear;
  if (name == "cosine") return LrSchedule::cosine;
  throw UsageError("optimizer.schedule: unknown value '" + name + "'; accepted: constant, linear, cosine");
}

Settings read_settings(const config::Config& cfg) {
  Settings s;
  check_loss_name(cfg.get_string("diffusion.loss"),
                  cfg.entry("diffusion.loss").where.empty() ? "diffusion.loss"
                                                            : cfg.entry("diffusion.loss").where + ": diffusion.loss");
  s.seed = static_cast<std::uint64_t>(cfg.get_int("diffusion.seed"));
  s.density.kind = parse_timestep_sampling(cfg.get_string("diffusion.timestep_sampling"));
  s.density.logit_mean = cfg.get_number("diffusion.logit_mean");
  s.density.logit_std = cfg.get_number("diffusion.logit_std");
  s.density.mode_scale = cfg.get_number("diffusion.mode_scale");
  s.weighting = parse_loss_weighting(cfg.get_string("diffusion.loss_weighting"));
  s.min_snr_gamma = cfg.get_number("diffusion.min_snr_gamma");

  auto& o = s.optimizer;
  o.learning_rate = cfg.get_number("optimizer.learning_rate");
  o.beta1 = cfg.get_number("optimizer.beta1");
  o.beta2 = cfg.get_number("optimizer.beta2");
  o.eps = cfg.get_number("optimizer.eps");
  o.weight_decay = cfg.get_number("optimizer.weight_decay");
  o.schedule = parse_lr_schedule(cfg.get_string("optimizer.schedule"));
  o.warmup_steps = cfg.get_int("optimizer.warmup_steps");

  s.max_steps = cfg.get_int("train.max_steps");
  o.total_steps = std::max<std::int64_t>(1, s.max_steps);
  if (!cfg.is_auto("train.micro_batch_size")) {
    s.micro_batch_size = cfg.get_int("train.micro_batch_size");
    if (*s.micro_batch_size < 1)
      throw UsageError("train.micro_batch_size: must be at least 1 or \"auto\", got " +
                       std::to_string(*s.micro_batch_size));
  }
  s.gradient_accumulation = cfg.get_int("train.gradient_accumulation");
  s.max_grad_norm = cfg.get_number("train.max_grad_norm");
  s.checkpoint_every = cfg.get_int("train.checkpoint_every");
  s.memory_budget_mb = cfg.get_int("train.memory_budget_mb");
  s.validation_every = cfg.get_int("validation.every");
  s.validation_max_rows = cfg.get_int("validation.max_rows");
  s.validation_draws = cfg.get_int("validation.draws");
  s.validation_split = cfg.get_number("validation.split");
  s.validation_data = cfg.get_string("validation.data");
  s.tensorboard = cfg.get_bool("log.tensorboard");
  s.validation_prompts = cfg.get_list("validation.prompts");
  s.sample_every = cfg.get_int("validation.sample_every");
  s.sample_steps = cfg.get_int("validation.sample_steps");
  s.sample_seed = cfg.get_int("validation.sample_seed");
  s.sample_guidance = cfg.get_number("validation.sample_guidance");
  s.sample_height = cfg.get_int("validation.sample_height");
  s.sample_width = cfg.get_int("validation.sample_width");
  if (s.sample_height == 0) s.sample_height = cfg.get_int("data.height");
  if (s.sample_width == 0) s.sample_width = cfg.get_int("data.width");
  s.sample_max_sequence_length = cfg.get_int("model.max_sequence_length");
  s.tuning = cfg.get_string("tuning.mode");
  s.precision = cfg.get_string("model.precision");
  s.device = cfg.get_string("run.device");
  s.threads = static_cast<int>(cfg.get_int("run.threads"));
  if (o.warmup_steps > s.max_steps && s.max_steps > 0)
    throw UsageError("optimizer.warmup_steps (" + std::to_string(o.warmup_steps) + ") exceeds train.max_steps (" +
                     std::to_string(s.max_steps) + "); lower the warm-up or train longer");
  return s;
}

double learning_rate_at(const OptimizerSettings& o, std::int64_t step) {
  const double lr = o.learning_rate;
  step = std::max<std::int64_t>(step, 1);
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  if (o.schedule == LrSchedule::constant) return lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, o.total_steps - o.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - o.warmup_steps - 1) / span, 0.0, 1.0);
  if (o.schedule == LrSchedule::linear) return lr * (1.0 - progress);
  return lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace yeto::learner
