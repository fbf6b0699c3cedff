#include "wan_family.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::wan {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json model_index(bool two_denoisers) {
  json j = {{"_class_name", "WanPipeline"},
            {"_diffusers_version", "0.33.1"},
            {"scheduler", {"diffusers", "UniPCMultistepScheduler"}},
            {"text_encoder", {"transformers", "UMT5EncoderModel"}},
            {"tokenizer", {"transformers", "T5TokenizerFast"}},
            {"transformer", {"diffusers", "WanTransformer3DModel"}},
            {"vae", {"diffusers", "AutoencoderKLWan"}}};
  if (two_denoisers) {
    j["transformer_2"] = {"diffusers", "WanTransformer3DModel"};
    j["boundary_ratio"] = 0.875;
    j["expand_timesteps"] = false;
  }
  return j;
}

json scheduler_config() {
  return {{"_class_name", "UniPCMultistepScheduler"},
          {"beta_end", 0.02},
          {"beta_schedule", "linear"},
          {"beta_start", 0.0001},
          {"disable_corrector", json::array()},
          {"dynamic_thresholding_ratio", 0.995},
          {"final_sigmas_type", "zero"},
          {"flow_shift", 3.0},
          {"lower_order_final", true},
          {"num_train_timesteps", 1000},
          {"predict_x0", true},
          {"prediction_type", "flow_prediction"},
          {"rescale_betas_zero_snr", false},
          {"sample_max_value", 1.0},
          {"solver_order", 2},
          {"solver_p", nullptr},
          {"solver_type", "bh2"},
          {"steps_offset", 0},
          {"thresholding", false},
          {"timestep_spacing", "linspace"},
          {"trained_betas", nullptr},
          {"use_beta_sigmas", false},
          {"use_exponential_sigmas", false},
          {"use_flow_sigmas", true},
          {"use_karras_sigmas", false}};
}

json transformer_config(int heads, int head_dim, int ffn, int layers, int text_dim) {
  return {{"_class_name", "WanTransformer3DModel"},
          {"added_kv_proj_dim", nullptr},
          {"attention_head_dim", head_dim},
          {"cross_attn_norm", true},
          {"eps", 1e-06},
          {"ffn_dim", ffn},
          {"freq_dim", 32},
          {"image_dim", nullptr},
          {"in_channels", 16},
          {"num_attention_heads", heads},
          {"num_layers", layers},
          {"out_channels", 16},
          {"patch_size", {1, 2, 2}},
          {"qk_norm", "rms_norm_across_heads"},
          {"rope_max_seq_len", 1024},
          {"text_dim", text_dim}};
}

json vae_config(int base_dim, std::vector<int> dim_mult) {
  return {{"_class_name", "AutoencoderKLWan"},
          {"attn_scales", json::array()},
          {"base_dim", base_dim},
          {"dim_mult", dim_mult},
          {"dropout", 0.0},
          {"latents_mean", {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715,
                            0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921}},
          {"latents_std", {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652,
                           1.5579, 1.6382, 1.1253, 2.8251, 1.916}},
          {"num_res_blocks", 1},
          {"temperal_downsample", {false, true, true}},
          {"z_dim", 16}};
}

json preset(const std::string& description, bool two, const json& transformer, const json& vae, const json& umt5) {
  json components = {{"transformer", {{"config", transformer}}},
                     {"vae", {{"config", vae}}},
                     {"text_encoder", {{"config", umt5}}},
                     {"tokenizer", {{"config", family::t5_tokenizer_config(512)}}},
                     {"scheduler", {{"config", scheduler_config()}}}};
  if (two) components["transformer_2"] = {{"config", transformer}};
  return {{"description", description}, {"model_index", model_index(two)}, {"components", components}};
}

const std::vector<family::ComponentSpec>& specs() {
  static const std::vector<family::ComponentSpec> s = {
      {"transformer", {"WanTransformer3DModel"}, false, false},
      {"transformer_2", {"WanTransformer3DModel"}, true},
      {"vae", {"AutoencoderKLWan"}},
      {"text_encoder", {"UMT5EncoderModel"}},
      {"tokenizer", {"T5Tokenizer", "T5TokenizerFast", "AutoTokenizer"}},
      {"scheduler", {"UniPCMultistepScheduler"}, false, false}};
  return s;
}

}  // namespace

json plan_from_model_index(const std::string& model_dir, const json& index) {
  const std::string where = model_dir + "/model_index.json";
  if (!index.is_object()) bad(where + ": expected a JSON object");
  const json components = family::plan_components(
      model_dir, index, specs(), "wan",
      "a Wan repository has transformer (and transformer_2 for Wan 2.2 A14B), vae, text_encoder, tokenizer and "
      "scheduler");
  json plan = {{"components", components}, {"family", "wan"}};
  if (index.contains("expand_timesteps") && index["expand_timesteps"].is_boolean() &&
      index["expand_timesteps"].get<bool>())
    bad(where + ": 'expand_timesteps' true (the Wan 2.2 TI2V-5B per-token timesteps) is not supported by this plugin");
  if (components.contains("transformer_2")) {
    if (!index.contains("boundary_ratio") || !index["boundary_ratio"].is_number())
      bad(where + ": 'transformer_2' is present but 'boundary_ratio' (a number in (0, 1)) is missing");
    const double r = index["boundary_ratio"].get<double>();
    if (!(r > 0.0 && r < 1.0)) bad(where + ": 'boundary_ratio' must be in (0, 1), got " + index["boundary_ratio"].dump());
    plan["boundary_ratio"] = r;
  }
  return plan;
}

