// LoRA adapter directories: the layouts Yeto writes and every layout it reads.
//
// Written (write_adapter_dir):
//   pytorch_lora_weights.safetensors  Diffusers (`pipe.load_lora_weights(dir)`): keys
//                                     "<prefix>.<module>.lora_A.weight" / ".lora_B.weight", the
//                                     prefix being the component, except that the second expert
//                                     (transformer_2 of Wan 2.2) is named "transformer." as
//                                     Diffusers wants it (`load_into_transformer_2=True` picks the
//                                     expert); the record keeps the component. The file carries no
//                                     alpha and Diffusers applies scale 1, so alpha/r is folded
//                                     into lora_B.
//   adapter_config.json +             PEFT (`PeftModel.from_pretrained(model, dir)`): keys
//   adapter_model.safetensors         "base_model.model.<module>.lora_A.weight", unscaled, with
//                                     r / lora_alpha / target_modules in the config.
//   yeto_diffusion_adapter.json       Yeto's record: base model and commit, trainable modules,
//                                     LoRA / loss recipe, cache contract, plugin, provenance.
//   comfyui_lora.safetensors          optional (comfyui = true): "lora_<component>_<module with
//                                     '_' for '.'>.lora_down.weight" / ".lora_up.weight" /
//                                     ".alpha", the OneTrainer naming ComfyUI maps for Diffusers
//                                     module names.
//
// Read (read_adapter): all of the above plus Diffusers model-level files (no component
// prefix), kohya-style files, and Diffusers files with `lora_adapter_metadata`. Every layout
// comes out as canonical modules "<component>.<module>" with lora_A [r, in], lora_B [out, r]
// (float32) and the scale the layout implies: W' = W + scale * B @ A.
//
// Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace torch::nn {
class Module;
}

namespace yeto::artifacts {

inline constexpr const char* kDiffusersFile = "pytorch_lora_weights.safetensors";
inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kRecordFile = "yeto_diffusion_adapter.json";
// The family plugin's own files of the trained state (capability artifacts: save_artifact at
// export, load_artifact at sample), a folder inside the adapter directory.
inline constexpr const char* kPluginArtifactDir = "plugin";
inline constexpr const char* kComfyFile = "comfyui_lora.safetensors";
// A full fine-tune's trained denoiser tensors (float32, the denoiser's own parameter names
// without the component prefix), which `merge` writes over the base weights.
inline constexpr const char* kFullWeightsFile = "yeto_full_weights.safetensors";
inline constexpr const char* kRecordFormat = "yeto-diffusion-adapter";
inline constexpr int kRecordVersion = 1;

enum class Layout {
  yeto,             // a directory with yeto_diffusion_adapter.json (read through its PEFT pair)
  peft,             // adapter_config.json + adapter_model.safetensors
  diffusers,        // pytorch_lora_weights.safetensors with "<component>." prefixes
  diffusers_model,  // Diffusers save_lora_adapter: no prefix
  comfyui,          // lora_down / lora_up / alpha (OneTrainer / kohya naming)
};
std::string layout_name(Layout l);
std::optional<Layout> parse_layout(const std::string& s);

struct LoraModule {
  at::Tensor A;        // [r, in], float32
  at::Tensor B;        // [out, r], float32
  double scale = 1.0;  // the layer computes W x + scale * B (A x)
  std::int64_t rank() const { return A.size(0); }
};

struct Adapter {
  Layout layout = Layout::peft;
  std::filesystem::path file;                 // the weights file read
  std::map<std::string, LoraModule> modules;  // canonical "<component>.<module path>"
  nlohmann::json record;                      // yeto_diffusion_adapter.json, null when absent
  nlohmann::json peft_config;                 // adapter_config.json, null when absent
  // True when a module's component was not named by the adapter itself (unprefixed names, or
  // Diffusers' "transformer." prefix read without a record or a chosen component).
  bool implicit_component = false;

