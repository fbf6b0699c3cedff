#include "island/collectives.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace yeto::island {

namespace {

at::Tensor flat_of(const std::vector<at::Tensor>& parts, const at::TensorOptions& options) {
  std::vector<at::Tensor> flat;
  flat.reserve(parts.size());
  for (const auto& p : parts) flat.push_back(p.detach().reshape({-1}).to(options));
  return flat.empty() ? at::empty({0}, options) : at::cat(flat);
}

void scatter_back(const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  std::int64_t off = 0;
  for (const auto& p : parts) {
    const auto n = p.numel();
    at::Tensor dst = p;
    dst.copy_(flat.narrow(0, off, n).view(p.sizes()));
    off += n;
  }
}

// `values` as one double tensor through `collective`, and back.
std::vector<double> through_tensor(std::vector<double> values, const std::function<void(at::Tensor&)>& collective) {
  at::Tensor t = at::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, at::kDouble).clone();
  collective(t);
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

}  // namespace

void average_gradients(Collectives& ranks, const std::vector<std::pair<std::string, at::Tensor>>& params) {
  if (params.empty() || ranks.world_size() < 2) return;
  at::NoGradGuard ng;
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& [name, p] : params) {
    at::Tensor g = p.grad();
    if (!g.defined()) {
      g = at::zeros_like(p);
      p.mutable_grad() = g;
    }
    grads.push_back(g);
  }
  at::Tensor flat = flat_of(grads, grads.front().options().dtype(at::kFloat));
  ranks.allreduce(flat, ReduceOp::sum);
  flat.div_(static_cast<double>(ranks.world_size()));
  scatter_back(flat, grads);
}

void broadcast_tensors(Collectives& ranks, const std::vector<std::pair<std::string, at::Tensor>>& params, int root) {
  if (params.empty() || ranks.world_size() < 2) return;
  at::NoGradGuard ng;
  std::vector<at::Tensor> parts;
  parts.reserve(params.size());
  for (const auto& [name, p] : params) parts.push_back(p);
  at::Tensor flat = flat_of(parts, parts.front().options().dtype(at::kFloat));
  ranks.broadcast(flat, root);
  scatter_back(flat, parts);
}

std::vector<double> allreduce_values(Collectives& ranks, std::vector<double> values, ReduceOp op) {
  if (values.empty() || ranks.world_size() < 2) return values;
  return through_tensor(std::move(values), [&](at::Tensor& t) { ranks.allreduce(t, op); });
}

std::vector<double> broadcast_values(Collectives& ranks, std::vector<double> values, int root) {
  if (values.empty() || ranks.world_size() < 2) return values;
  return through_tensor(std::move(values), [&](at::Tensor& t) { ranks.broadcast(t, root); });
}

double mean_of(Collectives& ranks, double value) {
  return allreduce_values(ranks, {value})[0] / static_cast<double>(ranks.world_size());
}

bool rank0_decides(Collectives& ranks, bool decision) {
  return broadcast_values(ranks, {decision ? 1.0 : 0.0})[0] > 0.5;
}

}  // namespace yeto::island
