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
//     Cases that record training-mode outputs (`train.sample`, `train.<output>`) run the backward
//     call in training mode; a case.json `flow_matching` section adds the linear-path
//     flow-matching objective (fm.xt, fm.ut, the model output, per-sample and mean loss, named
//     gradients).
//   - scheduler cases of classes the host does not implement, and autoencoder cases of plugin
//     classes without the VAE service: the plugin's component computes the recorded outputs
//     (its forward gets the case's inputs and {"recorded_case": case.json}).
// The plugin is case.json `plugin` when given, else the family plugin of the pipeline or
// component class (plugin_for_class, from the manifests). Integer outputs must match exactly.
// Plugins load with the command's plugin settings (set_parity_plugin_settings): a plugin whose
// licence must be acknowledged loads only when plugins.accept_licenses lists it.
#pragma once

#include <string>
#include <vector>

namespace yeto::config {
class Config;
}  // namespace yeto::config

namespace yeto::app {

// Registers both kinds (idempotent).
void register_plugin_parity_kinds();

// The family plugin this build ships that declares a Diffusers pipeline or component class
// in its manifest (pipelines, classes), "" when none.
std::string plugin_for_class(const std::string& class_name);

// The plugin settings of the check-parity command's configuration (plugins.dirs, trusted_keys,
// revoked_keys, accept_licenses, allow_unsigned), used for every plugin the parity kinds load and
// for pipeline cases' runs. Relative plugin directories are taken as given (no config file).
void set_parity_plugin_settings(const config::Config& cfg);

// The generate request JSON for a case's call.arguments (exposed for tests).
std::string pipeline_request_for_case(const std::string& case_json_text);

}  // namespace yeto::app
