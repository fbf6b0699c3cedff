// The learner's settings, read once from the resolved run configuration so the loop never
// looks keys up by string, plus the torch-free pieces of the optimisation schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace yeto::config {
class Config;
}

namespace yeto::learner {

enum class TimestepSampling { uniform, logit_normal, mode };
enum class LossWeighting { none, linear, sigma, snr, min_snr };
enum class LrSchedule { constant, linear, cosine };

struct TimestepDensity {
  TimestepSampling kind = TimestepSampling::logit_normal;
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double mode_scale = 1.29;
};

struct OptimizerSettings {
  double learning_rate = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  LrSchedule schedule = LrSchedule::constant;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;  // train.max_steps: where linear/cosine reach zero
};

struct Settings {
  std::uint64_t seed = 0;
  TimestepDensity density;
  LossWeighting weighting = LossWeighting::none;
  double min_snr_gamma = 5.0;
  OptimizerSettings optimizer;
  std::int64_t max_steps = 1000;
  std::optional<std::int64_t> micro_batch_size;  // nullopt: auto
  std::int64_t gradient_accumulation = 1;
  double max_grad_norm = 1.0;
  std::int64_t checkpoint_every = 100;
  std::int64_t memory_budget_mb = 0;
  std::int64_t validation_every = 0;
  std::int64_t validation_max_rows = 64;
  std::int64_t validation_draws = 1;  // timestep / noise draws per held-out row per evaluation
  double validation_split = 0.0;
  std::string validation_data;
  // Validation renders: validation.prompts generated with the trained weights every
  // validation.sample_every optimizer steps (0: never), at the start and at the end.
  std::vector<std::string> validation_prompts;
  std::int64_t sample_every = 0;
  std::int64_t sample_steps = 8;
  std::int64_t sample_seed = 0;
  double sample_guidance = 3.5;
  std::int64_t sample_height = 0;  // 0: data.height
  std::int64_t sample_width = 0;   // 0: data.width
  // model.max_sequence_length: the renders encode prompts to the length training uses (0: the
  // family's default, which training uses too).
  std::int64_t sample_max_sequence_length = 0;
  bool tensorboard = true;
  std::string tuning = "lora";
  std::string precision = "auto";
  std::string device = "auto";
  int threads = 0;
};

// The loss names `diffusion.loss` accepts.
const std::vector<std::string>& accepted_losses();
// Throws yeto::UsageError naming the key, the value and every accepted name unless `name` is one.
void check_loss_name(const std::string& name, const std::string& where = "diffusion.loss");

// Reads every learner key of `cfg`; throws yeto::UsageError for a bad combination.
Settings read_settings(const config::Config& cfg);

TimestepSampling parse_timestep_sampling(const std::string& name);
LossWeighting parse_loss_weighting(const std::string& name);
LrSchedule parse_lr_schedule(const std::string& name);
const char* loss_weighting_name(LossWeighting w);

// Learning rate of optimizer step `step` (1-based): linear warm-up lr * step / warmup_steps
// (so the first step already moves), then constant, or a linear / half-cosine decay that
// starts at lr on the first step after warm-up and would reach 0 one step after total_steps.
double learning_rate_at(const OptimizerSettings& o, std::int64_t step);

}  // namespace yeto::learner
