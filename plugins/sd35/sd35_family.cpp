#include "sd35_family.hpp"

#include <algorithm>
#include <stdexcept>

namespace yeto::sd35 {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json sd35_model_index() {
  return {{"_class_name", "StableDiffusion3Pipeline"},
          {"_diffusers_version", "0.33.1"},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"text_encoder", {"transformers", "CLIPTextModelWithProjection"}},
          {"text_encoder_2", {"transformers", "CLIPTextModelWithProjection"}},
          {"text_encoder_3", {"transformers", "T5EncoderModel"}},
          {"tokenizer", {"transformers", "CLIPTokenizer"}},
          {"tokenizer_2", {"transformers", "CLIPTokenizer"}},
          {"tokenizer_3", {"transformers", "T5TokenizerFast"}},
          {"transformer", {"diffusers", "SD3Transformer2DModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

// The key set of the SD3.5 scheduler_config.json: everything else takes its default.
json scheduler_config() {
  return {{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"num_train_timesteps", 1000}, {"shift", 3.0}};
}

json transformer_config(int sample_size, int layers, int heads, int head_dim, int joint_dim, int pooled_dim,
                        int pos_max, std::vector<int> dual) {
  return {{"_class_name", "SD3Transformer2DModel"},
          {"attention_head_dim", head_dim},
          {"caption_projection_dim", heads * head_dim},
          {"dual_attention_layers", dual},
          {"in_channels", 16},
          {"joint_attention_dim", joint_dim},
          {"num_attention_heads", heads},
          {"num_layers", layers},
          {"out_channels", 16},
          {"patch_size", 2},
          {"pooled_projection_dim", pooled_dim},
          {"pos_embed_max_size", pos_max},
          {"qk_norm", "rms_norm"},
          {"sample_size", sample_size}};
}

json vae_config(std::vector<int> channels, int groups, int sample_size) {
  const std::vector<std::string> down(channels.size(), "DownEncoderBlock2D"), up(channels.size(), "UpDecoderBlock2D");
  return {{"_class_name", "AutoencoderKL"},
          {"act_fn", "silu"},
          {"block_out_channels", channels},
          {"down_block_types", down},
          {"force_upcast", true},
          {"in_channels", 3},
          {"latent_channels", 16},
          {"latents_mean", nullptr},
          {"latents_std", nullptr},
          {"layers_per_block", 2},
          {"mid_block_add_attention", true},
          {"norm_num_groups", groups},
          {"out_channels", 3},
          {"sample_size", sample_size},
          {"scaling_factor", 1.5305},
          {"shift_factor", 0.0609},
          {"up_block_types", up},
          {"use_post_quant_conv", false},
          {"use_quant_conv", false}};
}

// CLIP-L style (quick_gelu) or CLIP-G style (exact gelu) text tower with a projection.
json clip_config(int hidden, int layers, int heads, int intermediate, const char* act) {
  return family::clip_text_config({hidden, layers, heads, intermediate, "CLIPTextModelWithProjection", act});
}

json t5_config(int d_model, int d_kv, int heads, int d_ff, int layers) {
  return family::t5_encoder_config({d_model, d_kv, heads, d_ff, layers});
}

json preset(const std::string& description, const json& transformer, const json& vae, const json& clip_l,
            const json& clip_g, const json& t5) {
  return {{"description", description},
          {"model_index", sd35_model_index()},
          {"components",
           {{"transformer", {{"config", transformer}}},
            {"vae", {{"config", vae}}},
            {"text_encoder", {{"config", clip_l}}},
            {"text_encoder_2", {{"config", clip_g}}},
            {"text_encoder_3", {{"config", t5}}},
            {"tokenizer", {{"config", family::clip_tokenizer_config("<|endoftext|>")}}},
            // SD3's second CLIP tokenizer pads with "!" (vocabulary id 0), the first with <|endoftext|>.
            {"tokenizer_2", {{"config", family::clip_tokenizer_config("!")}}},
            {"tokenizer_3", {{"config", family::t5_tokenizer_config()}}},
            {"scheduler", {{"config", scheduler_config()}}}}}};
}

}  // namespace

const std::vector<ComponentSpec>& sd35_components() {
  static const std::vector<ComponentSpec> specs = {
      {"transformer", {"SD3Transformer2DModel"}, false, false},
      {"vae", {"AutoencoderKL"}},
      {"text_encoder", {"CLIPTextModelWithProjection"}},
      {"text_encoder_2", {"CLIPTextModelWithProjection"}},
      {"text_encoder_3", {"T5EncoderModel"}, true},
      {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
      {"tokenizer_2", {"CLIPTokenizer", "CLIPTokenizerFast"}},
      {"tokenizer_3", {"T5Tokenizer", "T5TokenizerFast"}, true},
      {"scheduler", {"FlowMatchEulerDiscreteScheduler"}, false, false},
  };
  return specs;
}

json plan_from_model_index(const std::string& model_dir, const json& model_index) {
  const std::string where = model_dir + "/model_index.json";
  if (!model_index.is_object()) bad(where + ": expected a JSON object");
  json components = family::plan_components(
      model_dir, model_index, sd35_components(), "sd35",
      "an SD3 / SD3.5 repository has transformer, vae, text_encoder, text_encoder_2, tokenizer, tokenizer_2 and "
      "scheduler (text_encoder_3 and tokenizer_3 optional)");
  auto absent = [&](const char* name) {
    if (!model_index.contains(name)) return true;
    const auto& e = model_index.at(name);
    return e.is_null() || (e.is_array() && e.size() == 2 && e[0].is_null() && e[1].is_null());
  };
  if (components.contains("text_encoder_3") != components.contains("tokenizer_3"))
    bad(where + ": text_encoder_3 and tokenizer_3 come together (T5 and its tokenizer); this repository has only " +
        std::string(components.contains("text_encoder_3") ? "text_encoder_3" : "tokenizer_3"));
  // SD3.5's IP-adapter parts are not used by text-to-image training or sampling.
  for (const char* extra : {"image_encoder", "feature_extractor"})
    if (model_index.contains(extra) && !absent(extra)) components[extra] = nullptr;
  return {{"components", components}, {"family", "sd35"}};
}

json presets() {
  json out = json::object();
  out["tiny"] = preset(
      "The shapes of the tests' sd35-tiny repository (SD3.5-medium style): 4 joint blocks, 2 heads x 8 (inner 16), "
      "dual attention in blocks 0 and 1, RMS q/k norm, pos_embed_max_size 6 (latents up to 12x12); VAE [8, 16, 16, "
      "16] (scale factor 8, 16 latent channels); CLIP-L hidden 8 (2 layers), CLIP-G hidden 12 (3 layers, exact "
      "GELU), T5 d_model 32 (2 layers). About 47 k transformer parameters.",
      transformer_config(8, 4, 2, 8, 32, 20, 6, {0, 1}), vae_config({8, 16, 16, 16}, 4, 64),
      clip_config(8, 2, 2, 32, "quick_gelu"), clip_config(12, 3, 3, 48, "gelu"), t5_config(32, 8, 4, 80, 2));
  out["mid"] = preset(
      "A mid-size SD3.5-medium layout for CPU benchmarks and smoke training: 6 joint blocks, 4 heads x 64 (inner "
      "256), dual attention in blocks 0-2, RMS q/k norm, pos_embed_max_size 32 (latents up to 64x64, 512 px); about "
      "15 M transformer parameters; VAE [32, 64, 128, 128]; CLIP-L hidden 64 (4 layers), CLIP-G hidden 64 (4 layers), "
      "T5 d_model 256 (4 layers).",
      transformer_config(32, 6, 4, 64, 256, 128, 32, {0, 1, 2}), vae_config({32, 64, 128, 128}, 32, 256),
      clip_config(64, 4, 4, 256, "quick_gelu"), clip_config(64, 4, 4, 256, "gelu"), t5_config(256, 64, 4, 640, 4));
  return out;
}

LoraTargets resolve_lora_targets(const json& targets) {
  return family::resolve_lora_targets(
      targets, {{"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                 "attn.add_v_proj", "attn.to_add_out"},
                {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"}});
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  const family::RequestReader in(j);
  r.prompts = in.strings("prompts");
  if (in.has("negative_prompts")) {
    r.negative_prompts = in.strings("negative_prompts");
    if (r.negative_prompts.size() != r.prompts.size())
      bad("generate request: 'negative_prompts' has " + std::to_string(r.negative_prompts.size()) +
          " entries but 'prompts' has " + std::to_string(r.prompts.size()));
  }
  r.seed = in.seed(r.seed);
  r.steps = in.integer("steps", r.steps, 1);
  r.height = in.integer("height", r.height, 1);
  r.width = in.integer("width", r.width, 1);
  r.max_sequence_length = in.integer("max_sequence_length", r.max_sequence_length, 1);
  if (r.max_sequence_length > 512)
    bad("generate request: 'max_sequence_length' cannot be greater than 512 (the SD3 pipelines' T5 limit), got " +
        std::to_string(r.max_sequence_length));
  r.guidance = in.number("guidance", r.guidance);
  r.trace = in.boolean("trace", r.trace);
  return r;
}

std::string resolve_precision(const std::string& precision, const std::string& device) {
  return family::resolve_precision(precision, device);
}

}  // namespace yeto::sd35
