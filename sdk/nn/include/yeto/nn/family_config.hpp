// The torch-free half of the family kit (yeto_family): what every Diffusers family plugin's
// "family" code repeats when it plans a repository, writes `init-model` presets and reads LoRA
// targets. Errors are std::invalid_argument naming the key; a plugin turns them into a status.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::family {

// LoRA targets resolved from prepare's `lora.targets`: module patterns for nn::add_lora, or
// all_linear = true for every LoRA-capable layer (the plugin leaves out its output projection).
struct LoraTargets {
  std::vector<std::string> patterns;
  bool all_linear = false;
};

// The patterns a family gives the two named target sets.
struct LoraTargetSets {
  std::vector<std::string> auto_patterns;       // "auto" (also what a missing/null value means)
  std::vector<std::string> attention_patterns;  // "attention"
};

// Resolves `targets`: null or "auto", "attention", "all-linear" (each alone), or a non-empty list
// of module patterns (PEFT-style suffix match). Throws std::invalid_argument ("lora.targets: ...")
// for a non-string entry, an empty list, a named set mixed with patterns, or another JSON type.
LoraTargets resolve_lora_targets(const nlohmann::json& targets, const LoraTargetSets& sets);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" or empty is bf16 on CUDA and fp32
// elsewhere. Throws std::invalid_argument "<key>: expected auto, fp32, bf16 or fp16, got '...'".
std::string resolve_precision(const std::string& precision, const std::string& device,
                              const std::string& key = "precision");

// A transformers CLIP text encoder config.json (vocabulary 49408, 77 positions) of the given shape.
struct ClipTextShape {
  int hidden = 0;
  int layers = 0;
  int heads = 0;
  int intermediate = 0;
  std::string architecture = "CLIPTextModel";  // or CLIPTextModelWithProjection
  std::string hidden_act = "quick_gelu";
};
nlohmann::json clip_text_config(const ClipTextShape& shape);

// A transformers T5EncoderModel config.json (gated-gelu, vocabulary 640 as the test tokenizers)
// of the given shape; umt5_encoder_config is the UMT5EncoderModel variant (model_type umt5,
// scalable attention, T5Tokenizer) that Wan uses.
struct T5Shape {
  int d_model = 0;
  int d_kv = 0;
  int heads = 0;
  int d_ff = 0;
  int layers = 0;
};
nlohmann::json t5_encoder_config(const T5Shape& shape);
nlohmann::json umt5_encoder_config(const T5Shape& shape);

// tokenizer_config.json of the CLIP tokenizer (77 tokens; `pad_token` differs between families)
// and of the T5 tokenizer (`model_max_length` differs between families).
nlohmann::json clip_tokenizer_config(const std::string& pad_token = "<|endoftext|>");
nlohmann::json t5_tokenizer_config(int model_max_length = 512);

}  // namespace yeto::family
