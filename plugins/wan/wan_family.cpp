#include "wan_family.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace yeto::wan {

using nlohmann::json;

json plan_from_model_index(const std::string& model_dir, const json& index) {
  const std::string where = model_dir + "/model_index.json";
  json plan = description().plan(model_dir, index);
  const json& components = plan["components"];
  if (index.contains("expand_timesteps") && !index["expand_timesteps"].is_null()) {
    if (!index["expand_timesteps"].is_boolean())
      family::invalid(where + ": 'expand_timesteps' must be true, false or null, got " + index["expand_timesteps"].dump());
    if (index["expand_timesteps"].get<bool>()) {
      if (components.contains("transformer_2"))
        family::invalid(where + ": 'expand_timesteps' true (the Wan 2.2 TI2V-5B layout) takes one denoiser, but "
                                "'transformer_2' is present");
      plan["expand_timesteps"] = true;
    }
  }
  // The memory model's token geometry from the VAE this repository has: the Wan 2.2 VAE
  // downsamples 16x in space (scale_factor_spatial; Wan 2.1's 8x has no key), the transformer
  // patchifies 2x2 more.
  if (plan.contains("memory") && components.contains("vae") && components["vae"].is_object() &&
      components["vae"].contains("dir") && components["vae"]["dir"].is_string()) {
    std::ifstream in(components["vae"]["dir"].get<std::string>() + "/config.json");
    const json vae = in ? json::parse(in, nullptr, false) : json();
    if (vae.is_object()) {
      if (vae.contains("scale_factor_spatial") && vae["scale_factor_spatial"].is_number_integer())
        plan["memory"]["token_pixels"] = 2 * vae["scale_factor_spatial"].get<int>();
      if (vae.contains("scale_factor_temporal") && vae["scale_factor_temporal"].is_number_integer())
        plan["memory"]["token_frames"] = vae["scale_factor_temporal"].get<int>();
    }
  }
  if (components.contains("transformer_2")) {
    if (!index.contains("boundary_ratio") || !index["boundary_ratio"].is_number())
      family::invalid(where + ": 'transformer_2' is present but 'boundary_ratio' (a number in (0, 1)) is missing");
    const double r = index["boundary_ratio"].get<double>();
    if (!(r > 0.0 && r < 1.0))
      family::invalid(where + ": 'boundary_ratio' must be in (0, 1), got " + index["boundary_ratio"].dump());
    plan["boundary_ratio"] = r;
  }
  return plan;
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest g;
  const family::RequestReader in(j);
  family::GenerateRules rules;
  rules.min_size = 16;
  rules.single_negative_for_all = true;
  family::read_generate_settings(in, rules, g);
  g.num_frames = in.integer("num_frames", g.num_frames, 1);
  if (in.has("guidance_2")) g.guidance_2 = in.number("guidance_2", 0.0);
  return g;
}

std::int64_t valid_num_frames(std::int64_t requested, std::int64_t f) {
  if (f <= 1) return std::max<std::int64_t>(requested, 1);
  const auto n = requested % f == 1 ? requested : requested / f * f + 1;
  return std::max<std::int64_t>(n, 1);
}

}  // namespace yeto::wan
