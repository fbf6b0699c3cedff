// Parity kinds served by family plugins, run through the same trusted loading path as a
// training run:
//   - `pipeline_end_to_end`: a recorded text-to-image (or video) run of a whole Diffusers
//     pipeline. The case names the repository (case.json `repository`, relative to the case)
//     and the call (`call.arguments`); the handler opens the repository with
//     pipeline::Pipeline::open, runs the plugin's generate hook with the case's prompt, seed,
//     steps, guidance, size and sequence length and `trace: true`, and compares every key of
//     case.json `compare` with the traced output of the same name.
//   - `model`: one forward (and, when the case records `backward`, the loss and named
//     gradients) of a plugin component class (case.json `class_name`, e.g.
//     FluxTransformer2DModel) built from the case's config.json and weights through the
//     plugin's registered constructor, with the case's inputs.safetensors as named inputs.
// The plugin is case.json `plugin` when given, else the family plugin of the pipeline or
// component class (plugin_for_class, from the manifests). Integer outputs must match exactly.
#pragma once

#include <string>

namespace yeto::app {

// Registers both kinds (idempotent).
void register_plugin_parity_kinds();

// The family plugin this build ships that declares a Diffusers pipeline or component class
// in its manifest (pipelines, classes), "" when none.
std::string plugin_for_class(const std::string& class_name);

// The generate request JSON for a case's call.arguments (exposed for tests).
std::string pipeline_request_for_case(const std::string& case_json_text);

}  // namespace yeto::app
