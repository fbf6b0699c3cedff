#include "yeto/family/sampling.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace yeto::family {

using nlohmann::json;
using sdk::fail;

std::pair<std::int64_t, std::int64_t> generation_size(std::int64_t height, std::int64_t width, std::int64_t native,
                                                      std::int64_t multiple) {
  const auto h = height > 0 ? height : native, w = width > 0 ? width : native;
  if (multiple <= 0 || h % multiple != 0 || w % multiple != 0)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "generate: height and width must be multiples of " + std::to_string(multiple) +
                                             " (VAE scale factor x patch size), got " + std::to_string(h) + "x" +
                                             std::to_string(w));
  return {h, w};
}

Schedule set_timesteps(const sdk::TimestepRequest& request, Trace& record, const std::string& scheduler) {
  const auto out = sdk::Host::scheduler(scheduler).set_timesteps(request);
  Schedule s;
  s.timesteps = out.timesteps;
  if (out.sigmas.defined()) s.sigmas = out.sigmas.to(at::kFloat);
  record("timesteps", s.timesteps);
  if (s.sigmas.defined()) record("sigmas", s.sigmas);
  return s;
}

at::Tensor denoise_loop(at::Tensor latents, const Schedule& schedule, const SamplingHooks& hooks, Trace& record) {
  if (!hooks.model) fail(YETO_ERR_INVALID_ARGUMENT, "denoise_loop: no model hook");
  const auto scheduler = sdk::Host::scheduler(hooks.scheduler);
  const bool guided = hooks.guidance > 1.0;
  latents = latents.to(at::kFloat);
  const auto batch = latents.size(0);
  const auto model_batch = guided ? 2 * batch : batch;
  for (std::int64_t i = 0; i < schedule.timesteps.size(0); ++i) {
    const auto p = "step." + std::to_string(i) + ".";
    const auto t = schedule.timesteps[i];
    record(p + "latents", latents);
    const auto timestep = t.expand({model_batch});
    record(p + "timestep", timestep);
    auto out = hooks.model(guided ? at::cat({latents, latents}, 0) : latents, timestep, i).to(at::kFloat);
    if (out.dim() == 0 || out.size(0) != model_batch)
      fail(YETO_ERR_INVALID_ARGUMENT, "denoise_loop: the model returned " + c10::str(out.sizes()) +
                                          " for a batch of " + std::to_string(model_batch));
    if (guided) {
      const auto parts = out.chunk(2, 0);
      record(p + "noise_pred_uncond", parts[0]);
      record(p + "noise_pred_text", parts[1]);
      out = parts[0] + hooks.guidance * (parts[1] - parts[0]);
      record(p + "noise_pred_guided", out);
    }
    const auto noise_pred = hooks.select ? hooks.select(out) : out;
    record(p + "noise_pred", noise_pred);
    if (schedule.sigmas.defined() && schedule.sigmas.size(0) > i + 1) {
      record(p + "sigma", schedule.sigmas.narrow(0, i, 1));
      record(p + "sigma_next", schedule.sigmas.narrow(0, i + 1, 1));
    }
    if (hooks.observe) hooks.observe(i, latents, noise_pred);
    latents = scheduler.step(noise_pred, t, latents).to(at::kFloat);
  }
  record("final_latents", latents);
  return latents;
}

at::Tensor initial_latents(const NamedTensors& inputs, at::IntArrayRef shape, std::uint64_t seed, Trace& record) {
  at::Tensor latents;
  if (sdk::has(inputs, "latents")) {
    latents = sdk::get(inputs, "latents").to(at::kFloat);
    if (latents.sizes() != shape)
      fail(YETO_ERR_INVALID_ARGUMENT, "generate: input 'latents' must be " + c10::str(shape) + ", got " +
                                          c10::str(latents.sizes()));
  } else {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    latents = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
  }
  record("initial_latents", latents);
  return latents;
}

at::Tensor decode_images(const at::Tensor& latents, double scaling_factor, double shift_factor, Trace& record,
                         const std::string& vae) {
  const auto vae_input = latents / scaling_factor + shift_factor;
  record("vae_input", vae_input);
  const auto image = sdk::Host::vae(vae).decode(vae_input);
  record("image", image);
  const auto images = (image.to(at::kFloat) / 2 + 0.5).clamp(0, 1);
  record("image_postprocessed", images);
  return images;
}

}  // namespace yeto::family
