// The torch-free side of the SD3.5 family plugin: the pipeline plan from model_index.json, the
// documented presets for `yeto-host init-model`, LoRA target resolution and the settings of a
// generation request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::sd35 {

// The nine StableDiffusion3Pipeline components (model_index.json name, accepted classes,
// whether the pipeline runs without it: the T5 pair may be [null, null]).
using ComponentSpec = yeto::family::ComponentSpec;
const std::vector<ComponentSpec>& sd35_components();

// {"components": {name: {"class": C, "dir": model_dir/name} | null}, "family": "sd35"} for a
// StableDiffusion3Pipeline repository. text_encoder_3 and tokenizer_3 may both be absent (SD3
// without T5); the optional IP-adapter components (image_encoder, feature_extractor) are dropped.
// Throws std::invalid_argument naming model_index.json and the key for a missing component, an
// entry that is not a [library, class] pair, a class this family does not serve, or only one of
// the T5 pair.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// The presets object of the ABI's presets hook: "tiny" (exactly the tests' sd35-tiny
// repository) and "mid" (an SD3.5-medium layout of ~30 M transformer parameters for CPU runs).
nlohmann::json presets();

// LoRA targets: "auto" (what Diffusers' SD3 LoRA training script adapts by default: attn.to_q/k/v,
// attn.to_out.0 and the added-stream projections of the joint attention), "attention" (every
// attention projection, the dual attention's attn2 included), "all-linear" (every linear layer
// except the final proj_out), or module patterns matched PEFT-style.
using LoraTargets = yeto::family::LoraTargets;
LoraTargets resolve_lora_targets(const nlohmann::json& targets);

// A generation request, validated. Throws std::invalid_argument naming the key. Defaults are
// StableDiffusion3Pipeline's (28 steps, guidance 7.0, T5 length 256); height and width 0 mean
// transformer sample_size x VAE scale factor, as upstream.
struct GenerateRequest {
  std::vector<std::string> prompts;
  std::vector<std::string> negative_prompts;  // empty: "" for each prompt
  std::uint64_t seed = 0;
  std::int64_t steps = 28;
  double guidance = 7.0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t max_sequence_length = 256;
  bool trace = false;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" is bf16 on CUDA and fp32 on CPU.
std::string resolve_precision(const std::string& precision, const std::string& device);

}  // namespace yeto::sd35
