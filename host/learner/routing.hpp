// Multi-denoiser pipelines (Wan 2.2 style): a high-noise and a low-noise expert share one
// schedule, split at a boundary timestep. Samples of a batch are routed to their expert and
// the predictions put back in batch order. Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace yeto::learner {

struct Route {
  std::string denoiser;
  at::Tensor rows;  // [k] int64 positions in the batch
};

// `denoisers` in canonical order (first = high-noise expert). With one denoiser, or no
// boundary, every row goes to the first. With two and a boundary timestep b (in the units of
// `timesteps`): rows with timestep >= b go to denoisers[0], the others to denoisers[1].
// Routes without rows are left out.
std::vector<Route> route_by_boundary(const at::Tensor& timesteps, const std::vector<std::string>& denoisers,
                                     std::optional<double> boundary);

// Runs `predict(denoiser, rows)` for each route (rows: the sub-batch positions) and scatters
// the predictions back into one tensor in batch order, keeping autograd.
at::Tensor predict_routed(const std::vector<Route>& routes, std::int64_t batch_size,
                          const std::function<at::Tensor(const std::string&, const at::Tensor&)>& predict);

}  // namespace yeto::learner
