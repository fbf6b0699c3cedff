#include "nava_train.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

namespace yeto::nava {

TrainSchedule training_schedule(std::int64_t steps, double shift, std::int64_t num_train_timesteps) {
  const double sigma_min = 0.003 / 1.002, sigma_max = 1.0;
  const double start = sigma_min + (sigma_max - sigma_min) * 1.0;
  auto s = at::linspace(start, sigma_min, steps + 1, at::kFloat).narrow(0, 0, steps);
  TrainSchedule out;
  out.sigmas = shift * s / (1 + (shift - 1) * s);
  out.timesteps = out.sigmas * static_cast<double>(num_train_timesteps);
  const double n = static_cast<double>(steps);
  const auto y = at::exp(-2 * ((out.timesteps - n / 2) / n).pow(2));
  const auto shifted = y - y.min();
  out.weights = shifted * (n / shifted.sum());
  return out;
}

Draws draw_step(at::Generator& gen, StepBatch& batch, std::int64_t steps) {
  const auto b = static_cast<std::int64_t>(std::max(batch.video.size(), batch.audio.size()));
  Draws d;
  d.masking = at::rand({1}, gen, at::kFloat).item<double>();
  d.i2v = at::rand({1}, gen, at::kFloat).item<double>();
  d.timestep_id = at::randint(0, steps, {b}, gen, at::kLong);
  d.dropout = at::rand({b}, gen, at::kFloat);
  batch.audio_noise.clear();
  batch.video_noise.clear();
  for (const auto& a : batch.audio) batch.audio_noise.push_back(at::randn(a.sizes(), gen, a.options().dtype(at::kFloat)));
  for (const auto& v : batch.video) batch.video_noise.push_back(at::randn(v.sizes(), gen, v.options().dtype(at::kFloat)));
  batch.timestep_id = d.timestep_id;
  return d;
}

StepResult train_step(WanAVModel& model, const TrainSchedule& schedule, const StepBatch& batch, const LossWeights& w,
                      std::int64_t patch) {
  const bool has_v = !batch.video.empty(), has_a = !batch.audio.empty();
  const auto b = static_cast<std::int64_t>(has_v ? batch.video.size() : batch.audio.size());
  if ((has_v && batch.video_noise.size() != batch.video.size()) ||
      (has_a && batch.audio_noise.size() != batch.audio.size()))
    throw std::invalid_argument("NAVA train step: one noise per latent is needed");
  if (!batch.timestep_id.defined() || batch.timestep_id.numel() != b)
    throw std::invalid_argument("NAVA train step: one timestep id per sample is needed");
  if (static_cast<std::int64_t>(batch.text.size()) != b)
    throw std::invalid_argument("NAVA train step: one text embedding per sample is needed");
  StepResult r;
  const auto ids = batch.timestep_id.to(at::kLong).cpu();
  r.timesteps = schedule.timesteps.index_select(0, ids);
  // add_noise_batch / training_weight: the schedule entry nearest each timestep.
  const auto nearest = (schedule.timesteps.unsqueeze(0) - r.timesteps.unsqueeze(1)).abs().argmin(1);
  r.sigma = schedule.sigmas.index_select(0, nearest);
  r.weight = schedule.weights.index_select(0, nearest);

  Inputs in;
  in.t = r.timesteps;
  in.video_context = batch.text;
  in.audio_context = batch.text;
  in.speaker = batch.speaker;
  in.speaker_positions = batch.speaker_positions;
  in.masking_modality = batch.masking_modality;
  in.first_frame_is_clean = batch.i2v && has_v;
  const auto dev = model->device();
  for (std::int64_t i = 0; i < b; ++i) {
    const auto sigma = r.sigma[i].item<double>();
    if (has_v) {
      const auto z0 = batch.video[static_cast<std::size_t>(i)].to(dev, at::kFloat);
      const auto noise = batch.video_noise[static_cast<std::size_t>(i)].to(dev, at::kFloat);
      if (z0.dim() != 4 || noise.sizes() != z0.sizes())
        throw std::invalid_argument("NAVA train step: video latents " + std::to_string(i) +
                                    " must be [F, H, W, C] with a noise of the same shape");
      auto xt = (1 - sigma) * z0 + sigma * noise;
      if (batch.i2v) xt = at::cat({z0.narrow(0, 0, 1), xt.narrow(0, 1, xt.size(0) - 1)});
      r.video_input.push_back(xt);
      r.video_target.push_back(noise - z0);
      const auto h = z0.size(1), wd = z0.size(2);
      const auto pad_h = (patch - h % patch) % patch, pad_w = (patch - wd % patch) % patch;
      in.video.push_back(at::constant_pad_nd(xt.permute({3, 0, 1, 2}), {0, pad_w, 0, pad_h}));
    }
    if (has_a) {
      const auto z0 = batch.audio[static_cast<std::size_t>(i)].to(dev, at::kFloat);
      const auto noise = batch.audio_noise[static_cast<std::size_t>(i)].to(dev, at::kFloat);
      if (z0.dim() != 2 || noise.sizes() != z0.sizes())
        throw std::invalid_argument("NAVA train step: audio latents " + std::to_string(i) +
                                    " must be [L, C] with a noise of the same shape");
      const auto xt = (1 - sigma) * z0 + sigma * noise;
      r.audio_input.push_back(xt);
      r.audio_target.push_back(noise - z0);
      in.audio.push_back(xt);
    }
  }
  auto out = model->forward(in);
  r.pred_video = out.video;
  r.pred_audio = out.audio;

  const auto weight = r.weight.to(dev);
  const auto zero = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(dev));
  at::Tensor sum_v = zero, sum_v_raw = zero, sum_a = zero, sum_a_raw = zero;
  for (std::int64_t i = 0; i < b; ++i) {
    const auto wi = w.reweight ? weight[i] : at::ones({}, weight.options());
    if (has_v) {
      const auto& target = r.video_target[static_cast<std::size_t>(i)];
      const auto pred = r.pred_video[static_cast<std::size_t>(i)]
                            .narrow(2, 0, target.size(1))
                            .narrow(3, 0, target.size(2))
                            .to(at::kFloat);
      const auto mse = (pred - target.permute({3, 0, 1, 2})).pow(2).mean();
      sum_v_raw = sum_v_raw + mse;
      sum_v = sum_v + mse * wi * w.vision;
    }
    if (has_a) {
      const auto mse = (r.pred_audio[static_cast<std::size_t>(i)].to(at::kFloat) -
                        r.audio_target[static_cast<std::size_t>(i)])
                           .pow(2)
                           .mean();
      sum_a_raw = sum_a_raw + mse;
      sum_a = sum_a + mse * wi * w.audio;
    }
  }
  const double bd = static_cast<double>(b);
  at::Tensor total = zero;
  const auto loss_audio = has_a ? sum_a / bd * w.lambda_ddpm : zero;
  const auto loss_video = has_v ? sum_v / bd * w.lambda_ddpm : zero;
  if (has_a) total = total + loss_audio;
  if (has_v) total = total + loss_video * w.vision;
  r.loss = total;
  auto& l = r.losses;
  l["ddpm_audio"] = loss_audio.detach().clone();
  l["ddpm_audio_noreweight"] = (has_a ? sum_a_raw / bd : zero).detach().clone();
  l["ddpm_image"] = zero.detach().clone();
  l["ddpm_image_noreweight"] = zero.detach().clone();
  l["ddpm_vid"] = loss_video.detach().clone();
  l["ddpm_vid_noreweight"] = (has_v ? sum_v_raw / bd : zero).detach().clone();
  l["ddpm"] = l["ddpm_vid"] + l["ddpm_audio"] + l["ddpm_image"];
  l["ddpm_noreweight"] = l["ddpm_vid_noreweight"] + l["ddpm_audio_noreweight"] + l["ddpm_image_noreweight"];
  return r;
}

}  // namespace yeto::nava
