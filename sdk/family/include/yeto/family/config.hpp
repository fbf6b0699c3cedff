// The torch-free half of the family kit (yeto_family): what every Diffusers family plugin's
// "family" code repeats when it plans a repository, writes `init-model` presets and reads LoRA
// targets. Errors are std::invalid_argument naming the key; a plugin turns them into a status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::family {

// A component's config.json as its class reads it: every error is std::invalid_argument
// "<where>: '<key>' must be an integer, got 3.5" (where: e.g. "FluxTransformer2DModel config").
// A key that is absent or null gives the fallback; present() tells them apart.
class ConfigReader {
 public:
  // Throws "<where>: expected a JSON object" for anything else.
  ConfigReader(const nlohmann::json& config, std::string where);
  const nlohmann::json& config() const { return j_; }
  bool present(const char* key) const;
  std::int64_t integer(const char* key, std::int64_t fallback) const;
  double number(const char* key, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  std::vector<std::int64_t> integers(const char* key, const std::vector<std::int64_t>& fallback) const;
  std::vector<double> numbers(const char* key, const std::vector<double>& fallback) const;
  std::vector<bool> booleans(const char* key, const std::vector<bool>& fallback) const;
  std::vector<std::string> strings(const char* key, const std::vector<std::string>& fallback) const;
  // Fails "'<key>' is required<why>" when the key is absent or null.
  void require(const char* key, const std::string& why = "") const;
  // Throws "<where>: '<key>' <what>".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  template <class T>
  std::vector<T> list(const char* key, const std::vector<T>& fallback, bool (nlohmann::json::*is)() const noexcept,
                      const char* kind) const;
  nlohmann::json j_;
  std::string where_;
};

// Throws std::invalid_argument(what): the kit's and a family's torch-free refusals.
[[noreturn]] void invalid(const std::string& what);

// LoRA targets resolved from prepare's `lora.targets`: module patterns for nn::add_lora, or
// all_linear = true for every LoRA-capable layer (the plugin leaves out its output projection).
struct LoraTargets {
  std::vector<std::string> patterns;
  bool all_linear = false;
};

// The patterns a family gives the two named target sets.
struct LoraTargetSets {
  std::vector<std::string> auto_patterns;       // "auto" (also what a missing/null value means)
  std::vector<std::string> attention_patterns;  // "attention"
};

// Resolves `targets`: null or "auto", "attention", "all-linear" (each alone), or a non-empty list
// of module patterns (PEFT-style suffix match). Throws std::invalid_argument ("lora.targets: ...")
// for a non-string entry, an empty list, a named set mixed with patterns, or another JSON type.
LoraTargets resolve_lora_targets(const nlohmann::json& targets, const LoraTargetSets& sets);

// "fp32" | "bf16" | "fp16" from a precision setting; "auto" or empty is bf16 on CUDA and fp32
// elsewhere. Throws std::invalid_argument "<key>: expected auto, fp32, bf16 or fp16, got '...'".
std::string resolve_precision(const std::string& precision, const std::string& device,
                              const std::string& key = "precision");

// A transformers CLIP text encoder config.json (vocabulary 49408, 77 positions) of the given shape.
struct ClipTextShape {
  int hidden = 0;
  int layers = 0;
  int heads = 0;
  int intermediate = 0;
  std::string architecture = "CLIPTextModel";  // or CLIPTextModelWithProjection
  std::string hidden_act = "quick_gelu";
};
nlohmann::json clip_text_config(const ClipTextShape& shape);

// A transformers T5EncoderModel config.json (gated-gelu, vocabulary 640 as the test tokenizers)
// of the given shape; umt5_encoder_config is the UMT5EncoderModel variant (model_type umt5,
// scalable attention, T5Tokenizer) that Wan uses.
struct T5Shape {
  int d_model = 0;
  int d_kv = 0;
  int heads = 0;
  int d_ff = 0;
  int layers = 0;
};
nlohmann::json t5_encoder_config(const T5Shape& shape);
nlohmann::json umt5_encoder_config(const T5Shape& shape);

// tokenizer_config.json of the CLIP tokenizer (77 tokens; `pad_token` differs between families)
// and of the T5 tokenizer (`model_max_length` differs between families).
nlohmann::json clip_tokenizer_config(const std::string& pad_token = "<|endoftext|>");
nlohmann::json t5_tokenizer_config(int model_max_length = 512);

// One component a family's pipeline has in model_index.json, and the classes it accepts there.
struct ComponentSpec {
  std::string name;
  std::vector<std::string> classes;
  bool optional = false;  // may be missing altogether; the family decides what its absence means
  // A repository may list it as absent ([null, null]): a transformer-only repository trains on
  // cached latents and text embeddings. False for what every run uses (the denoiser).
  bool nullable = true;
};

// The "components" of a family's plan from model_index.json: for each spec {"class", "dir"}
// (dir <model_dir>/<name>), or null for a nullable component the repository lists as
// [null, null] (the host then builds nothing and names it if a hook asks for it). An optional
// component that is missing or null is left out. Throws std::invalid_argument naming
// model_index.json and the component: missing ("...; <layout>"), null but not nullable, not a
// [library, class] pair, or a class the plugin does not serve (component_class).
nlohmann::json plan_components(const std::string& model_dir, const nlohmann::json& model_index,
                               const std::vector<ComponentSpec>& specs, const std::string& plugin,
                               const std::string& layout);

// The class model_index.json names for `spec` (the caller has checked the entry exists).
// Throws std::invalid_argument "<where>: '<name>' must be a [library, class] pair, got ..." or
// "<where>: '<name>' is <class>; the <plugin> plugin expects A or B".
std::string component_class(const nlohmann::json& model_index, const ComponentSpec& spec, const std::string& where,
                            const std::string& plugin);

// The keys every generate request shares, read with "generate request: ..." errors naming the key
// (std::invalid_argument). A key that is absent or null gives the fallback.
class RequestReader {
 public:
  // Throws "generate request: expected a JSON object" for anything else.
  explicit RequestReader(const nlohmann::json& request);
  const nlohmann::json& request() const { return j_; }
  // Present and not null.
  bool has(const char* key) const;
  // A string (one entry) or a non-empty array of strings ("'<key>' must be a string or a
  // non-empty array of strings", "'<key>' must hold strings, got ...").
  std::vector<std::string> strings(const char* key) const;
  // An integer of at least `min` ("'<key>' must be an integer", "'<key>' must be at least <min>").
  std::int64_t integer(const char* key, std::int64_t fallback, std::int64_t min) const;
  // A number ("'<key>' must be a number").
  double number(const char* key, double fallback) const;
  // A boolean ("'<key>' must be a boolean").
  bool boolean(const char* key, bool fallback) const;
  // "seed": a non-negative integer ("'seed' must be a non-negative integer").
  std::uint64_t seed(std::uint64_t fallback) const;

