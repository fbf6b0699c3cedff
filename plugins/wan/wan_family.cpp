#include "wan_family.hpp"

#include <algorithm>
#include <fstream>
#include <regex>
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

namespace {

// residual.<k> / shortcut inside one resnet -> its Diffusers member.
std::string resnet_member(const std::string& rest) {
  static const std::vector<std::pair<std::string, std::string>> members = {
      {"residual.0.", "norm1."}, {"residual.2.", "conv1."}, {"residual.3.", "norm2."},
      {"residual.6.", "conv2."}, {"shortcut.", "conv_shortcut."}};
  for (const auto& [from, to] : members)
    if (rest.rfind(from, 0) == 0) return to + rest.substr(from.size());
  return rest;
}

}  // namespace

std::string wan22_vae_diffusers_name(const std::string& key) {
  static const std::regex top(R"(^conv([12])\.(weight|bias)$)");
  static const std::regex conv_in(R"(^(encoder|decoder)\.conv1\.(.*)$)");
  static const std::regex middle(R"(^(encoder|decoder)\.middle\.([0-2])\.(.*)$)");
  static const std::regex head(R"(^(encoder|decoder)\.head\.([02])\.(.*)$)");
  static const std::regex level(R"(^(encoder\.downsamples|decoder\.upsamples)\.(\d+)\.(downsamples|upsamples)\.(\d+)\.(.*)$)");
  std::smatch m;
  if (std::regex_match(key, m, top)) return std::string(m[1] == "1" ? "quant_conv." : "post_quant_conv.") + m[2].str();
  if (std::regex_match(key, m, conv_in)) return m[1].str() + ".conv_in." + m[2].str();
  if (std::regex_match(key, m, middle)) {
    const auto part = m[1].str() + ".mid_block.";
    if (m[2] == "1") return part + "attentions.0." + m[3].str();
    return part + "resnets." + (m[2] == "0" ? "0." : "1.") + resnet_member(m[3].str());
  }
  if (std::regex_match(key, m, head)) return m[1].str() + (m[2] == "0" ? ".norm_out." : ".conv_out.") + m[3].str();
  if (std::regex_match(key, m, level)) {
    const bool enc = m[1].str().rfind("encoder", 0) == 0;
    const auto rest = m[5].str();
    const auto block = std::string(enc ? "encoder.down_blocks." : "decoder.up_blocks.") + m[2].str() + ".";
    if (rest.rfind("resample.", 0) == 0 || rest.rfind("time_conv.", 0) == 0)
      return block + (enc ? "downsampler." : "upsampler.") + rest;
    return block + "resnets." + m[4].str() + "." + resnet_member(rest);
  }
  return key;
}

std::int64_t valid_num_frames(std::int64_t requested, std::int64_t f) {
  if (f <= 1) return std::max<std::int64_t>(requested, 1);
  const auto n = requested % f == 1 ? requested : requested / f * f + 1;
  return std::max<std::int64_t>(n, 1);
}

}  // namespace yeto::wan
