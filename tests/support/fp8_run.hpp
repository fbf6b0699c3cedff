// The fp8-storage training check the family plugins' yeto-host tests share: a tiny LoRA run's
// configuration with the frozen base stored as fp8 (bf16 compute), and how many adapter B
// matrices of its lora.safetensors moved away from their zero start. Header-only (LibTorch and
// io/tensors.hpp of the test target).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

#include "io/tensors.hpp"

namespace yeto::test {

// `toml` (a TinyLoraRun's, whose [model] says precision = "fp32") with precision = "bf16" and
// storage = "fp8"; throws std::invalid_argument when there is no such precision line.
inline std::string with_fp8_storage(const std::string& toml) {
  const std::string line = "precision = \"fp32\"";
  const auto at = toml.find(line);
  if (at == std::string::npos) throw std::invalid_argument("with_fp8_storage: no '" + line + "' in the run's TOML");
  return toml.substr(0, at) + "precision = \"bf16\"\nstorage = \"fp8\"" + toml.substr(at + line.size());
}

// (moved, total) over the "lora_B" tensors of an adapter file (B starts at zero).
inline std::pair<int, int> lora_b_moved(const std::filesystem::path& lora_file) {
  int moved = 0, total = 0;
  for (const auto& [name, t] : io::load_safetensors(lora_file)) {
    if (name.find("lora_B") == std::string::npos) continue;
    ++total;
    if (t.abs().max().template item<double>() > 0) ++moved;
  }
  return {moved, total};
}

}  // namespace yeto::test