json presets() {
  json out = json::object();
  const auto vae = vae_config(8, {1, 2, 2, 4});
  const auto umt5 = family::umt5_encoder_config({32, 8, 4, 80, 2});
  out["tiny"] = preset(
      "The shapes of the tests' wan21-tiny repository (Wan 2.1 T2V): 2 blocks, 2 heads x 16 (inner 32), ffn 64, "
      "text_dim 32; causal VAE base_dim 8, dim_mult [1, 2, 2, 4] (4x temporal, 8x spatial, 16 latent channels); UMT5 "
      "d_model 32 (2 layers); UniPC flow scheduler (shift 3.0).",
      false, transformer_config(2, 16, 64, 2, 32), vae, umt5);
  out["tiny-a14b"] = preset(
      "The shapes of the tests' wan22-tiny repository (Wan 2.2 A14B T2V layout): the tiny transformer twice "
      "(transformer = high noise, transformer_2 = low noise), boundary_ratio 0.875, the same VAE / UMT5 / scheduler.",
      true, transformer_config(2, 16, 64, 2, 32), vae, umt5);
  out["mid"] = preset(
      "A ~30 M-parameter Wan 2.1 style transformer for CPU benchmarks: 8 blocks, 6 heads x 64 (inner 384), ffn 1536, "
      "UMT5 d_model 256 (4 layers), VAE base_dim 32.",
      false, transformer_config(6, 64, 1536, 8, 256), vae_config(32, {1, 2, 4, 4}), family::umt5_encoder_config({256, 32, 8, 640, 4}));
  return out;
}

family::LoraTargets resolve_lora_targets(const json& targets) {
  static const std::vector<std::string> attention = {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                                                     "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0"};
  return family::resolve_lora_targets(targets, {attention, attention});
}

GenerateRequest parse_generate_request(const json& r) {
  GenerateRequest g;
  if (!r.is_object()) bad("generate request: expected a JSON object");
  auto strings = [&](const char* key) {
    std::vector<std::string> out;
    if (!r.contains(key)) return out;
    const auto& v = r[key];
    if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
    if (!v.is_array()) bad(std::string("generate request: '") + key + "' must be a string or an array of strings");
    for (const auto& s : v) {
      if (!s.is_string()) bad(std::string("generate request: '") + key + "' must hold strings");
      out.push_back(s.get<std::string>());
    }
    return out;
  };
  g.prompts = strings("prompts");
  if (g.prompts.empty()) bad("generate request: 'prompts' must hold at least one prompt");
  g.negative_prompts = strings("negative_prompts");
  if (!g.negative_prompts.empty() && g.negative_prompts.size() != g.prompts.size()) {
    if (g.negative_prompts.size() != 1)
      bad("generate request: 'negative_prompts' must hold one prompt or one per prompt");
    g.negative_prompts.assign(g.prompts.size(), g.negative_prompts[0]);
  }
  auto integer = [&](const char* key, std::int64_t& dst, std::int64_t lo) {
    if (!r.contains(key) || r[key].is_null()) return;
    if (!r[key].is_number_integer() || r[key].get<std::int64_t>() < lo)
      bad(std::string("generate request: '") + key + "' must be an integer >= " + std::to_string(lo) + ", got " +
          r[key].dump());
    dst = r[key].get<std::int64_t>();
  };
  auto number = [&](const char* key, double& dst) {
    if (!r.contains(key) || r[key].is_null()) return false;
    if (!r[key].is_number()) bad(std::string("generate request: '") + key + "' must be a number");
    dst = r[key].get<double>();
    return true;
  };
  if (r.contains("seed") && !r["seed"].is_null()) {
    if (!r["seed"].is_number_integer()) bad("generate request: 'seed' must be an integer");
    g.seed = r["seed"].get<std::uint64_t>();
  }
  integer("steps", g.steps, 1);
  integer("height", g.height, 16);
  integer("width", g.width, 16);
  integer("num_frames", g.num_frames, 1);
  integer("max_sequence_length", g.max_sequence_length, 1);
  number("guidance", g.guidance);
  double g2 = 0.0;
  if (number("guidance_2", g2)) g.guidance_2 = g2;
  g.trace = r.value("trace", false);
  return g;
}

std::int64_t valid_num_frames(std::int64_t requested, std::int64_t f) {
  if (f <= 1) return std::max<std::int64_t>(requested, 1);
  const auto n = requested % f == 1 ? requested : requested / f * f + 1;
  return std::max<std::int64_t>(n, 1);
}

}  // namespace yeto::wan
