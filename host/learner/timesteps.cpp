#include "learner/timesteps.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <numbers>

#include "schedulers/scheduler.hpp"

namespace yeto::learner {

at::Generator make_generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

at::Tensor sample_density(const TimestepDensity& density, std::int64_t n, at::Generator& gen) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  switch (density.kind) {
    case TimestepSampling::logit_normal:
      return at::sigmoid(at::normal(density.logit_mean, density.logit_std, {n}, gen, f32));
    case TimestepSampling::mode: {
      const auto v = at::rand({n}, gen, f32);
      const auto c = at::cos(v * (std::numbers::pi / 2.0));
      return 1.0 - v - density.mode_scale * (c * c - 1.0 + v);
    }
    case TimestepSampling::uniform:
      break;
  }
  return at::rand({n}, gen, f32);
}

at::Tensor sample_indices(const TimestepDensity& density, const schedulers::Scheduler& scheduler, std::int64_t n,
                          at::Generator& gen) {
  return scheduler.indices_from_uniform(sample_density(density, n, gen));
}

}  // namespace yeto::learner
