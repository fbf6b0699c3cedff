#include "flux_family.hpp"

#include <cmath>
#include <stdexcept>

namespace yeto::flux {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json flux_model_index() {
  return {{"_class_name", "FluxPipeline"},
          {"_diffusers_version", "0.33.1"},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"text_encoder", {"transformers", "CLIPTextModel"}},
          {"text_encoder_2", {"transformers", "T5EncoderModel"}},
          {"tokenizer", {"transformers", "CLIPTokenizer"}},
          {"tokenizer_2", {"transformers", "T5TokenizerFast"}},
          {"transformer", {"diffusers", "FluxTransformer2DModel"}},
          {"vae", {"diffusers", "AutoencoderKL"}}};
}

json scheduler_config() {
  return {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
          {"base_image_seq_len", 256},
          {"base_shift", 0.5},
          {"invert_sigmas", false},
          {"max_image_seq_len", 4096},
          {"max_shift", 1.15},
          {"num_train_timesteps", 1000},
          {"shift", 3.0},
          {"shift_terminal", nullptr},
          {"time_shift_type", "exponential"},
          {"use_beta_sigmas", false},
          {"use_dynamic_shifting", true},
          {"use_exponential_sigmas", false},
          {"use_karras_sigmas", false}};
}

json transformer_config(int layers, int single_layers, int heads, int head_dim, std::vector<int> rope, int joint_dim,
                        int pooled_dim) {
  return {{"_class_name", "FluxTransformer2DModel"},
          {"attention_head_dim", head_dim},
          {"axes_dims_rope", rope},
          {"guidance_embeds", true},
          {"in_channels", 64},
          {"joint_attention_dim", joint_dim},
          {"num_attention_heads", heads},
          {"num_layers", layers},
          {"num_single_layers", single_layers},
          {"out_channels", nullptr},
          {"patch_size", 1},
          {"pooled_projection_dim", pooled_dim}};
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
          {"scaling_factor", 0.3611},
          {"shift_factor", 0.1159},
          {"up_block_types", up},
          {"use_post_quant_conv", false},
          {"use_quant_conv", false}};
}

json clip_config(int hidden, int layers, int heads, int intermediate) {
  return family::clip_text_config({hidden, layers, heads, intermediate});
}

json t5_config(int d_model, int d_kv, int heads, int d_ff, int layers) {
  return family::t5_encoder_config({d_model, d_kv, heads, d_ff, layers});
}



json preset(const std::string& description, const json& transformer, const json& vae, const json& clip,
            const json& t5) {
  return {{"description", description},
          {"model_index", flux_model_index()},
          {"components",
           {{"transformer", {{"config", transformer}}},
            {"vae", {{"config", vae}}},
            {"text_encoder", {{"config", clip}}},
            {"text_encoder_2", {{"config", t5}}},
            {"tokenizer", {{"config", family::clip_tokenizer_config()}}},
            {"tokenizer_2", {{"config", family::t5_tokenizer_config()}}},
            {"scheduler", {{"config", scheduler_config()}}}}}};
}

}  // namespace

const std::vector<ComponentSpec>& flux_components() {
  static const std::vector<ComponentSpec> specs = {
      {"transformer", {"FluxTransformer2DModel"}, false, false},
      {"vae", {"AutoencoderKL"}},
      {"text_encoder", {"CLIPTextModel"}},
      {"text_encoder_2", {"T5EncoderModel"}},
      {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
      {"tokenizer_2", {"T5Tokenizer", "T5TokenizerFast"}},
      {"scheduler", {"FlowMatchEulerDiscreteScheduler"}, false, false},
  };
  return specs;
}

json plan_from_model_index(const std::string& model_dir, const json& model_index) {
  return {{"components", family::plan_components(model_dir, model_index, flux_components(), "flux",
                                                 "a FLUX.1 repository has transformer, vae, text_encoder, "
                                                 "text_encoder_2, tokenizer, tokenizer_2 and scheduler")},
          {"family", "flux"}};
}

json presets() {
  json out = json::object();
  out["tiny"] = preset(
      "The shapes of the tests' flux-tiny repository: 2 double + 2 single blocks, 2 heads x 16 (inner 32), "
      "rope [4, 6, 6], guidance-distilled; VAE [8, 16, 16, 16] (scale factor 8, 16 latent channels); CLIP hidden 24 "
      "(2 layers); T5 d_model 32 (2 layers). About 0.2 M transformer parameters.",
      transformer_config(2, 2, 2, 16, {4, 6, 6}, 32, 24), vae_config({8, 16, 16, 16}, 4, 64), clip_config(24, 2, 3, 96),
      t5_config(32, 8, 4, 80, 2));
  out["mid"] = preset(
      "A mid-size FLUX.1-dev layout for CPU benchmarks and smoke training: 4 double + 8 single blocks, 6 heads x 64 "
      "(inner 384), rope [8, 28, 28], guidance-distilled (about 40 M transformer parameters); VAE [32, 64, 128, 128] "
      "(scale factor 8); CLIP hidden 128 (4 layers); T5 d_model 256 (4 layers).",
      transformer_config(4, 8, 6, 64, {8, 28, 28}, 256, 128), vae_config({32, 64, 128, 128}, 32, 256),
      clip_config(128, 4, 4, 512), t5_config(256, 64, 4, 640, 4));
  return out;
}

LoraTargets resolve_lora_targets(const json& targets) {
  const std::vector<std::string> attention = {"attn.to_q",       "attn.to_k",       "attn.to_v",
                                              "attn.to_out.0",   "attn.add_q_proj", "attn.add_k_proj",
                                              "attn.add_v_proj", "attn.to_add_out"};
  auto with_ff = attention;
  with_ff.insert(with_ff.end(), {"ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"});
  return family::resolve_lora_targets(targets, {with_ff, attention});
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  const family::RequestReader in(j);
  r.prompts = in.strings("prompts");
  r.seed = in.seed(r.seed);
  r.steps = in.integer("steps", r.steps, 1);
  r.height = in.integer("height", r.height, 16);
  r.width = in.integer("width", r.width, 16);
  r.max_sequence_length = in.integer("max_sequence_length", r.max_sequence_length, 1);
  if (r.max_sequence_length > 512)
    bad("generate request: 'max_sequence_length' cannot be greater than 512 (FLUX.1's T5 limit), got " +
        std::to_string(r.max_sequence_length));
  r.guidance = in.number("guidance", r.guidance);
  r.trace = in.boolean("trace", r.trace);
  return r;
}

std::string resolve_precision(const std::string& precision, const std::string& device) {
  return family::resolve_precision(precision, device);
}

}  // namespace yeto::flux
