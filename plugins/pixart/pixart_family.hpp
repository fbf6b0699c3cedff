// The torch-free side of the PixArt family plugin: the pipeline plan from model_index.json (PixArt-
// Alpha and PixArt-Sigma, including the legacy Transformer2DModel class name of the PixArt-XL-2
// snapshots), the documented presets for `yeto-host init-model`, LoRA target resolution, the
// settings of a generation request and the pipelines' caption preprocessing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/description.hpp"

namespace yeto::pixart {

// pixart.family.json, parsed once: the five PixArt components, the LoRA target sets ("auto":
// attention q/k/v/out of the self- and cross-attention and both feed-forward projections of
// every block; "attention": the eight attention projections) and the presets "tiny" (the tests'
// pixart-tiny repository, 512 px layout) and "tiny-ms" (with the 1024-MS micro-conditions).
const family::FamilyDescription& description();

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

// A generation request, validated. Throws std::invalid_argument naming the key.
// height / width 0: the transformer's sample_size x the VAE scale factor; max_sequence_length 0:
// the pipeline's default.
struct GenerateRequest : family::GenerateSettings {
  GenerateRequest() {
    steps = 20;
    guidance = 4.5;
  }
};
GenerateRequest parse_generate_request(const nlohmann::json& request);

// PixArt's caption preprocessing with clean_caption=False: Python's str.lower().strip(). ASCII
// letters are lowered and ASCII whitespace stripped; other characters pass unchanged.
std::string preprocess_caption(const std::string& text);

}  // namespace yeto::pixart
