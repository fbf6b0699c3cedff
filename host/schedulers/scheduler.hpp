// Noise schedulers, numerically matching Hugging Face Diffusers v0.33.1 (see docs/DIFFUSION.md).
//
// A Scheduler serves both sides of a diffusion model:
//  * sampling: set_timesteps(), timesteps()/sigmas() tables, step() over the model outputs;
//  * training: the forward process (noisy input from clean latents + noise at sampled
//    training timesteps), the regression target for the configured prediction type, and
//    per-sample alpha/sigma/SNR for loss weighting (training_batch()).
//
// All tensors are CPU or device tensors of the caller's dtype; schedule tables live on the CPU
// in the dtypes Diffusers uses (float32 sigmas, float32 or int64 timesteps).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "io/component_registry.hpp"

namespace yeto::schedulers {

// What the denoiser is trained to predict.
enum class Prediction {
  epsilon,       // the noise
  v_prediction,  // v = alpha_t * noise - sigma_t * x0
  sample,        // x0 itself
  flow,          // flow-matching velocity: noise - x0 (Diffusers "flow_prediction")
};
std::string prediction_name(Prediction p);

struct SetTimestepsArgs {
  std::optional<std::int64_t> num_inference_steps;
  std::optional<std::vector<double>> sigmas;  // FlowMatchEulerDiscrete: explicit sigmas (Flux pipeline form)
  std::optional<double> mu;                   // dynamic shifting (Flux / UniPC use_dynamic_shifting)
};

// One training batch built by the scheduler from clean latents, noise and timestep indices.
struct TrainingBatch {
  at::Tensor indices;    // [B] int64 positions in the training schedule
  at::Tensor timesteps;  // [B] what the denoiser receives (float32 for flow models, int64 for DDPM-family)
  at::Tensor noisy;      // model input x_t, like x0
  at::Tensor target;     // regression target for the prediction type, like x0
  at::Tensor alpha_t;    // [B] float32: x_t = alpha_t * x0 + sigma_t * noise
  at::Tensor sigma_t;    // [B] float32
  at::Tensor snr;        // [B] float32: (alpha_t / sigma_t)^2
  Prediction prediction = Prediction::epsilon;
};

class Scheduler : public io::Component {
 public:
  ~Scheduler() override = default;

  // --- sampling ---------------------------------------------------------------------------
  virtual void set_timesteps(const SetTimestepsArgs& args) = 0;
  void set_timesteps(std::int64_t n) {
    SetTimestepsArgs a;
    a.num_inference_steps = n;
    set_timesteps(a);
  }
  virtual at::Tensor timesteps() const = 0;
  // Undefined for schedulers without a sigma table (DDPM).
  virtual at::Tensor sigmas() const = 0;
  virtual double init_noise_sigma() const { return 1.0; }
  // One denoising step from `sample` at `timestep` (a value of timesteps()); returns the
  // previous sample. Multistep schedulers keep their history between calls; set_timesteps()
  // resets it.
  virtual at::Tensor step(const at::Tensor& model_output, const at::Tensor& timestep, const at::Tensor& sample) = 0;
  // The forward process at the given timesteps (one per batch element, values of the current
  // timesteps() table for DPM-Solver/UniPC/FlowMatch, training timesteps for DDPM).
  virtual at::Tensor add_noise(const at::Tensor& original, const at::Tensor& noise, const at::Tensor& timesteps) const = 0;
  // Named state for inspection and parity checks ("betas", "alphas_cumprod", "this_order",
  // "last_sample", "model_outputs", ...). Undefined tensor when the name is unknown.
  virtual at::Tensor attribute(const std::string& name) const;

  // --- training ---------------------------------------------------------------------------
  virtual Prediction prediction() const = 0;
  // Length of the training schedule (num_train_timesteps).
  virtual std::int64_t num_train_timesteps() const = 0;
  // Maps u in [0, 1) (one per sample, from the caller's seeded stream and density) to training
  // schedule positions: floor(u * num_train_timesteps), clamped. Diffusers' training scripts do
  // the same (`indices = (u * num_train_timesteps).long()`).
  at::Tensor indices_from_uniform(const at::Tensor& u) const;
  // Builds the noisy input and the target for x0 / noise at training positions `indices`.
  virtual TrainingBatch training_batch(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& indices) const = 0;

  const nlohmann::json& config() const { return config_; }

 protected:
  nlohmann::json config_;  // the config it was built from (unknown keys kept, not used)
};

// Builds a scheduler by Diffusers class name from a parsed config. Throws yeto::Error
// (bad_input) for an unknown class or invalid values, naming `label` (usually the file).
std::shared_ptr<Scheduler> make_scheduler(const std::string& class_name, const nlohmann::json& config,
                                          const std::string& label = "scheduler_config.json");
// Reads dir/scheduler_config.json and builds the class its `_class_name` names, or
// `class_name` when given (Diffusers' `DDPMScheduler.from_pretrained(dir)` of another class's config).
std::shared_ptr<Scheduler> load_scheduler(const std::filesystem::path& dir, const std::string& class_name = "");
std::vector<std::string> scheduler_classes();

// Registers every scheduler class under its Diffusers name with kind "scheduler".
void register_scheduler_components(io::ComponentRegistry& registry);

// Module-level helper of the Flux/SD3/LTX pipelines: linear interpolation of mu between
// (base_seq_len, base_shift) and (max_seq_len, max_shift).
double calculate_shift(double image_seq_len, double base_seq_len = 256, double max_seq_len = 4096,
                       double base_shift = 0.5, double max_shift = 1.15);

}  // namespace yeto::schedulers
