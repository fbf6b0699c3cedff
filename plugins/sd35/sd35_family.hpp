// The torch-free side of the SD3.5 family plugin: its family description, the pipeline plan
// from model_index.json and the settings of a generation request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/description.hpp"

namespace yeto::sd35 {

// sd35.family.json, parsed once: the nine StableDiffusion3Pipeline components, the LoRA target
// sets ("auto": what Diffusers' SD3 LoRA script adapts, attn.to_q/k/v/out and the added-stream
// projections; "attention": every attention projection, the dual attention's attn2 included) and
// the presets "tiny" (the tests' sd35-tiny repository) and "mid".
const family::FamilyDescription& description();

// description().plan plus SD3's rules: text_encoder_3 and tokenizer_3 may both be absent (SD3
// without T5) but not one alone; the IP-adapter components (image_encoder, feature_extractor)
// are planned as null. Throws std::invalid_argument naming model_index.json and the key.
nlohmann::json plan_from_model_index(const std::string& model_dir, const nlohmann::json& model_index);

// A generation request, validated. Throws std::invalid_argument naming the key. Defaults are
// StableDiffusion3Pipeline's (28 steps, guidance 7.0, T5 length 256); height and width 0 mean
// transformer sample_size x VAE scale factor, as upstream.
struct GenerateRequest : family::GenerateSettings {
  GenerateRequest() {
    steps = 28;
    guidance = 7.0;
    max_sequence_length = 256;
  }
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

}  // namespace yeto::sd35
