#include "sd35_family.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::sd35 {

using nlohmann::json;

json plan_from_model_index(const std::string& model_dir, const json& model_index) {
  const std::string where = model_dir + "/model_index.json";
  json plan = description().plan(model_dir, model_index);
  json& components = plan["components"];
  auto absent = [&](const char* name) {
    if (!model_index.contains(name)) return true;
    const auto& e = model_index.at(name);
    return e.is_null() || (e.is_array() && e.size() == 2 && e[0].is_null() && e[1].is_null());
  };
  if (components.contains("text_encoder_3") != components.contains("tokenizer_3"))
    family::invalid(where +
                    ": text_encoder_3 and tokenizer_3 come together (T5 and its tokenizer); this repository has only " +
                    std::string(components.contains("text_encoder_3") ? "text_encoder_3" : "tokenizer_3"));
  // SD3.5's IP-adapter parts are not used by text-to-image training or sampling.
  for (const char* extra : {"image_encoder", "feature_extractor"})
    if (model_index.contains(extra) && !absent(extra)) components[extra] = nullptr;
  return plan;
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  family::read_generate_settings(family::RequestReader(j), {1, 512, "the SD3 pipelines' T5 limit"}, r);
  return r;
}

}  // namespace yeto::sd35
