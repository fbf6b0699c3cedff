// A family's declarative description: its family file (<plugin>.family.json), read once. The
// file states what a Diffusers-style family is apart from its code: the plugin's descriptor
// fields (families, aliases, pipelines, classes, capabilities, licence notice; yeto_add_plugin's
// FAMILY_FILE reads them at build time), the repository layout it serves (model_index.json
// components and the classes each accepts), the trained denoiser and latent normalisation, the
// LoRA target sets, and the documented presets of `yeto-host init-model`. Torch-free; errors
// are std::invalid_argument naming the file and key. The format is described in docs/PLUGIN_SDK.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::family {

class FamilyDescription {
 public:
  // Parses the family file's text; `where` names it in every error. Refuses a missing or
  // mistyped key ("<where>: 'components[2].classes' must be a non-empty array of strings"), a
  // preset that would not build (a component without a config, an unknown kit config) and
  // lora_targets without both named sets.
  static FamilyDescription parse(const std::string& text, const std::string& where);

  const std::string& plugin() const { return plugin_; }      // "flux": the prefix of the hooks' errors
  const std::string& model() const { return model_; }        // "FLUX.1": named when media is not an image batch
  const std::string& denoiser() const { return denoiser_; }  // the component the run trains
  // Latent normalisation when the repository has no VAE config to read it from.
  double scaling_factor() const { return scaling_factor_; }
  double shift_factor() const { return shift_factor_; }
  // "max_sequence_length": {"default": N, "max": M}: the pipeline's text length and the most a
  // run may ask for (0: the family has no such setting / no limit).
  std::int64_t max_sequence_length() const { return max_sequence_length_; }
  std::int64_t max_sequence_length_limit() const { return max_sequence_length_limit_; }
  // The model_index.json components, in the file's order.
  const std::vector<ComponentSpec>& components() const { return components_; }
  // {"components": plan_components(...), "family": plugin} for a repository of this layout
  // (the errors of plan_components, naming model_index.json and the component).
  nlohmann::json plan(const std::string& model_dir, const nlohmann::json& model_index) const;
  // The presets object of the ABI's presets hook: for each preset {"description", "model_index",
  // "components": {name: {"config": ...}}}, every config the defaults merged with the preset's
  // patch (RFC 7386) and kit configs expanded.
  const nlohmann::json& presets() const { return presets_; }
  // lora.targets through resolve_lora_targets with the file's "auto" and "attention" sets.
  LoraTargets lora_targets(const nlohmann::json& targets) const;
  // The whole file, for keys a family reads itself.
  const nlohmann::json& document() const { return doc_; }

 private:
  nlohmann::json doc_;
  std::string plugin_, model_, denoiser_ = "transformer";
  double scaling_factor_ = 0.18215, shift_factor_ = 0.0;
  std::int64_t max_sequence_length_ = 0, max_sequence_length_limit_ = 0;
  std::vector<ComponentSpec> components_;
  std::string layout_;
  LoraTargetSets lora_sets_;
  nlohmann::json presets_;
};

// A config written by the kit, as a family file's {"kit": K, "shape": {...}, "with": {...}}:
// K is clip_text (shape hidden, layers, heads, intermediate, architecture, hidden_act),
// t5_encoder or umt5_encoder (d_model, d_kv, heads, d_ff, layers), clip_tokenizer (pad_token)
// or t5_tokenizer (model_max_length); "with" is merged over the result. Anything else is
// returned as it is. Throws std::invalid_argument "<where>: ..." for an unknown kit or shape key.
nlohmann::json expand_kit_config(const nlohmann::json& config, const std::string& where);

}  // namespace yeto::family
