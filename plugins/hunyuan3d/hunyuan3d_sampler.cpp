#include "hunyuan3d_sampler.hpp"

#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::hunyuan3d {

SchedulerConfig SchedulerConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, "hy3dshape FlowMatchEulerDiscreteScheduler config");
  SchedulerConfig c;
  c.num_train_timesteps = in.integer("num_train_timesteps", c.num_train_timesteps);
  c.shift = in.number("shift", c.shift);
  if (c.num_train_timesteps <= 0) in.fail("num_train_timesteps", "must be positive");
  if (!(c.shift > 0.0)) in.fail("shift", "must be positive");
  if (in.boolean("use_dynamic_shifting", false))
    in.fail("use_dynamic_shifting", "is true; the Hunyuan3D-2.1 pipeline samples without dynamic shifting");
  return c;
}

namespace {

at::Tensor shifted(const at::Tensor& s, double shift) {
  if (shift == 1.0) return s;
  return shift * s / (1 + (shift - 1) * s);
}

}  // namespace

FlowSchedule training_tables(const SchedulerConfig& c) {
  const auto n = c.num_train_timesteps;
  const auto t = at::linspace(1, static_cast<double>(n), n, at::kFloat);
  const auto sigmas = shifted(t / static_cast<double>(n), c.shift);
  return {sigmas * static_cast<double>(n), sigmas};
}

FlowSchedule sampling_schedule(const SchedulerConfig& c, std::int64_t steps) {
  if (steps < 1) throw std::invalid_argument("steps must be at least 1, got " + std::to_string(steps));
  // np.linspace(0, 1, steps) in float64, then float32 as the scheduler stores it.
  const auto s = shifted(at::linspace(0.0, 1.0, steps, at::kDouble).to(at::kFloat), c.shift);
  return {s * static_cast<double>(c.num_train_timesteps), at::cat({s, at::ones({1}, at::kFloat)})};
}

at::Tensor guide(const at::Tensor& model_output, double guidance) {
  const auto halves = model_output.chunk(2, 0);
  return halves[1] + guidance * (halves[0] - halves[1]);
}

at::Tensor euler_step(const at::Tensor& sample, const at::Tensor& velocity, double sigma, double sigma_next) {
  return (sample.to(at::kFloat) + (sigma_next - sigma) * velocity.to(at::kFloat)).to(sample.scalar_type());
}

at::Tensor denoise(const VelocityModel& model, at::Tensor latents, const at::Tensor& cond, const at::Tensor& uncond,
                   const FlowSchedule& schedule, const SchedulerConfig& config, double guidance, family::Trace& record,
                   const std::string& prefix) {
  at::NoGradGuard no_grad;
  const auto context = at::cat({cond, uncond}, 0);
  const auto steps = schedule.timesteps.size(0);
  for (std::int64_t i = 0; i < steps; ++i) {
    const auto si = std::to_string(i);
    const auto input = at::cat({latents, latents}, 0);
    const auto t = schedule.timesteps[i].expand({input.size(0)}).to(latents.scalar_type()) /
                   static_cast<double>(config.num_train_timesteps);
    record(prefix + "model_input." + si, input);
    record(prefix + "model_timestep." + si, t);
    const auto out = model(input, t, context);
    record(prefix + "model_output." + si, out);
    const auto guided = guide(out, guidance);
    record(prefix + "guided." + si, guided);
    latents = euler_step(latents, guided, schedule.sigmas[i].item<double>(), schedule.sigmas[i + 1].item<double>());
    record(prefix + "latents." + si, latents);
  }
  record(prefix + "final_latents", latents);
  return latents;
}

}  // namespace yeto::hunyuan3d
