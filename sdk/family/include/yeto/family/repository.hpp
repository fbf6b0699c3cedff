// What every Diffusers family plugin reads from its repository and run when it plans and
// prepares: the VAE's latent normalisation and scale factor, the scheduler's config, a
// tokenizer's length, the run's model.max_sequence_length, the prepare() of its denoisers, and a
// generate request parsed with errors that cross the ABI as YETO_ERR_INVALID_ARGUMENT.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include "yeto/family/family.hpp"

namespace yeto::family {

// vae/config.json and scheduler/scheduler_config.json of the repository a plan was made for.
class PipelineConfigs {
 public:
  // The latent normalisation a family uses when the repository has no VAE (cached latents).
  PipelineConfigs(double default_scaling_factor, double default_shift_factor)
      : default_scaling_(default_scaling_factor), default_shift_(default_shift_factor) {}

  // From load_pipeline: the VAE config when the plan's "vae" is present and not null, the
  // scheduler config when the plan has a scheduler (Python's bare -Infinity / NaN read as null).
  // A missing file fails YETO_ERR_NOT_FOUND naming it.
  void read(const std::string& model_dir, const nlohmann::json& plan);

  const nlohmann::json& vae() const { return vae_; }
  const nlohmann::json& scheduler() const { return scheduler_; }
  // 2^(len(block_out_channels) - 1), as Diffusers pipelines compute vae_scale_factor; 8 without.
  std::int64_t vae_scale_factor() const;
  double scaling_factor() const { return vae_number("scaling_factor", default_scaling_); }
  double shift_factor() const { return vae_number("shift_factor", default_shift_); }
  // A number of the VAE / scheduler config, or the fallback when it is absent or not a number.
  double vae_number(const char* key, double fallback) const;
  double scheduler_number(const char* key, double fallback) const;
  std::int64_t scheduler_int(const char* key, std::int64_t fallback) const;
  bool scheduler_flag(const char* key) const;  // true only for a boolean true

 private:
  double default_scaling_, default_shift_;
  nlohmann::json vae_ = nlohmann::json::object();
  nlohmann::json scheduler_ = nlohmann::json::object();
};

// The model_max_length of <model_dir>/<tokenizer>/tokenizer_config.json when it is an integer in
// (0, 100000) (transformers writes a huge sentinel for "no limit"), else `fallback`.
std::int64_t tokenizer_max_length(const std::string& model_dir, const std::string& tokenizer, std::int64_t fallback);

// The run's model.max_sequence_length: 0 (or unset) is the pipeline's `pipeline_default`; a
// negative value, or one above `max` (when max > 0), fails YETO_ERR_INVALID_ARGUMENT
// "model.max_sequence_length must be 0 (<default_text>) or at most <max>, got <n>" (" or
// positive" when there is no maximum).
std::int64_t run_max_sequence_length(std::int64_t pipeline_default, std::int64_t max, const std::string& default_text);

// prepare() of the denoisers of a family: each placed by the options' device and precision, then
// tuned (LoRA or full, prepare_tuning with `spec`), then given the run's activation checkpointing
// (run_block_checkpointing; a denoiser that is no nn::CheckpointedBlocks is warned about when it
// is on). Under train.shard = "fsdp" each must have had its blocks sharded while loading
// (check_block_sharding). Returns the tuning for trainable_parameters.
std::string prepare_denoisers(const std::vector<torch::nn::Module*>& denoisers, const nlohmann::json& options,
                              const TuningSpec& spec);

// A generate request parsed by the family's `parse` (which throws std::invalid_argument naming
// the key); its errors fail YETO_ERR_INVALID_ARGUMENT with that message.
template <class Parse>
auto parse_request(const std::string& request_json, Parse parse) -> decltype(parse(nlohmann::json())) {
  const auto j = parse_json(request_json, "generate request");
  try {
    return parse(j);
  } catch (const std::invalid_argument& e) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
  }
}

}  // namespace yeto::family
