// The torch-free side of the LTX-Video family plugin: the pipeline plan from model_index.json,
// the documented presets for `yeto-host init-model`, LoRA target resolution, the settings of a
// generation request, the VAE's temporal frame rule and NumPy's linspace / LTXPipeline's
// calculate_shift as the sampling schedule uses them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::ltx {

// The five LTX-Video components (model_index.json name, accepted classes).
using ComponentSpec = yeto::family::ComponentSpec;
const std::vector<ComponentSpec>& ltx_components();

// {"components": {name: {"class": C, "dir": model_dir/name}}, "family": "ltx"} for an
// LTXPipeline repository. Throws std::invalid_argument naming model_index.json and the key for a
// missing component, an entry that is not a [library, class] pair, or a class this family does
// not serve (the tokenizer may be T5Tokenizer or T5TokenizerFast: the published repository names
// the slow class, the pipeline is annotated with the fast one).
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// The presets object of the ABI's presets hook: "tiny" (exactly the tests' ltx-tiny repository)
// and "small" (a few-million-parameter transformer for CPU benchmarks).
nlohmann::json presets();

// LoRA targets: "auto" and "attention" (q/k/v/out of both attentions of every block, the
// projections LTX-Video LoRA training adapts), "all-linear" (every linear layer but proj_out),
// or PEFT-style module patterns. all_linear = true: every layer but the output projection.
using LoraTargets = yeto::family::LoraTargets;
LoraTargets resolve_lora_targets(const nlohmann::json& targets);

// np.linspace(start, stop, num) in float64, exactly as NumPy computes it.
using yeto::family::linspace;

// LTXPipeline's calculate_shift: mu linear in the sequence length through (base_seq_len,
// base_shift) and (max_seq_len, max_shift), extrapolated outside (as upstream).
double calculate_shift(double seq_len, double base_seq_len, double max_seq_len, double base_shift, double max_shift);

// The VAE's temporal rule: latent frames = (frames - 1) / ratio + 1 (integer division), and the
// decoder gives back 1 + ratio * (latent frames - 1) frames. So a request for `frames` yields
// decoded_frames(frames, ratio) frames (1 + 8k for LTX-Video).
std::int64_t latent_frames(std::int64_t frames, std::int64_t temporal_ratio);
std::int64_t decoded_frames(std::int64_t frames, std::int64_t temporal_ratio);

// A generation request, validated. Throws std::invalid_argument naming the key.
struct GenerateRequest {
  std::vector<std::string> prompts;
  std::vector<std::string> negative_prompts;  // empty: "" for every prompt (LTXPipeline's default)
  std::uint64_t seed = 0;
  std::int64_t steps = 50;
  double guidance = 3.0;
  std::int64_t height = 512;
  std::int64_t width = 704;
  std::int64_t num_frames = 161;
  double frame_rate = 25.0;
  std::int64_t max_sequence_length = 128;
  double decode_timestep = 0.0;
  std::optional<double> decode_noise_scale;  // unset: decode_timestep (LTXPipeline's default)
  bool trace = false;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" is bf16 on CUDA and fp32 on CPU.
std::string resolve_precision(const std::string& precision, const std::string& device);

}  // namespace yeto::ltx
