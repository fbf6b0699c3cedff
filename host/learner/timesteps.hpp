// Training timesteps: a density over u in [0, 1) (Diffusers' compute_density_for_timestep_sampling:
// uniform, logit-normal with mean/std, or SD3's mode sampling with mode_scale), mapped to
// positions of the scheduler's training schedule, whose sigmas already carry its shift.
// Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "learner/settings.hpp"

namespace yeto::schedulers {
class Scheduler;
}

namespace yeto::learner {

// A CPU generator seeded with `seed` (what every learner stream draws from).
at::Generator make_generator(std::uint64_t seed);

// [n] float32 samples of u, drawn from `gen`:
//   uniform:      u ~ U[0, 1)
//   logit-normal: u = sigmoid(z), z ~ N(logit_mean, logit_std)
//   mode:         u = 1 - v - mode_scale * (cos(pi v / 2)^2 - 1 + v), v ~ U[0, 1)
at::Tensor sample_density(const TimestepDensity& density, std::int64_t n, at::Generator& gen);

// [n] int64 positions in the scheduler's training schedule: floor(u * num_train_timesteps), clamped.
at::Tensor sample_indices(const TimestepDensity& density, const schedulers::Scheduler& scheduler, std::int64_t n,
                          at::Generator& gen);

}  // namespace yeto::learner
