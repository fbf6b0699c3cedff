// The flow-matching objective in its general form: an element-normalised squared error
// between the aligned prediction and the scheduler's target (velocity, noise, sample or v),
// weighted per sample. Include only where LibTorch is already in use.
//
// Weightings (per sample, from the scheduler's alpha_t / sigma_t / snr of that sample):
//   none     w = 1
//   linear   w = sigma_t                (grows linearly with the noise level)
//   sigma    w = 1 / sigma_t^2          (Diffusers' SD3 "sigma_sqrt" weighting)
//   snr      w = snr = (alpha_t / sigma_t)^2
//   min-snr  Min-SNR-gamma (Hang et al. 2023): the x0-space weight min(snr, gamma) carried
//            over to the target's space: epsilon  min(snr, gamma) / snr,
//            v-prediction  min(snr, gamma) / (snr + 1), sample  min(snr, gamma),
//            flow velocity  min(snr, gamma) * sigma_t^2  (x0 error = sigma_t * velocity error).
#pragma once

#include <ATen/core/Tensor.h>

#include <ATen/core/Generator.h>

#include "learner/model.hpp"
#include "learner/settings.hpp"
#include "schedulers/scheduler.hpp"

namespace yeto::learner {

// [B] float32 weights for the samples of `batch`.
at::Tensor loss_weights(LossWeighting weighting, double min_snr_gamma, const schedulers::TrainingBatch& batch);

// [B] float32: mean squared error over every element of each sample (dimension 0 is the batch).
at::Tensor per_sample_mse(const at::Tensor& prediction, const at::Tensor& target);

// Scalar float32: mean over the batch of weights * per_sample_mse.
at::Tensor weighted_loss(const at::Tensor& prediction, const at::Tensor& target, const at::Tensor& weights);

// The diffusion loss of one micro batch, as the learner's step computes it: timestep indices
// from `s.density` and float32 noise drawn from `gen`, the scheduler's training batch, the
// rows routed to their denoiser (denoiser_kwargs, then denoise), align, and weighted_loss with
// `s.weighting`. latents: float32 [B, ...]; cond: the batch's conditioning (detached). A scalar
// with its autograd graph. The training-step benchmark times this same call.
at::Tensor diffusion_loss(TrainModel& model, const Settings& s, const at::Tensor& latents, const NamedTensors& cond,
                          at::Generator& gen);

}  // namespace yeto::learner
