#include "learner/loss.hpp"

#include <ATen/ATen.h>

#include "core/error.hpp"

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

}  // namespace yeto::learner
