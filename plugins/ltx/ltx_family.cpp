#include "ltx_family.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace yeto::ltx {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

json ltx_model_index() {
  return {{"_class_name", "LTXPipeline"},
          {"_diffusers_version", "0.33.1"},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"text_encoder", {"transformers", "T5EncoderModel"}},
          {"tokenizer", {"transformers", "T5Tokenizer"}},
          {"transformer", {"diffusers", "LTXVideoTransformer3DModel"}},
          {"vae", {"diffusers", "AutoencoderKLLTXVideo"}}};
}

// The conversion script's scheduler for LTX-Video 0.9.0 / 0.9.1.
json scheduler_config() {
  return {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
          {"base_image_seq_len", 1024},
          {"base_shift", 0.95},
          {"invert_sigmas", false},
          {"max_image_seq_len", 4096},
          {"max_shift", 2.05},
          {"num_train_timesteps", 1000},
          {"shift", 1.0},
          {"shift_terminal", 0.1},
          {"time_shift_type", "exponential"},
          {"use_beta_sigmas", false},
          {"use_dynamic_shifting", true},
          {"use_exponential_sigmas", false},
          {"use_karras_sigmas", false}};
}

json transformer_config(int channels, int layers, int heads, int head_dim, int caption_channels) {
  return {{"_class_name", "LTXVideoTransformer3DModel"},
          {"activation_fn", "gelu-approximate"},
          {"attention_bias", true},
          {"attention_head_dim", head_dim},
          {"attention_out_bias", true},
          {"caption_channels", caption_channels},
          {"cross_attention_dim", heads * head_dim},
          {"in_channels", channels},
          {"norm_elementwise_affine", false},
          {"norm_eps", 1e-06},
          {"num_attention_heads", heads},
          {"num_layers", layers},
          {"out_channels", channels},
          {"patch_size", 1},
          {"patch_size_t", 1},
          {"qk_norm", "rms_norm_across_heads"}};
}

json vae_config(std::vector<int> channels, std::vector<int> layers, int latent_channels) {
  return {{"_class_name", "AutoencoderKLLTXVideo"},
          {"block_out_channels", channels},
          {"decoder_block_out_channels", channels},
          {"decoder_causal", false},
          {"decoder_inject_noise", {false, false, false, false, false}},
          {"decoder_layers_per_block", layers},
          {"decoder_spatio_temporal_scaling", {true, true, true, false}},
          {"down_block_types",
           {"LTXVideoDownBlock3D", "LTXVideoDownBlock3D", "LTXVideoDownBlock3D", "LTXVideoDownBlock3D"}},
          {"downsample_type", {"conv", "conv", "conv", "conv"}},
          {"encoder_causal", true},
          {"in_channels", 3},
          {"latent_channels", latent_channels},
          {"layers_per_block", layers},
          {"out_channels", 3},
          {"patch_size", 4},
          {"patch_size_t", 1},
          {"resnet_norm_eps", 1e-06},
          {"scaling_factor", 1.0},
          {"spatial_compression_ratio", nullptr},
          {"spatio_temporal_scaling", {true, true, true, false}},
          {"temporal_compression_ratio", nullptr},
          {"timestep_conditioning", false},
          {"upsample_factor", {1, 1, 1, 1}},
          {"upsample_residual", {false, false, false, false}}};
}

// T5 v1.1 layout (google/t5-v1_1-xxl keys), as LTX-Video ships its text encoder.
// The published LTX-Video text encoder config also carries output_past and use_cache.
json t5_config(int d_model, int d_kv, int heads, int d_ff, int layers) {
  auto c = family::t5_encoder_config({d_model, d_kv, heads, d_ff, layers});
  c["output_past"] = true;
  c["use_cache"] = true;
  return c;
}

json preset(const std::string& description, const json& transformer, const json& vae, const json& t5) {
  return {{"description", description},
          {"model_index", ltx_model_index()},
          {"components",
           {{"transformer", {{"config", transformer}}},
            {"vae", {{"config", vae}}},
            {"text_encoder", {{"config", t5}}},
            // The conversion script sets the tokenizer's model_max_length to 128.
            {"tokenizer", {{"config", family::t5_tokenizer_config(128)}}},
            {"scheduler", {{"config", scheduler_config()}}}}}};
}

}  // namespace

