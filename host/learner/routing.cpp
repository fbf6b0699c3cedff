#include "learner/routing.hpp"

#include <ATen/ATen.h>

#include "core/error.hpp"

namespace yeto::learner {

std::vector<Route> route_by_boundary(const at::Tensor& timesteps, const std::vector<std::string>& denoisers,
                                     std::optional<double> boundary) {
  if (denoisers.empty()) throw Error("the pipeline has no denoiser to train");
  const auto all = at::arange(timesteps.size(0), at::kLong);
  if (denoisers.size() == 1 || !boundary) return {{denoisers[0], all}};
  if (denoisers.size() > 2)
    throw Error("routing by timestep boundary supports two denoisers, the pipeline has " +
                std::to_string(denoisers.size()));
  const auto high = timesteps.to(at::kDouble).ge(*boundary);
  std::vector<Route> out;
  const auto hi_rows = all.masked_select(high);
  const auto lo_rows = all.masked_select(high.logical_not());
  if (hi_rows.numel() > 0) out.push_back({denoisers[0], hi_rows});
  if (lo_rows.numel() > 0) out.push_back({denoisers[1], lo_rows});
  return out;
}

at::Tensor predict_routed(const std::vector<Route>& routes, std::int64_t batch_size,
                          const std::function<at::Tensor(const std::string&, const at::Tensor&)>& predict) {
  if (routes.size() == 1 && routes[0].rows.numel() == batch_size) return predict(routes[0].denoiser, routes[0].rows);
  at::Tensor out;
  for (const auto& r : routes) {
    auto part = predict(r.denoiser, r.rows);
    if (!out.defined()) {
      auto sizes = part.sizes().vec();
      sizes[0] = batch_size;
      out = at::zeros(sizes, part.options());
    }
    out = out.index_copy(0, r.rows.to(part.device()), part);
  }
  return out;
}

}  // namespace yeto::learner
