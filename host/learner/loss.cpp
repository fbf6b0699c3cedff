#include "learner/loss.hpp"

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "learner/routing.hpp"
#include "learner/timesteps.hpp"

namespace yeto::learner {

at::Tensor loss_weights(LossWeighting weighting, double min_snr_gamma, const schedulers::TrainingBatch& batch) {
  const auto sigma = batch.sigma_t.to(at::kFloat);
  const auto snr = batch.snr.to(at::kFloat);
  switch (weighting) {
    case LossWeighting::none:
      return at::ones_like(sigma);
    case LossWeighting::linear:
      return sigma.clone();
    case LossWeighting::sigma:
      return 1.0 / (sigma * sigma);
    case LossWeighting::snr:
      return snr.clone();
    case LossWeighting::min_snr: {
      const auto clipped = at::clamp_max(snr, min_snr_gamma);
      switch (batch.prediction) {
        case schedulers::Prediction::epsilon: return clipped / snr;
        case schedulers::Prediction::v_prediction: return clipped / (snr + 1.0);
        case schedulers::Prediction::sample: return clipped;
        case schedulers::Prediction::flow: return clipped * sigma * sigma;
      }
      break;
    }
  }
  throw Error("loss weighting: unhandled prediction type " + schedulers::prediction_name(batch.prediction));
}

at::Tensor per_sample_mse(const at::Tensor& prediction, const at::Tensor& target) {
  if (prediction.sizes() != target.sizes())
    throw Error("loss: prediction " + c10::str(prediction.sizes()) + " and target " + c10::str(target.sizes()) +
                " differ in shape after the plugin's align(); the family plugin must return matching layouts");
  const auto diff = prediction.to(at::kFloat) - target.to(at::kFloat);
  return (diff * diff).reshape({diff.size(0), -1}).mean(1);
}

at::Tensor weighted_loss(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& weights) {
  return (per_sample_mse(prediction, target) * weights.to(prediction.device(), at::kFloat)).mean();
}

at::Tensor diffusion_loss(TrainModel& model, const Settings& s, const at::Tensor& latents, const NamedTensors& cond,
                          at::Generator& gen) {
  const auto& sched = model.scheduler();
  const std::int64_t b = latents.size(0);
  const auto indices = sample_indices(s.density, sched, b, gen);
  const auto noise = at::randn(latents.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
  const auto tb = sched.training_batch(latents, noise, indices);

  NamedTensors full = {{"noisy", tb.noisy}, {"timesteps", tb.timesteps}, {"sigmas", tb.sigma_t}};
  for (const auto& c : cond) full.push_back(c);
  const auto routes = route_by_boundary(tb.timesteps, model.denoisers(), model.boundary_timestep());
  const auto pred = predict_routed(routes, b, [&](const std::string& denoiser, const at::Tensor& rows) {
    NamedTensors sub;
    const bool all = rows.numel() == b;
    for (const auto& [name, t] : full) {
      const bool batched = t.dim() > 0 && t.size(0) == b;
      sub.emplace_back(name, all || !batched ? t : t.index_select(0, rows.to(t.device())));
    }
    NamedTensors inputs;
    for (const auto& [name, t] : sub) {
      if (name == "noisy") inputs.emplace_back("hidden_states", t);
      else if (name != "sigmas") inputs.emplace_back(name, t);
    }
    for (auto& kw : model.denoiser_kwargs(sub, denoiser)) inputs.push_back(std::move(kw));
    return model.denoise(inputs, denoiser);
  });
  const auto [p, t] = model.align(pred, tb.target, model.denoisers().front());
  return weighted_loss(p, t.detach(), loss_weights(s.weighting, s.min_snr_gamma, tb));
}

}  // namespace yeto::learner
