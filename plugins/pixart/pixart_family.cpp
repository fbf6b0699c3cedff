#include "pixart_family.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::pixart {
namespace {

using nlohmann::json;

bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

}  // namespace

std::int64_t default_max_sequence_length(const std::string& pipeline_class, const std::string& where) {
  if (pipeline_class == "PixArtAlphaPipeline") return 120;
  if (pipeline_class == "PixArtSigmaPipeline") return 300;
  family::invalid(where + ": _class_name is '" + pipeline_class +
                  "'; the pixart plugin serves PixArtAlphaPipeline and PixArtSigmaPipeline repositories");
}

json plan_from_model_index(const std::string& model_dir, const json& model_index, const json& transformer_config) {
  const std::string where = model_dir + "/model_index.json";
  if (!model_index.is_object()) family::invalid(where + ": expected a JSON object");
  default_max_sequence_length(model_index.value("_class_name", std::string()), where);
  json plan = description().plan(model_dir, model_index);
  json& components = plan["components"];
  if (components["transformer"]["class"] == "Transformer2DModel") {
    // The PixArt-XL-2 snapshots' legacy class: Diffusers loads it as PixArtTransformer2DModel
    // when the config has norm_type ada_norm_single.
    const auto nt = transformer_config.is_object() ? transformer_config.value("norm_type", std::string()) : "";
    if (nt != "ada_norm_single")
      family::invalid(model_dir +
                      "/transformer/config.json: a Transformer2DModel is served as PixArtTransformer2DModel only "
                      "with norm_type ada_norm_single, got '" +
                      nt + "'");
    components["transformer"]["class"] = "PixArtTransformer2DModel";
  }
  return plan;
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  family::GenerateRules rules;
  rules.single_negative_for_all = true;
  family::read_generate_settings(family::RequestReader(j), rules, r);
  return r;
}

std::string preprocess_caption(const std::string& text) {
  std::size_t b = 0, e = text.size();
  while (b < e && is_space(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && is_space(static_cast<unsigned char>(text[e - 1]))) --e;
  std::string out = text.substr(b, e - b);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace yeto::pixart
