// The sampling half of the family kit: the denoising loop every Diffusers-style pipeline runs
// (schedule from the host scheduler, optional classifier-free guidance on a doubled batch, one
// scheduler step per timestep), the seeded initial noise and the VAE decode to images. A family
// supplies the model call (its packing, ids and conditioning) and, when its output is more than
// what the scheduler steps on, a selection (e.g. the noise half of a learned-sigma output).
// Every intermediate goes to the generate trace under the names the parity fixtures use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "yeto/family/family.hpp"

namespace yeto::family {

// The host scheduler component after set_timesteps(options): its timesteps, and its sigmas
// (undefined for a scheduler that has none).
struct Schedule {
  at::Tensor timesteps;
  at::Tensor sigmas;
};
// The image size of a generation: the request's height and width, or `native` for an unset (0)
// one; both must be multiples of `multiple` (the VAE scale factor x the patch size), else it
// fails "generate: height and width must be multiples of <m> (VAE scale factor x patch size), got HxW".
std::pair<std::int64_t, std::int64_t> generation_size(std::int64_t height, std::int64_t width, std::int64_t native,
                                                      std::int64_t multiple);

// set_timesteps(request) on the host scheduler service `scheduler` ({N steps} or {sigmas, mu});
// the tensors are recorded as "timesteps" and "sigmas".
Schedule set_timesteps(const sdk::TimestepRequest& request, Trace& record, const std::string& scheduler = "scheduler");

struct SamplingHooks {
  // The denoiser on one model batch: `model_input` is the latents (twice, [uncond; cond], with
  // guidance), `timestep` the step's timestep expanded to that batch in the scheduler's dtype,
  // `step` the loop index (a trace prefix "step.<i>." for the hook's own records).
  std::function<at::Tensor(const at::Tensor& model_input, const at::Tensor& timestep, std::int64_t step)> model;
  // What the scheduler steps on, from the (guided) model output; the output itself when unset.
  std::function<at::Tensor(const at::Tensor& output)> select;
  // Called after each prediction with the step, the latents it was made from and what the
  // scheduler steps on (e.g. to trace the family's x0 prediction); optional.
  std::function<void(std::int64_t step, const at::Tensor& latents, const at::Tensor& noise_pred)> observe;
  // > 1: classifier-free guidance, uncond + guidance * (cond - uncond) on the whole output.
  double guidance = 1.0;
  std::string scheduler = "scheduler";
};

// Runs the loop from `latents` over the schedule and returns the final latents (float32). Records
// per step "step.<i>.latents", ".timestep", with guidance ".noise_pred_uncond", ".noise_pred_text",
// ".noise_pred_guided", then ".noise_pred" (what the scheduler steps on) and, when the schedule
// has sigmas, ".sigma" / ".sigma_next"; then "final_latents". A missing model hook fails
// YETO_ERR_INVALID_ARGUMENT; a model output whose batch is not the model batch fails naming both.
at::Tensor denoise_loop(at::Tensor latents, const Schedule& schedule, const SamplingHooks& hooks, Trace& record);

// The initial latents of a generate call: the request's input tensor "latents" (float32, refused
// unless it has exactly `shape`: "generate: input 'latents' must be [...], got [...]"), otherwise
// noise from a CPU generator seeded with `seed`, as torch.Generator("cpu").manual_seed(seed) and
// torch.randn draw it. Recorded as "initial_latents".
at::Tensor initial_latents(const NamedTensors& inputs, at::IntArrayRef shape, std::uint64_t seed, Trace& record);

// Latents -> images through the host VAE: decode(latents / scaling_factor + shift_factor), then
// (x / 2 + 0.5) clamped to [0, 1], float32 [B, 3, H, W] (the "images" output of generate).
// Records "vae_input", "image" and "image_postprocessed".
at::Tensor decode_images(const at::Tensor& latents, double scaling_factor, double shift_factor, Trace& record,
                         const std::string& vae = "vae");

}  // namespace yeto::family
