// The torch-free side of the Flux family plugin: the pipeline plan from model_index.json,
// the documented presets for `yeto-host init-model`, LoRA target resolution, the settings of
// a generation request and NumPy's linspace as FluxPipeline uses it for the sigma schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::flux {

// The seven FLUX.1 components (model_index.json name, accepted classes).
using ComponentSpec = yeto::family::ComponentSpec;
const std::vector<ComponentSpec>& flux_components();

// {"components": {name: {"class": C, "dir": model_dir/name}}} for a FluxPipeline repository.
// Throws std::invalid_argument naming model_index.json and the key for a missing component, an
// entry that is not a [library, class] pair, or a class this family does not serve.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// The presets object of the ABI's presets hook: "tiny" (the shapes of the tests' flux-tiny
// repository) and "mid" (a ~100 M-parameter transformer for CPU benchmarks).
nlohmann::json presets();

// LoRA targets: "auto" (the projections Diffusers' Flux LoRA training adapts by default:
// attention q/k/v/out of both streams and both feed-forwards of the double blocks), "attention"
// (every attention projection), "all-linear" (every linear layer except the final proj_out), or
// module patterns matched PEFT-style. Returns the pattern list for nn::add_lora; an empty list
// with all_linear = true means every layer but the output projection.
using LoraTargets = yeto::family::LoraTargets;
LoraTargets resolve_lora_targets(const nlohmann::json& targets);

// np.linspace(start, stop, num) in float64, exactly as NumPy computes it.
using yeto::family::linspace;

// A generation request, validated. Throws std::invalid_argument naming the key.
struct GenerateRequest {
  std::vector<std::string> prompts;
  std::uint64_t seed = 0;
  std::int64_t steps = 28;
  double guidance = 3.5;
  std::int64_t height = 1024;
  std::int64_t width = 1024;
  std::int64_t max_sequence_length = 512;
  bool trace = false;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" is bf16 on CUDA and fp32 on CPU.
std::string resolve_precision(const std::string& precision, const std::string& device);

}  // namespace yeto::flux
