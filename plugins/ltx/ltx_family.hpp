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

#include "yeto/family/description.hpp"

namespace yeto::ltx {

// ltx.family.json, parsed once: the five LTXPipeline components (the tokenizer may be
// T5Tokenizer or T5TokenizerFast: the published repository names the slow class, the pipeline is
// annotated with the fast one), the LoRA target sets (q/k/v/out of both attentions of every
// block, what LTX-Video LoRA training adapts) and the presets "tiny" (the tests' ltx-tiny
// repository) and "small".
const family::FamilyDescription& description();

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
struct GenerateRequest : family::GenerateSettings {
  GenerateRequest() {
    steps = 50;
    guidance = 3.0;
    height = 512;
    width = 704;
    max_sequence_length = 128;
  }
  std::int64_t num_frames = 161;
  double frame_rate = 25.0;
  double decode_timestep = 0.0;
  std::optional<double> decode_noise_scale;  // unset: decode_timestep (LTXPipeline's default)
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

}  // namespace yeto::ltx