const std::vector<ComponentSpec>& ltx_components() {
  static const std::vector<ComponentSpec> specs = {
      {"transformer", {"LTXVideoTransformer3DModel"}, false, false},
      {"vae", {"AutoencoderKLLTXVideo"}},
      {"text_encoder", {"T5EncoderModel"}},
      {"tokenizer", {"T5Tokenizer", "T5TokenizerFast"}},
      {"scheduler", {"FlowMatchEulerDiscreteScheduler"}, false, false},
  };
  return specs;
}

json plan_from_model_index(const std::string& model_dir, const json& model_index) {
  return {{"components", family::plan_components(model_dir, model_index, ltx_components(), "ltx",
                                                 "an LTX-Video repository has transformer, vae, text_encoder, "
                                                 "tokenizer and scheduler")},
          {"family", "ltx"}};
}

json presets() {
  json out = json::object();
  out["tiny"] = preset(
      "The shapes of the tests' ltx-tiny repository (LTX-Video 0.9.0 layout): 2 blocks, 2 heads x 16 (inner 32), "
      "16 latent channels; VAE [8, 8, 16, 16] with patch 4 (spatial compression 32, temporal 8); T5 d_model 32 "
      "(2 layers). About 53 k transformer parameters.",
      transformer_config(16, 2, 2, 16, 32), vae_config({8, 8, 16, 16}, {2, 1, 1, 1, 2}, 16),
      t5_config(32, 8, 4, 80, 2));
  out["small"] = preset(
      "A small LTX-Video 0.9.0 layout for CPU benchmarks and smoke training: 4 blocks, 4 heads x 32 (inner 128), 32 "
      "latent channels (about 1 M transformer parameters); VAE [32, 64, 64, 64] (compression 32 x 8); T5 d_model 64 "
      "(2 layers).",
      transformer_config(32, 4, 4, 32, 64), vae_config({32, 64, 64, 64}, {1, 1, 1, 1, 1}, 32),
      t5_config(64, 16, 4, 128, 2));
  return out;
}

LoraTargets resolve_lora_targets(const json& targets) {
  const std::vector<std::string> attention = {"to_q", "to_k", "to_v", "to_out.0"};
  return family::resolve_lora_targets(targets, {attention, attention});
}

double calculate_shift(double seq_len, double base_seq_len, double max_seq_len, double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double b = base_shift - m * base_seq_len;
  return seq_len * m + b;
}

std::int64_t latent_frames(std::int64_t frames, std::int64_t ratio) { return (frames - 1) / ratio + 1; }

std::int64_t decoded_frames(std::int64_t frames, std::int64_t ratio) {
  return 1 + ratio * (latent_frames(frames, ratio) - 1);
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  const family::RequestReader in(j);
  r.prompts = in.strings("prompts");
  if (in.has("negative_prompts")) {
    r.negative_prompts = in.strings("negative_prompts");
    if (r.negative_prompts.size() != r.prompts.size())
      bad("generate request: 'negative_prompts' has " + std::to_string(r.negative_prompts.size()) +
          " entries for " + std::to_string(r.prompts.size()) + " prompts");
  }
  r.seed = in.seed(r.seed);
  r.steps = in.integer("steps", r.steps, 1);
  r.height = in.integer("height", r.height, 1);
  r.width = in.integer("width", r.width, 1);
  r.num_frames = in.integer("num_frames", r.num_frames, 1);
  r.max_sequence_length = in.integer("max_sequence_length", r.max_sequence_length, 1);
  r.guidance = in.number("guidance", r.guidance);
  r.frame_rate = in.number("fps", in.number("frame_rate", r.frame_rate));
  if (!(r.frame_rate > 0)) bad("generate request: 'fps' (the frame rate) must be positive");
  r.decode_timestep = in.number("decode_timestep", r.decode_timestep);
  if (in.has("decode_noise_scale")) r.decode_noise_scale = in.number("decode_noise_scale", 0.0);
  r.trace = in.boolean("trace", r.trace);
  return r;
}

std::string resolve_precision(const std::string& precision, const std::string& device) {
  return family::resolve_precision(precision, device);
}

}  // namespace yeto::ltx
