#include "flux_family.hpp"

#include <algorithm>
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
  return {{"architectures", {"CLIPTextModel"}},
          {"attention_dropout", 0.0},
          {"bos_token_id", 0},
          {"dropout", 0.0},
          {"eos_token_id", 2},
          {"hidden_act", "quick_gelu"},
          {"hidden_size", hidden},
          {"initializer_factor", 1.0},
          {"initializer_range", 0.02},
          {"intermediate_size", intermediate},
          {"layer_norm_eps", 1e-05},
          {"max_position_embeddings", 77},
          {"model_type", "clip_text_model"},
          {"num_attention_heads", heads},
          {"num_hidden_layers", layers},
          {"pad_token_id", 1},
          {"projection_dim", hidden},
          {"torch_dtype", "float32"},
          {"vocab_size", 49408}};
}

json t5_config(int d_model, int d_kv, int heads, int d_ff, int layers) {
  return {{"architectures", {"T5EncoderModel"}},
          {"classifier_dropout", 0.0},
          {"d_ff", d_ff},
          {"d_kv", d_kv},
          {"d_model", d_model},
          {"decoder_start_token_id", 0},
          {"dense_act_fn", "gelu_new"},
          {"dropout_rate", 0.1},
          {"eos_token_id", 1},
          {"feed_forward_proj", "gated-gelu"},
          {"initializer_factor", 1.0},
          {"is_encoder_decoder", true},
          {"is_gated_act", true},
          {"layer_norm_epsilon", 1e-06},
          {"model_type", "t5"},
          {"num_decoder_layers", layers},
          {"num_heads", heads},
          {"num_layers", layers},
          {"pad_token_id", 0},
          {"relative_attention_max_distance", 128},
          {"relative_attention_num_buckets", 32},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float32"},
          {"vocab_size", 640}};
}

json clip_tokenizer_config() {
  return {{"tokenizer_class", "CLIPTokenizer"}, {"model_max_length", 77},     {"bos_token", "<|startoftext|>"},
          {"eos_token", "<|endoftext|>"},       {"pad_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
          {"do_lower_case", true}};
}

json t5_tokenizer_config() {
  return {{"tokenizer_class", "T5Tokenizer"}, {"model_max_length", 512}, {"eos_token", "</s>"}, {"pad_token", "<pad>"},
          {"unk_token", "<unk>"},           {"extra_ids", 100},        {"legacy", true}};
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
            {"tokenizer", {{"config", clip_tokenizer_config()}}},
            {"tokenizer_2", {{"config", t5_tokenizer_config()}}},
            {"scheduler", {{"config", scheduler_config()}}}}}};
}

}  // namespace

const std::vector<ComponentSpec>& flux_components() {
  static const std::vector<ComponentSpec> specs = {
      {"transformer", {"FluxTransformer2DModel"}},
      {"vae", {"AutoencoderKL"}},
      {"text_encoder", {"CLIPTextModel"}},
      {"text_encoder_2", {"T5EncoderModel"}},
      {"tokenizer", {"CLIPTokenizer", "CLIPTokenizerFast"}},
      {"tokenizer_2", {"T5Tokenizer", "T5TokenizerFast"}},
      {"scheduler", {"FlowMatchEulerDiscreteScheduler"}},
  };
  return specs;
}

