// NAVA's training step (AudioVideoPipeline.forward + NAVA.forward with configs/nava.yaml): the
// flow-matching schedule with its timestep reweighting, x_t and velocity targets for both
// modalities at one shared timestep, the backbone call on patch-padded video latents, and the
// weighted loss (audio 0.2, vision 1; the vision weight enters twice, as NAVA computes it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "nava_model.hpp"

namespace yeto::nava {

// FlowMatchScheduler(num_train_timesteps, shift, extra_one_step=True).set_timesteps(n, training=True),
// float32: sigmas = shift s / (1 + (shift - 1) s), s = linspace(1, 0.003/1.002, n + 1)[:-1];
// timesteps = 1000 sigmas; linear_timesteps_weights = (y - min y) n / sum(y - min y),
// y = exp(-2 ((timesteps - n/2) / n)^2).
struct TrainSchedule {
  at::Tensor timesteps, sigmas, weights;  // [n] float32
};
TrainSchedule training_schedule(std::int64_t steps = 1000, double shift = 5.0, std::int64_t num_train_timesteps = 1000);

// The loss weights of NAVA.forward (configs/nava.yaml: audio 0.2, vision 1, lambda_ddpm 1,
// use_loss_reweight true).
struct LossWeights {
  double audio = 0.2;
  double vision = 1.0;
  double lambda_ddpm = 1.0;
  bool reweight = true;
};

// One micro batch: clean latents z0 (video channel-last [F, H, W, C_v], audio [L, C_a]; either
// list may be empty for a single-modality step), text [L_text, text_dim] per sample, the step's
// draws (timestep ids into the schedule [B] int64, one noise per latent), speakers.
struct StepBatch {
  std::vector<at::Tensor> video, audio, text;
  std::vector<at::Tensor> video_noise, audio_noise;
  at::Tensor timestep_id;
  at::Tensor speaker;  // [n, 192] or undefined
  std::vector<std::vector<std::int64_t>> speaker_positions;
  bool masking_modality = false;
  // NAVA's i2v mode: each video's first latent frame enters clean (x_t = z0 there) with timestep 0
  // on its tokens (first_frame_is_clean); the target stays noise - z0 on every frame.
  bool i2v = false;
};

struct StepResult {
  at::Tensor loss;                          // the total loss (scalar, differentiable)
  std::map<std::string, at::Tensor> losses; // NAVA's log names: ddpm_audio, ddpm_audio_noreweight, ...
  at::Tensor timesteps, sigma, weight;      // [B]
  std::vector<at::Tensor> video_input, audio_input, video_target, audio_target;  // x_t and targets
  std::vector<at::Tensor> pred_video, pred_audio;  // backbone outputs ([C_v, F, H_pad, W_pad], [L, C_a])
};

// The step's draws as AudioVideoPipeline.forward makes them from `gen`: rand(1) masking, rand(1)
// i2v, randint(0, steps, (B,)) timestep ids, rand(B) text dropout, randn per audio then per video
// sample. Returns the timestep ids and the uniform draws (masking u, i2v u, dropout [B]); the
// noises go into `batch` (shapes from its latents).
struct Draws {
  at::Tensor timestep_id, dropout;
  double masking = 0.0, i2v = 0.0;
};
Draws draw_step(at::Generator& gen, StepBatch& batch, std::int64_t steps = 1000);

// The step: x_t = (1 - sigma) z0 + sigma noise, target = noise - z0, the backbone on x_t (video
// permuted to [C, F, H, W] and zero-padded on the right in H and W to multiples of `patch`), the
// MSE of each sample (video predictions cropped to the clean H, W) weighted per sample.
StepResult train_step(WanAVModel& model, const TrainSchedule& schedule, const StepBatch& batch, const LossWeights& w,
                      std::int64_t patch = 2);

}  // namespace yeto::nava
