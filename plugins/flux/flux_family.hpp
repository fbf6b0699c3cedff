// The torch-free side of the Flux family plugin: its family description (flux.family.json:
// the repository layout, LoRA target sets, init-model presets) and the settings of a
// generation request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/description.hpp"

namespace yeto::flux {

// flux.family.json, parsed once.
const family::FamilyDescription& description();

// np.linspace(start, stop, num) in float64, exactly as NumPy computes it.
using yeto::family::linspace;

// A generation request, validated. Throws std::invalid_argument naming the key.
struct GenerateRequest : family::GenerateSettings {
  GenerateRequest() {
    steps = 28;
    guidance = 3.5;
    height = width = 1024;
    max_sequence_length = 512;
  }
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

}  // namespace yeto::flux