 private:
  nlohmann::json j_;
};

// The settings every text-to-image / text-to-video generate request shares. A family's request
// derives from it and sets its pipeline's defaults in its constructor.
struct GenerateSettings {
  std::vector<std::string> prompts;
  std::vector<std::string> negative_prompts;  // one per prompt ("" unless the request gives them)
  std::uint64_t seed = 0;
  std::int64_t steps = 28;
  double guidance = 1.0;
  std::int64_t height = 0;  // 0: the family's native size
  std::int64_t width = 0;
  std::int64_t max_sequence_length = 0;  // 0: the pipeline's default
  bool trace = false;
};

// What differs between pipelines in reading those settings.
struct GenerateRules {
  std::int64_t min_size = 1;             // the least height / width
  std::int64_t max_sequence_length = 0;  // > 0: the most max_sequence_length may be
  std::string max_sequence_length_text;  // why, when a request exceeds it ("FLUX.1's T5 limit")
  bool negative_prompts = true;          // the pipeline takes negative prompts
  bool single_negative_for_all = false;  // one negative prompt serves every prompt
};

// Reads prompts, negative_prompts, seed, steps, guidance, height, width, max_sequence_length and
// trace into `s`; an absent key keeps s's value. Throws std::invalid_argument "generate request:
// ..." naming the key ("'negative_prompts' has 2 entries for 3 prompts (give one per prompt)").
void read_generate_settings(const RequestReader& in, const GenerateRules& rules, GenerateSettings& s);

// np.linspace(start, stop, num) in float64, exactly as NumPy computes it (the sigma schedules of
// the flow-match pipelines). Throws std::invalid_argument for a negative num.
std::vector<double> linspace(double start, double stop, std::int64_t num);

}  // namespace yeto::family
