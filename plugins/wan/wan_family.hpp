// The torch-free side of the Wan family plugin: the pipeline plan from model_index.json (one
// denoiser for Wan 2.1, two with a boundary_ratio for Wan 2.2 A14B), the init-model presets,
// LoRA target resolution and the generate request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/description.hpp"

namespace yeto::wan {

// wan.family.json, parsed once: the WanPipeline components (transformer_2 for Wan 2.2 A14B),
// the LoRA target sets (q, k, v and out of both attentions of every block, the Wan LoRA training
// default) and the presets "tiny" (wan21-tiny, one denoiser), "tiny-a14b" (wan22-tiny: two
// denoisers, boundary_ratio 0.875) and "mid" (a ~30 M-parameter transformer for CPU benchmarks).
const family::FamilyDescription& description();

// description().plan plus "boundary_ratio" for a repository with transformer_2 and
// "expand_timesteps": true for the Wan 2.2 TI2V-5B layout (one denoiser fed one timestep per
// latent token). Throws std::invalid_argument naming model_index.json and the key for what plan
// refuses, a transformer_2 without a boundary_ratio in (0, 1), or expand_timesteps with a
// transformer_2.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// A generation request, validated. Throws std::invalid_argument naming the key.
struct GenerateRequest : family::GenerateSettings {
  GenerateRequest() {
    steps = 50;
    guidance = 5.0;
    height = 480;
    width = 832;
    max_sequence_length = 512;
  }
  std::optional<double> guidance_2;  // Wan 2.2 low-noise stage; default: guidance
  std::int64_t num_frames = 81;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// WanPipeline's frame rule: a request n with n % f != 1 becomes n // f * f + 1 (Wan: f = 4, so
// 1 + 4k frames; 6 -> 5, 8 -> 9), at least 1.
std::int64_t valid_num_frames(std::int64_t requested, std::int64_t temporal_factor);

}  // namespace yeto::wan
