// Hunyuan3D-2.1 shape sampling: hy3dshape's FlowMatchEulerDiscreteScheduler (the reversed-time
// variant: sigma runs from 0 = noise to 1 = data) with the pipeline's schedule and
// classifier-free guidance, and the Hunyuan3DDiTFlowMatchingPipeline denoising loop.
//
//   - construction: timesteps = 1 .. num_train_timesteps (float32), sigmas = timesteps / N,
//     shifted by shift * s / (1 + (shift - 1) s);
//   - the pipeline's schedule for n steps: sigmas = linspace(0, 1, n) (float32, shifted),
//     timesteps = sigmas * N, then sigmas gets a trailing 1.0, so the last step (sigma 1 -> 1)
//     has dt = 0; the model receives timestep / N;
//   - each step: the model runs on [latents; latents] with [cond; uncond] image tokens (the
//     conditional half first), guided = uncond + guidance (cond - uncond), and
//     latents += (sigma_next - sigma) * guided.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>

#include "yeto/family/family.hpp"

namespace yeto::hunyuan3d {

struct FlowSchedule {
  at::Tensor timesteps;  // float32 [n]
  at::Tensor sigmas;     // float32 [n] (construction) or [n + 1] (set_timesteps)
};

struct SchedulerConfig {
  std::int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  // Reads scheduler_config.json (num_train_timesteps, shift; use_dynamic_shifting must be false).
  // Throws std::invalid_argument naming the key.
  static SchedulerConfig from_json(const nlohmann::json& j);
};

// The tables after construction.
FlowSchedule training_tables(const SchedulerConfig& c);
// The schedule the pipeline sets for `steps` inference steps (steps >= 1).
FlowSchedule sampling_schedule(const SchedulerConfig& c, std::int64_t steps);

// The pipeline's guidance over a model output whose batch is [cond; uncond].
at::Tensor guide(const at::Tensor& model_output, double guidance);
// One Euler step: sample + (sigma_next - sigma) * velocity, computed in float32 and returned in
// sample's dtype.
at::Tensor euler_step(const at::Tensor& sample, const at::Tensor& velocity, double sigma, double sigma_next);

// The denoiser as the loop calls it: (x [2B, N, C], t [2B] in [0, 1], context [2B, M, D]) -> velocity.
using VelocityModel = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

// The pipeline's loop from `latents` [B, N, C] with image tokens `cond` [B, M, D] and `uncond`
// (the unconditional tokens, zeros for the DINO conditioner). Records, per step i,
// "<prefix>model_input.<i>", "model_timestep.<i>", "model_output.<i>", "guided.<i>", "latents.<i>"
// and finally "<prefix>final_latents". Without gradients.
at::Tensor denoise(const VelocityModel& model, at::Tensor latents, const at::Tensor& cond, const at::Tensor& uncond,
                   const FlowSchedule& schedule, const SchedulerConfig& config, double guidance, family::Trace& record,
                   const std::string& prefix = "");

}  // namespace yeto::hunyuan3d
