#include "nava_sampler.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

namespace yeto::nava {

namespace {

at::Tensor shifted(const at::Tensor& s, double shift) { return shift * s / (1 + (shift - 1) * s); }

// numpy.linspace in float64: start + i * (stop - start) / (num - 1), the last entry exactly stop.
at::Tensor numpy_linspace(double start, double stop, std::int64_t num) {
  if (num == 1) return at::full({1}, start, at::kDouble);
  auto y = at::arange(num, at::kDouble) * ((stop - start) / static_cast<double>(num - 1)) + start;
  y[num - 1] = stop;
  return y;
}

// lambda = log(alpha) - log(sigma) of a flow sigma (alpha = 1 - sigma), 0-d float32.
at::Tensor lambda_of(const at::Tensor& sigma) { return at::log(1 - sigma) - at::log(sigma); }

}  // namespace

FlowUniPC::FlowUniPC(double shift, std::int64_t num_train_timesteps) : shift_(shift), train_steps_(num_train_timesteps) {
  const auto t = static_cast<double>(num_train_timesteps);
  const auto alphas = numpy_linspace(1.0, 1.0 / t, num_train_timesteps).flip(0);
  init_sigmas_ = shifted((1.0 - alphas).to(at::kFloat), shift);
  sigma_max_ = init_sigmas_[0].item<double>();
  sigma_min_ = init_sigmas_[num_train_timesteps - 1].item<double>();
}

void FlowUniPC::set_timesteps(std::int64_t steps) {
  if (steps < 1) throw std::invalid_argument("FlowUniPC: at least one step is needed");
  const auto s = shifted(numpy_linspace(sigma_max_, sigma_min_, steps + 1).narrow(0, 0, steps), shift_);
  timesteps_ = (s * static_cast<double>(train_steps_)).to(at::kLong);
  sigmas_ = at::cat({s, at::zeros({1}, at::kDouble)}).to(at::kFloat);
  outputs_.clear();
  last_sample_ = at::Tensor();
  step_index_ = 0;
  lower_order_nums_ = 0;
  this_order_ = 1;
}

at::Tensor FlowUniPC::x0(const at::Tensor& model_output, const at::Tensor& sample) const {
  return sample - sigma(step_index_) * model_output;
}

// UniP (bh2) from the last x0 predictions: order 1, or 2 with rho 0.5.
at::Tensor FlowUniPC::predictor(const at::Tensor& x, std::int64_t order) const {
  const auto& m0 = outputs_.back();
  const auto sigma_t = sigma(step_index_ + 1), sigma_s0 = sigma(step_index_);
  const auto alpha_t = 1 - sigma_t;
  const auto h = lambda_of(sigma_t) - lambda_of(sigma_s0);
  const auto hh = -h;
  const auto h_phi_1 = at::expm1(hh);
  const auto b_h = at::expm1(hh);
  auto x_t = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0;
  if (order == 2) {
    const auto& m1 = outputs_[outputs_.size() - 2];
    const auto rk = (lambda_of(sigma(step_index_ - 1)) - lambda_of(sigma_s0)) / h;
    const auto d1 = (m1 - m0) / rk;
    x_t = x_t - alpha_t * b_h * (0.5 * d1);
  }
  return x_t;
}

// UniC (bh2) of the sample the last predictor made, with this step's x0 prediction.
at::Tensor FlowUniPC::corrector(const at::Tensor& this_x0, const at::Tensor& x, std::int64_t order) const {
  const auto& m0 = outputs_.back();
  const auto sigma_t = sigma(step_index_), sigma_s0 = sigma(step_index_ - 1);
  const auto alpha_t = 1 - sigma_t;
  const auto h = lambda_of(sigma_t) - lambda_of(sigma_s0);
  const auto hh = -h;
  const auto h_phi_1 = at::expm1(hh);
  const auto b_h = at::expm1(hh);
  const auto x_t = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0;
  const auto d1_t = this_x0 - m0;
  if (order == 1) return x_t - alpha_t * b_h * (0.5 * d1_t);
  // Order 2: rhos_c = solve(R, b), R = [[1, 1], [rk, 1]], b_i = h_phi_k(i) i! / B_h.
  const auto& m1 = outputs_[outputs_.size() - 2];
  const auto rk = (lambda_of(sigma(step_index_ - 2)) - lambda_of(sigma_s0)) / h;
  const auto d1 = (m1 - m0) / rk;
  auto h_phi_k = h_phi_1 / hh - 1;
  const auto b1 = h_phi_k * 1 / b_h;
  h_phi_k = h_phi_k / hh - 1.0 / 2.0;
  const auto b2 = h_phi_k * 2 / b_h;
  const auto rks = at::stack({rk, at::ones({}, rk.options())});
  const auto r = at::stack({at::pow(rks, 0), at::pow(rks, 1)});
  const auto rhos = at::linalg_solve(r, at::stack({b1, b2}));
  return x_t - alpha_t * b_h * (rhos[0] * d1 + rhos[1] * d1_t);
}

at::Tensor FlowUniPC::step(const at::Tensor& model_output, const at::Tensor& sample_in) {
  if (!timesteps_.defined()) throw std::invalid_argument("FlowUniPC: set_timesteps first");
  if (step_index_ >= timesteps_.size(0)) throw std::invalid_argument("FlowUniPC: every step is taken");
  const auto out = model_output.to(at::kFloat);
  auto sample = sample_in.to(at::kFloat);
  const auto converted = x0(out, sample);
  if (step_index_ > 0 && last_sample_.defined()) sample = corrector(converted, last_sample_, this_order_);
  outputs_.push_back(converted);
  if (outputs_.size() > 2) outputs_.erase(outputs_.begin());
  const auto n = timesteps_.size(0);
  const std::int64_t order = std::min<std::int64_t>(2, n - step_index_);  // lower_order_final
  this_order_ = std::min(order, lower_order_nums_ + 1);
  last_sample_ = sample;
  const auto prev = predictor(sample, this_order_);
  if (lower_order_nums_ < 2) ++lower_order_nums_;
  ++step_index_;
  return prev;
}

std::pair<at::Tensor, at::Tensor> sample(WanAVModel& model, const SampleRequest& r, at::Tensor video, at::Tensor audio,
                                         const SampleTrace& trace) {
  if (r.video_grid.size() != 3) throw std::invalid_argument("NAVA sample: the video grid must be (t, h, w)");
  const auto t = r.video_grid[0], h = r.video_grid[1], w = r.video_grid[2];
  const auto cv = model->config().vid_in_dim;
  if (video.dim() != 2 || video.size(0) != t * h * w || video.size(1) != cv)
    throw std::invalid_argument("NAVA sample: the video latents must be [t h w, " + std::to_string(cv) + "]");
  if (audio.dim() != 2 || audio.size(0) != r.audio_len)
    throw std::invalid_argument("NAVA sample: the audio latents must be [" + std::to_string(r.audio_len) + ", C]");
  video = video.to(model->device(), at::kFloat);
  audio = audio.to(model->device(), at::kFloat);
  FlowUniPC video_scheduler(r.shift), audio_scheduler(r.shift);
  video_scheduler.set_timesteps(r.steps);
  audio_scheduler.set_timesteps(r.steps);
  const auto pad_h = (r.patch - h % r.patch) % r.patch, pad_w = (r.patch - w % r.patch) % r.patch;
  const bool timbre = r.speaker.defined();
  auto record = [&](const std::string& n, const at::Tensor& x) {
    if (trace) trace(n, x);
  };
  for (std::int64_t i = 0; i < r.steps; ++i) {
    const auto timestep = video_scheduler.timesteps()[i];
    const auto si = "step." + std::to_string(i) + ".";
    // predict_eps: packed -> [C, t, h, w] padded to the patch, the backbone, cropped and packed back.
    auto predict = [&](const at::Tensor& video_context, const at::Tensor& audio_context, const at::Tensor& speaker,
                       const std::vector<std::int64_t>& positions, bool masking) {
      Inputs in;
      in.video = {at::constant_pad_nd(video.transpose(0, 1).reshape({cv, t, h, w}), {0, pad_w, 0, pad_h})};
      in.audio = {audio};
      in.t = timestep.reshape({1});
      in.video_context = {video_context};
      in.audio_context = {audio_context};
      in.speaker = speaker;
      if (!positions.empty()) in.speaker_positions = {positions};
      in.masking_modality = masking;
      const auto out = model->forward(in);
      const auto v = out.video[0].narrow(2, 0, h).narrow(3, 0, w).to(at::kFloat);
      return std::pair{v.reshape({cv, t * h * w}).transpose(0, 1), out.audio[0].to(at::kFloat)};
    };
    const auto cond = predict(r.text, r.text, r.speaker, r.speaker_positions, false);
    const auto uncond = predict(r.negative_video, r.negative_audio, at::Tensor(), {}, false);
    const auto mmask = predict(r.text, r.text, r.speaker, {}, true);
    record(si + "eps.cond.video", cond.first);
    record(si + "eps.cond.audio", cond.second);
    record(si + "eps.uncond.video", uncond.first);
    record(si + "eps.uncond.audio", uncond.second);
    record(si + "eps.mmask_cond.video", mmask.first);
    record(si + "eps.mmask_cond.audio", mmask.second);
    const auto& c = cond;
    auto guided_video = c.first + r.video_guidance * (c.first - uncond.first) +
                        r.video_align_guidance * (c.first - mmask.first);
    auto guided_audio = c.second + r.audio_guidance * (c.second - uncond.second) +
                        r.audio_align_guidance * (c.second - mmask.second);
    if (timbre) {
      const auto no_speaker = predict(r.text, r.text, at::Tensor(), r.speaker_positions, false);
      record(si + "eps.timbre_uncond.video", no_speaker.first);
      record(si + "eps.timbre_uncond.audio", no_speaker.second);
      guided_audio = guided_audio + r.timbre_guidance * (c.second - no_speaker.second);
    }
    record(si + "timestep", timestep);
    record(si + "guided.video", guided_video);
    record(si + "guided.audio", guided_audio);
    record(si + "x0_pred.video", video_scheduler.x0(guided_video, video));
    record(si + "x0_pred.audio", audio_scheduler.x0(guided_audio, audio));
    video = video_scheduler.step(guided_video, video);
    audio = audio_scheduler.step(guided_audio, audio);
    record(si + "latents_vision", video);
    record(si + "latents_audio", audio);
  }
  return {video, audio};
}

}  // namespace yeto::nava
