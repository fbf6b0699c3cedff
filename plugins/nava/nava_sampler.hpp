// NAVA's sampler: Wan 2.2's flow UniPC (FlowUniPCMultistepScheduler: bh2, order 2, predict_x0,
// lower-order final, final sigma 0) for each modality, and AudioVideoPipeline.sample's guidance
// over four model calls per step (cond, uncond with the negative prompts, masking_modality cond,
// cond without the speaker), on token-major packed latents.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "nava_model.hpp"

namespace yeto::nava {

// Wan 2.2's FlowUniPCMultistepScheduler(num_train_timesteps, shift, use_dynamic_shifting=False).
// The constructor's table: s = 1 - linspace(1, 1/T, T)[::-1] (float64, then float32), shifted
// shift s / (1 + (shift - 1) s) in float32; set_timesteps(n): linspace(sigma_max, sigma_min,
// n + 1)[:-1] in float64, shifted again, a final sigma 0 appended (float32); timesteps the
// float64 sigmas x T truncated to int64. The per-step scalars are float32, as upstream's 0-d
// tensors.
class FlowUniPC {
 public:
  explicit FlowUniPC(double shift = 5.0, std::int64_t num_train_timesteps = 1000);
  const at::Tensor& init_sigmas() const { return init_sigmas_; }  // [T] float32
  void set_timesteps(std::int64_t steps);
  const at::Tensor& timesteps() const { return timesteps_; }  // [n] int64
  const at::Tensor& sigmas() const { return sigmas_; }        // [n + 1] float32
  std::int64_t step_index() const { return step_index_; }
  // The x0 prediction of a flow output at the current step: sample - sigma * output.
  at::Tensor x0(const at::Tensor& model_output, const at::Tensor& sample) const;
  // One step (corrector from the second step on, then the predictor); advances the step index.
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& sample);

 private:
  at::Tensor sigma(std::int64_t i) const { return sigmas_[i]; }
  at::Tensor predictor(const at::Tensor& sample, std::int64_t order) const;
  at::Tensor corrector(const at::Tensor& this_x0, const at::Tensor& last_sample, std::int64_t order) const;
  double shift_;
  std::int64_t train_steps_;
  at::Tensor init_sigmas_, sigmas_, timesteps_;
  double sigma_max_ = 1.0, sigma_min_ = 0.0;
  std::vector<at::Tensor> outputs_;  // the last two x0 predictions, oldest first
  at::Tensor last_sample_;
  std::int64_t step_index_ = 0, lower_order_nums_ = 0, this_order_ = 1;
};

// What one sampling run conditions on: one sample (NAVA's batch of 1), text embeddings for the
// caption and the two negative prompts, an optional speaker [n, 192] with its caption rows.
struct SampleRequest {
  std::vector<std::int64_t> video_grid;  // latent (t, h, w)
  std::int64_t audio_len = 0;
  at::Tensor text, negative_video, negative_audio;  // [L, text_dim]
  at::Tensor speaker;                               // [n, 192] or undefined
  std::vector<std::int64_t> speaker_positions;
  std::int64_t steps = 50;
  double video_guidance = 3.0, video_align_guidance = 3.0;  // configs/nava.yaml
  double audio_guidance = 2.0, audio_align_guidance = 2.0, timbre_guidance = 3.0;
  double shift = 5.0;
  std::int64_t patch = 2;
};

using SampleTrace = std::function<void(const std::string&, const at::Tensor&)>;

// AudioVideoPipeline.sample from initial packed latents (video [t h w, C_v], audio [L, C_a]):
// per step the four branches, the align-3d guidance (video c + s_v (c - u) + s_va (c - m); audio
// c + s_a (c - u) + s_aa (c - m) + s_t (c - timbre) when a speaker is given, else c + s_a (c - u)
// + s_aa (c - m)), the x0 prediction and each modality's UniPC step. Returns the final packed
// latents {video, audio}; `trace` (when set) gets step.<i>.* as the recorded case names them.
std::pair<at::Tensor, at::Tensor> sample(WanAVModel& model, const SampleRequest& r, at::Tensor video,
                                         at::Tensor audio, const SampleTrace& trace = nullptr);

}  // namespace yeto::nava
