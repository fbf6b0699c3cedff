#include "pixart_family.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::pixart {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json pixart_model_index() {
  return {{"_class_name", "PixArtAlphaPipeline"},
          {"_diffusers_version", "0.33.1"},
          {"scheduler", {"diffusers", "DPMSolverMultistepScheduler"}},
          {"text_encoder", {"transformers", "T5EncoderModel"}},
          {"tokenizer", {"transformers", "T5Tokenizer"}},
          {"transformer", {"diffusers", "PixArtTransformer2DModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

// DPMSolverMultistepScheduler() defaults, as the PixArt conversion script saves them. Its
// "lambda_min_clipped": -Infinity is left out: JSON has no infinity, and an absent key is the
// same default (-inf) for Diffusers and for the host.
json scheduler_config() {
  return {{"_class_name", "DPMSolverMultistepScheduler"},
          {"algorithm_type", "dpmsolver++"},
          {"beta_end", 0.02},
          {"beta_schedule", "linear"},
          {"beta_start", 0.0001},
          {"dynamic_thresholding_ratio", 0.995},
          {"euler_at_final", false},
          {"final_sigmas_type", "zero"},
          {"flow_shift", 1.0},
          {"lower_order_final", true},
          {"num_train_timesteps", 1000},
          {"prediction_type", "epsilon"},
          {"rescale_betas_zero_snr", false},
          {"sample_max_value", 1.0},
          {"solver_order", 2},
          {"solver_type", "midpoint"},
          {"steps_offset", 0},
          {"thresholding", false},
          {"timestep_spacing", "linspace"},
          {"trained_betas", nullptr},
          {"use_beta_sigmas", false},
          {"use_exponential_sigmas", false},
          {"use_flow_sigmas", false},
          {"use_karras_sigmas", false},
          {"use_lu_lambdas", false},
          {"variance_type", nullptr}};
}

json transformer_config(int heads, int head_dim, int layers, int caption_channels, int sample_size,
                        const json& use_additional_conditions) {
  return {{"_class_name", "PixArtTransformer2DModel"},
          {"activation_fn", "gelu-approximate"},
          {"attention_bias", true},
          {"attention_head_dim", head_dim},
          {"attention_type", "default"},
          {"caption_channels", caption_channels},
          {"cross_attention_dim", heads * head_dim},
          {"dropout", 0.0},
          {"in_channels", 4},
          {"interpolation_scale", nullptr},
          {"norm_elementwise_affine", false},
          {"norm_eps", 1e-06},
          {"norm_num_groups", 32},
          {"norm_type", "ada_norm_single"},
          {"num_attention_heads", heads},
          {"num_embeds_ada_norm", 1000},
          {"num_layers", layers},
          {"out_channels", 8},
          {"patch_size", 2},
          {"sample_size", sample_size},
          {"upcast_attention", false},
          {"use_additional_conditions", use_additional_conditions}};
}

json vae_config() {
  const std::vector<std::string> down(4, "DownEncoderBlock2D"), up(4, "UpDecoderBlock2D");
  return {{"_class_name", "AutoencoderKL"},
          {"act_fn", "silu"},
          {"block_out_channels", {8, 16, 16, 16}},
          {"down_block_types", down},
          {"force_upcast", true},
          {"in_channels", 3},
          {"latent_channels", 4},
          {"latents_mean", nullptr},
          {"latents_std", nullptr},
          {"layers_per_block", 2},
          {"mid_block_add_attention", true},
          {"norm_num_groups", 4},
          {"out_channels", 3},
          {"sample_size", 64},
          {"scaling_factor", 0.18215},
          {"shift_factor", nullptr},
          {"up_block_types", up},
          {"use_post_quant_conv", true},
          {"use_quant_conv", true}};
}

json t5_config() { return family::t5_encoder_config({40, 10, 4, 96, 2}); }

json preset(const std::string& description, const json& transformer) {
  return {{"description", description},
          {"model_index", pixart_model_index()},
          {"components",
           {{"transformer", {{"config", transformer}}},
            {"vae", {{"config", vae_config()}}},
            {"text_encoder", {{"config", t5_config()}}},
            {"tokenizer", {{"config", family::t5_tokenizer_config()}}},
            {"scheduler", {{"config", scheduler_config()}}}}}};
}

bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

}  // namespace

const std::vector<ComponentSpec>& pixart_components() {
  static const std::vector<ComponentSpec> specs = {
      {"transformer", {"PixArtTransformer2DModel", "Transformer2DModel"}, false, false},
      {"vae", {"AutoencoderKL"}},
      {"text_encoder", {"T5EncoderModel"}},
      {"tokenizer", {"T5Tokenizer", "T5TokenizerFast"}},
      {"scheduler", {"DPMSolverMultistepScheduler", "UniPCMultistepScheduler"}, false, false},
  };
  return specs;
}

std::int64_t default_max_sequence_length(const std::string& pipeline_class, const std::string& where) {
  if (pipeline_class == "PixArtAlphaPipeline") return 120;
  if (pipeline_class == "PixArtSigmaPipeline") return 300;
  bad(where + ": _class_name is '" + pipeline_class +
      "'; the pixart plugin serves PixArtAlphaPipeline and PixArtSigmaPipeline repositories");
}

json plan_from_model_index(const std::string& model_dir, const json& model_index, const json& transformer_config) {
  const std::string where = model_dir + "/model_index.json";
  if (!model_index.is_object()) bad(where + ": expected a JSON object");
  default_max_sequence_length(model_index.value("_class_name", std::string()), where);
  json components = family::plan_components(model_dir, model_index, pixart_components(), "pixart",
                                            "a PixArt repository has transformer, vae, text_encoder, tokenizer and "
                                            "scheduler");
  if (components["transformer"]["class"] == "Transformer2DModel") {
    // The PixArt-XL-2 snapshots' legacy class: Diffusers loads it as PixArtTransformer2DModel
    // when the config has norm_type ada_norm_single.
    const auto nt = transformer_config.is_object() ? transformer_config.value("norm_type", std::string()) : "";
    if (nt != "ada_norm_single")
      bad(model_dir + "/transformer/config.json: a Transformer2DModel is served as PixArtTransformer2DModel only "
                      "with norm_type ada_norm_single, got '" + nt + "'");
    components["transformer"]["class"] = "PixArtTransformer2DModel";
  }
  return {{"components", components}, {"family", "pixart"}};
}

json presets() {
  json out = json::object();
  out["tiny"] = preset(
      "The shapes of the tests' pixart-tiny repository (PixArt-XL-2-512x512 layout, no micro-conditions): 2 blocks, "
      "2 heads x 8 (inner 16), patch 2, sample_size 8 (64 px images), learned sigma (8 output channels); VAE "
      "[8, 16, 16, 16] with quant convs (4 latent channels, scaling 0.18215); T5 d_model 40 (2 layers).",
      transformer_config(2, 8, 2, 40, 8, nullptr));
  out["tiny-ms"] = preset(
      "As tiny, with the PixArt-XL-2-1024-MS micro-conditions (use_additional_conditions: resolution and aspect-ratio "
      "embeddings in adaln_single) and 2 heads x 12 (inner 24, divisible by 3 as those embeddings need).",
      transformer_config(2, 12, 2, 40, 8, true));
  return out;
}

LoraTargets resolve_lora_targets(const json& targets) {
  const std::vector<std::string> attention = {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                                              "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0"};
  auto with_ff = attention;
  with_ff.insert(with_ff.end(), {"ff.net.0.proj", "ff.net.2"});
  return family::resolve_lora_targets(targets, {with_ff, attention});
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  const family::RequestReader in(j);
  r.prompts = in.strings("prompts");
  if (in.has("negative_prompts")) {
    r.negative_prompts = in.strings("negative_prompts");
    if (r.negative_prompts.size() == 1 && r.prompts.size() > 1)
      r.negative_prompts.assign(r.prompts.size(), r.negative_prompts[0]);
    if (r.negative_prompts.size() != r.prompts.size())
      bad("generate request: 'negative_prompts' must have one entry or one per prompt (" +
          std::to_string(r.prompts.size()) + "), got " + std::to_string(r.negative_prompts.size()));
  } else {
    r.negative_prompts.assign(r.prompts.size(), "");
  }
  r.seed = in.seed(r.seed);
  r.steps = in.integer("steps", r.steps, 1);
  r.height = in.integer("height", r.height, 1);
  r.width = in.integer("width", r.width, 1);
  r.max_sequence_length = in.integer("max_sequence_length", r.max_sequence_length, 1);
  r.guidance = in.number("guidance", r.guidance);
  r.trace = in.boolean("trace", r.trace);
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

std::string resolve_precision(const std::string& precision, const std::string& device) {
  return family::resolve_precision(precision, device);
}

}  // namespace yeto::pixart
