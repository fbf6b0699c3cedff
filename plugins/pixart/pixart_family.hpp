// The torch-free side of the PixArt family plugin: the pipeline plan from model_index.json (PixArt-
// Alpha and PixArt-Sigma, including the legacy Transformer2DModel class name of the PixArt-XL-2
// snapshots), the documented presets for `yeto-host init-model`, LoRA target resolution, the
// settings of a generation request and the pipelines' caption preprocessing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::pixart {

// The five PixArt components (model_index.json name, accepted classes).
using ComponentSpec = yeto::family::ComponentSpec;
const std::vector<ComponentSpec>& pixart_components();

// The pipeline classes this family serves and their T5 length default (PixArtAlphaPipeline 120,
// PixArtSigmaPipeline 300). Throws std::invalid_argument naming model_index.json for another class.
std::int64_t default_max_sequence_length(const std::string& pipeline_class, const std::string& where);

// {"components": {name: {"class": C, "dir": model_dir/name}}, "family": "pixart"} for a PixArt
// repository. `transformer_config` is transformer/config.json: a legacy `Transformer2DModel` with
// norm_type ada_norm_single is served as PixArtTransformer2DModel, as Diffusers maps it. Throws
// std::invalid_argument naming model_index.json and the key for a missing component, an entry
// that is not a [library, class] pair, or a class this family does not serve.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index,
                                     const nlohmann::json& transformer_config);

// The presets object of the ABI's presets hook: "tiny" (the shapes of the tests' pixart-tiny
// repository: the 512 px layout without micro-conditions) and "tiny-ms" (the same layout with the
// 1024-MS resolution / aspect-ratio conditions).
nlohmann::json presets();

// LoRA targets: "auto" (attention q/k/v/out of the self- and cross-attention and both feed-forward
// projections of every block), "attention" (the eight attention projections), "all-linear" (every
// linear layer but the final proj_out), or module patterns matched PEFT-style.
using LoraTargets = yeto::family::LoraTargets;
LoraTargets resolve_lora_targets(const nlohmann::json& targets);

// A generation request, validated. Throws std::invalid_argument naming the key.
struct GenerateRequest {
  std::vector<std::string> prompts;
  std::vector<std::string> negative_prompts;  // one per prompt ("" by default, as the pipelines)
  std::uint64_t seed = 0;
  std::int64_t steps = 20;
  double guidance = 4.5;
  std::int64_t height = 0;               // 0: the transformer's sample_size x the VAE scale factor
  std::int64_t width = 0;
  std::int64_t max_sequence_length = 0;  // 0: the pipeline's default
  bool trace = false;
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// PixArt's caption preprocessing with clean_caption=False: Python's str.lower().strip(). ASCII
// letters are lowered and ASCII whitespace stripped; other characters pass unchanged.
std::string preprocess_caption(const std::string& text);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" is bf16 on CUDA and fp32 on CPU.
std::string resolve_precision(const std::string& precision, const std::string& device);

}  // namespace yeto::pixart
