#include "learner/adamw.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <map>

#include "core/error.hpp"

namespace yeto::learner {

AdamW::AdamW(NamedParams params, const OptimizerSettings& settings) : params_(std::move(params)), s_(settings) {
  for (const auto& [name, p] : params_) {
    if (p.scalar_type() != at::kFloat)
      throw Error("trainable tensor '" + name + "' is " + std::string(c10::toString(p.scalar_type())) +
                  "; the learner keeps float32 masters, the plugin must return float32 trainable tensors");
    exp_avg_.push_back(at::zeros(p.sizes(), p.options()));
    exp_avg_sq_.push_back(at::zeros(p.sizes(), p.options()));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1.0 - std::pow(s_.beta1, static_cast<double>(step_));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(s_.beta2, static_cast<double>(step_)));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    const auto& g = p.grad();
    if (!g.defined()) continue;
    p.mul_(1.0 - lr * s_.weight_decay);
    exp_avg_[i].lerp_(g, 1.0 - s_.beta1);
    exp_avg_sq_[i].mul_(s_.beta2).addcmul_(g, g, 1.0 - s_.beta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / bc2_sqrt).add_(s_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

void AdamW::zero_grad() {
  for (auto& [name, p] : params_) {
    (void)name;
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

NamedParams AdamW::state() const {
  NamedParams out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::int64_t steps,
                       const std::string& label) {
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  at::NoGradGuard no_grad;
  auto take = [&](const std::string& name, at::Tensor& into) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error(label + ": optimizer state has no tensor '" + name +
                      "'; the checkpoint belongs to a different set of trainable tensors",
                  ExitCode::bad_input);
    if (it->second.sizes() != into.sizes())
      throw Error(label + ": optimizer tensor '" + name + "' is " + c10::str(it->second.sizes()) + ", expected " +
                      c10::str(into.sizes()),
                  ExitCode::bad_input);
    into.copy_(it->second);
  };
  for (std::size_t i = 0; i < params_.size(); ++i) {
    take("exp_avg." + params_[i].first, exp_avg_[i]);
    take("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  step_ = steps;
}

double clip_grad_norm(const NamedParams& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& [name, p] : params) {
    (void)name;
    if (p.grad().defined()) norms.push_back(p.grad().detach().to(at::kFloat).norm(2));
  }
  if (norms.empty()) return 0.0;
  const auto total = at::stack(norms).norm(2);
  const double norm = total.item<double>();
  if (max_norm > 0.0) {
    const auto coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    for (const auto& [name, p] : params) {
      (void)name;
      if (p.grad().defined()) p.grad().mul_(coef.to(p.grad().device()));
    }
  }
  return norm;
}

}  // namespace yeto::learner