  std::vector<std::string> components() const;  // distinct component prefixes, sorted
  // The modules of one component, keyed by module path (without the component).
  std::map<std::string, const LoraModule*> modules_of(const std::string& component) const;
  // "<component>.<module>.lora_A.weight" / ".lora_B.weight" -> tensor (unscaled).
  std::map<std::string, at::Tensor> canonical_tensors() const;
  // The same names with each module's scale folded into lora_B, for consumers that apply
  // LoRA tensors at scale 1 (a plugin loading them with alpha = r).
  std::map<std::string, at::Tensor> folded_tensors() const;
};

struct ReadOptions {
  std::optional<Layout> layout;        // read this layout of a directory (default: detect)
  std::string component = "transformer";  // for layouts whose names carry none (PEFT, model-level)
  // For layouts that store no alpha (Diffusers files without metadata): scale alpha / r instead
  // of Diffusers' 1.0.
  std::optional<double> alpha;
  // Canonical module names the adapter may address; needed to undo ComfyUI's '.' -> '_'
  // flattening (module names contain '_' themselves). When empty, a directory's record
  // (trainable modules) is used.
  std::vector<std::string> known_modules;
  // The denoiser the adapter is for, chosen by the caller (`--adapter-dir DIR:COMPONENT`).
  // Diffusers names a LoRA's keys "transformer." whichever expert it goes into, so names with
  // that prefix or with none are read as this component. Empty: the record's lora.component
  // (a directory's, or the one next to a file it lists), else `component` / the prefix. A choice
  // that contradicts the record is refused.
  std::string into;
  // The model's denoiser components. With more than one, an adapter that does not say which it
  // is for (no `into`, no record, "transformer."-prefixed or unprefixed names) is refused with a
  // message saying to pass DIR:COMPONENT.
  std::vector<std::string> denoisers;
};

// The Diffusers key prefix of a component's LoRA: "transformer" for a second expert
// ("transformer_2", ...), which Diffusers loads with load_into_transformer_2=True; else the
// component itself.
std::string diffusers_key_prefix(const std::string& component);

// Reads an adapter directory or a single .safetensors file. Throws yeto::Error: not_found
// when nothing adapter-like is there (listing what it looked for); bad_input naming the file
// and tensor for unpaired, misshapen or unrecognised keys.
Adapter read_adapter(const std::filesystem::path& where, const ReadOptions& options = {});

// PEFT's pattern rule (rank_pattern / alpha_pattern keys): a key matches module path P when
// the regex "(.*\.)?(key)$" matches all of P.
bool peft_pattern_matches(const std::string& pattern, const std::string& module);
// PEFT's target rule: P == K or P ends with "." + K.
bool peft_target_matches(const std::string& target, const std::string& module);

// What write_adapter_dir needs.
struct AdapterExport {
  std::string component = "transformer";     // denoiser component the modules belong to
  std::map<std::string, LoraModule> modules;  // module path (without component) -> A, B (unscaled)
  std::int64_t r = 0;
  double alpha = 0;                           // every module's scale is alpha / r
  // PEFT target_modules; empty: derived from the module paths (see peft_target_modules).
  std::vector<std::string> target_modules;
  // Every LoRA-capable module path of the component (to find short target names that select
  // exactly `modules`); empty: target_modules are the full module paths.
  std::vector<std::string> candidate_modules;
  std::string base_model_class;               // e.g. FluxTransformer2DModel (PEFT auto_mapping)
  std::string base_model_name_or_path;        // PEFT's field; empty: null
  nlohmann::json record = nlohmann::json::object();  // extra fields of yeto_diffusion_adapter.json
  bool comfyui = false;
};

// The shortest PEFT target list that selects exactly `modules` among `candidates`: the
// distinct last path segments (two when the last is a number, as in "to_out.0"), or the full
// paths when those would select more.
std::vector<std::string> peft_target_modules(const std::vector<std::string>& modules,
                                             const std::vector<std::string>& candidates);

// Writes the adapter directory (atomically, file by file). The record gets the format fields,
// the LoRA recipe, the trainable modules and the files written, on top of `e.record`.
void write_adapter_dir(const std::filesystem::path& dir, const AdapterExport& e);

// Attaches the adapter's modules of `component` to the nn::Linear layers of `root` as adapter
// `name` (replacing one of that name), each with its scale. Returns the module paths adapted.
// Throws yeto::Error (bad_input) naming the tensor for a module the model lacks or a shape
// that does not fit.
std::vector<std::string> apply_adapter(torch::nn::Module& root, const Adapter& adapter, const std::string& component,
                                       const std::string& name = "default");

// Every LoRA-capable module path under `root`, sorted.
std::vector<std::string> lora_capable_paths(torch::nn::Module& root);

}  // namespace yeto::artifacts