json plan_from_model_index(const std::string& model_dir, const json& model_index) {
  const std::string where = model_dir + "/model_index.json";
  if (!model_index.is_object()) bad(where + ": expected a JSON object");
  json components = json::object();
  for (const auto& spec : flux_components()) {
    if (!model_index.contains(spec.name))
      bad(where + ": no '" + spec.name + "' component; a FLUX.1 repository has transformer, vae, text_encoder, "
                                         "text_encoder_2, tokenizer, tokenizer_2 and scheduler");
    const auto& entry = model_index.at(spec.name);
    if (!entry.is_array() || entry.size() != 2 || !entry[1].is_string())
      bad(where + ": '" + spec.name + "' must be a [library, class] pair, got " + entry.dump());
    const auto cls = entry[1].get<std::string>();
    if (std::find(spec.classes.begin(), spec.classes.end(), cls) == spec.classes.end()) {
      std::string expected;
      for (const auto& c : spec.classes) expected += (expected.empty() ? "" : " or ") + c;
      bad(where + ": '" + spec.name + "' is " + cls + "; the flux plugin expects " + expected);
    }
    components[spec.name] = {{"class", cls}, {"dir", model_dir + "/" + spec.name}};
  }
  return {{"components", components}, {"family", "flux"}};
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
  LoraTargets out;
  std::vector<std::string> items;
  if (targets.is_null()) {
    items = {"auto"};
  } else if (targets.is_string()) {
    items = {targets.get<std::string>()};
  } else if (targets.is_array()) {
    for (const auto& t : targets) {
      if (!t.is_string()) bad("lora.targets: every entry must be a string, got " + t.dump());
      items.push_back(t.get<std::string>());
    }
  } else {
    bad("lora.targets: expected auto, attention, all-linear or a list of module patterns, got " + targets.dump());
  }
  if (items.empty()) bad("lora.targets: the list is empty; use auto, attention, all-linear or module patterns");
  if (items.size() == 1 && items[0] == "auto") {
    out.patterns = {"attn.to_q",     "attn.to_k",      "attn.to_v",      "attn.to_out.0",
                    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
                    "ff.net.0.proj", "ff.net.2",       "ff_context.net.0.proj", "ff_context.net.2"};
  } else if (items.size() == 1 && items[0] == "attention") {
    out.patterns = {"attn.to_q",       "attn.to_k",       "attn.to_v",       "attn.to_out.0",
                    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"};
  } else if (items.size() == 1 && items[0] == "all-linear") {
    out.all_linear = true;
  } else {
    for (const auto& i : items)
      if (i == "auto" || i == "attention" || i == "all-linear")
        bad("lora.targets: '" + i + "' cannot be combined with other entries");
    out.patterns = items;
  }
  return out;
}

std::vector<double> linspace(double start, double stop, std::int64_t num) {
  if (num < 0) bad("linspace: num must be non-negative");
  std::vector<double> y(static_cast<std::size_t>(num));
  const std::int64_t div = num - 1;
  const double delta = stop - start;
  for (std::int64_t i = 0; i < num; ++i) {
    double v = static_cast<double>(i);
    if (div > 0) {
      const double step = delta / static_cast<double>(div);
      v = step == 0.0 ? v / static_cast<double>(div) * delta : v * step;
    } else {
      v = v * delta;
    }
    y[static_cast<std::size_t>(i)] = v + start;
  }
  if (num > 1) y.back() = stop;
  return y;
}

GenerateRequest parse_generate_request(const json& j) {
  GenerateRequest r;
  if (!j.is_object()) bad("generate request: expected a JSON object");
  if (!j.contains("prompts") || !j["prompts"].is_array() || j["prompts"].empty())
    bad("generate request: 'prompts' must be a non-empty array of strings");
  for (const auto& p : j["prompts"]) {
    if (!p.is_string()) bad("generate request: 'prompts' must hold strings, got " + p.dump());
    r.prompts.push_back(p.get<std::string>());
  }
  auto get_int = [&](const char* key, std::int64_t fallback, std::int64_t min) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number_integer()) bad(std::string("generate request: '") + key + "' must be an integer");
    const auto v = j[key].get<std::int64_t>();
    if (v < min) bad(std::string("generate request: '") + key + "' must be at least " + std::to_string(min));
    return v;
  };
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_unsigned() && !(j["seed"].is_number_integer() && j["seed"].get<std::int64_t>() >= 0))
      bad("generate request: 'seed' must be a non-negative integer");
    r.seed = j["seed"].get<std::uint64_t>();
  }
  r.steps = get_int("steps", r.steps, 1);
  r.height = get_int("height", r.height, 16);
  r.width = get_int("width", r.width, 16);
  r.max_sequence_length = get_int("max_sequence_length", r.max_sequence_length, 1);
  if (r.max_sequence_length > 512)
    bad("generate request: 'max_sequence_length' cannot be greater than 512 (FLUX.1's T5 limit), got " +
        std::to_string(r.max_sequence_length));
  if (j.contains("guidance") && !j["guidance"].is_null()) {
    if (!j["guidance"].is_number()) bad("generate request: 'guidance' must be a number");
    r.guidance = j["guidance"].get<double>();
  }
  if (j.contains("trace") && !j["trace"].is_null()) {
    if (!j["trace"].is_boolean()) bad("generate request: 'trace' must be a boolean");
    r.trace = j["trace"].get<bool>();
  }
  return r;
}

std::string resolve_precision(const std::string& precision, const std::string& device) {
  if (precision == "fp32" || precision == "bf16" || precision == "fp16") return precision;
  if (precision.empty() || precision == "auto") return device.rfind("cuda", 0) == 0 ? "bf16" : "fp32";
  bad("precision: expected auto, fp32, bf16 or fp16, got '" + precision + "'");
}

}  // namespace yeto::flux
