// Shared pieces of the DDPM-family schedules, computed the way Diffusers computes them
// (float32 LibTorch for beta/alpha tables, float64 NumPy-style arithmetic for spacing), so the
// integer timestep tables match exactly and the float tables to the last bit or two.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_config.hpp"

namespace yeto::schedulers::detail {

// numpy.linspace(start, stop, num) in float64 (start + i * step, last entry exactly stop).
std::vector<double> np_linspace(double start, double stop, std::int64_t num);
// numpy.round: round half to even.
double np_round(double x);

// Betas per `beta_schedule` (linear, scaled_linear, squaredcos_cap_v2) or `trained_betas`, with
// `rescale_betas_zero_snr` applied; float32 [num_train_timesteps].
at::Tensor make_betas(const ConfigView& cfg, std::int64_t num_train_timesteps);
// Cumulative product of 1 - betas (float32), with the zero-terminal-SNR tweak when asked.
at::Tensor make_alphas_cumprod(const at::Tensor& betas, bool rescale_zero_snr);

// Parses `prediction_type` (epsilon, v_prediction, sample, flow_prediction where allowed).
Prediction parse_prediction(const ConfigView& cfg, bool allow_flow);

// Position of `timestep` in `schedule` as Diffusers' index_for_timestep does it: the second
// match when there are several, the only match otherwise; `missing` when there is none
// (-1: throw a yeto::Error naming the timestep).
std::int64_t index_for_timestep(const at::Tensor& schedule, const at::Tensor& timestep, std::int64_t missing = -1);

// Reshapes a [B] per-sample factor so it broadcasts over a tensor of `ndim` dims.
at::Tensor per_sample(const at::Tensor& v, std::int64_t ndim);

// The VP forward-process training batch shared by DDPM, DPM-Solver and UniPC (non-flow):
// alpha_t = sqrt(alphas_cumprod[t]), sigma_t = sqrt(1 - alphas_cumprod[t]), t = index.
TrainingBatch vp_training_batch(const at::Tensor& alphas_cumprod, Prediction prediction, const at::Tensor& x0,
                                const at::Tensor& noise, const at::Tensor& indices);
// The flow-matching training batch: x_t = (1 - sigma) x0 + sigma noise, target noise - x0.
TrainingBatch flow_training_batch(const at::Tensor& train_sigmas, const at::Tensor& train_timesteps,
                                  const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices);

void check_indices(const at::Tensor& indices, std::int64_t n, const std::string& who);

}  // namespace yeto::schedulers::detail
