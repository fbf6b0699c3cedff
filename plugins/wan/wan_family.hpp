// The torch-free side of the Wan family plugin: the pipeline plan from model_index.json (one
// denoiser for Wan 2.1, two with a boundary_ratio for Wan 2.2 A14B), the init-model presets,
// LoRA target resolution and the generate request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::wan {

// {"components": {...}, "family": "wan", "boundary_ratio"?: r} for a WanPipeline repository.
// Throws std::invalid_argument naming model_index.json and the key for a missing component, an
// entry that is not a [library, class] pair, a class this family does not serve, or a
// transformer_2 without boundary_ratio.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// "tiny" (the shapes of wan21-tiny, one denoiser), "tiny-a14b" (wan22-tiny: two denoisers,
// boundary_ratio 0.875) and "mid" (a ~30 M-parameter transformer for CPU benchmarks).
nlohmann::json presets();

// "auto" / "attention": q, k, v and out of both attentions of every block (the Wan LoRA
// training default); "all-linear": every linear layer but proj_out; or PEFT-style patterns.
// Throws std::invalid_argument naming lora.targets.
family::LoraTargets resolve_lora_targets(const nlohmann::json& targets);

struct GenerateRequest {
  std::vector<std::string> prompts;
  std::vector<std::string> negative_prompts;  // empty: "" for every prompt
  std::uint64_t seed = 0;
  std::int64_t steps = 50;
  double guidance = 5.0;
  std::optional<double> guidance_2;  // Wan 2.2 low-noise stage; default: guidance
  std::int64_t height = 480;
  std::int64_t width = 832;
  std::int64_t num_frames = 81;
  std::int64_t max_sequence_length = 512;
  bool trace = false;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// WanPipeline's frame rule: a request n with n % f != 1 becomes n // f * f + 1 (Wan: f = 4, so
// 1 + 4k frames; 6 -> 5, 8 -> 9), at least 1.
std::int64_t valid_num_frames(std::int64_t requested, std::int64_t temporal_factor);


}  // namespace yeto::wan
