// Weight loading by Diffusers / transformers names. Modules of the SDK register their children
// under the upstream names, so a module's named_parameters() + named_buffers() IS the state-dict
// naming and loading is a lookup by name. File formats live elsewhere (host/io for the host,
// whatever a plugin uses); this takes tensors already in memory.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace yeto::nn {

struct LoadOptions {
  // Missing or unexpected names, and shape mismatches, are errors. Non-strict loading reports
  // them instead (shape mismatches are always errors).
  bool strict = true;
  // Names the module expects but a checkpoint may lack without that being an error
  // (exact names or, ending in '*', prefixes). LoRA adapter tensors are always optional.
  std::vector<std::string> optional_missing;
  // Checkpoint names to ignore (exact or '*'-suffixed prefix): buffers upstream keeps in its
  // files (`text_model.embeddings.position_ids`), tied duplicates (`encoder.embed_tokens.weight`).
  std::vector<std::string> ignore_unexpected;
  // Applied to every checkpoint name before lookup (legacy names -> current names).
  std::function<std::string(const std::string&)> rename;
};

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // module names not found in the checkpoint
  std::vector<std::string> unexpected;  // checkpoint names the module does not have
};

// Copies each tensor into the parameter or buffer of the same name (converting dtype, keeping
// the module's device and dtype). Throws std::invalid_argument naming the tensor for a shape
// mismatch, and, when strict, listing missing and unexpected names (a few of each).
LoadReport load_named_tensors(torch::nn::Module& module, const std::map<std::string, at::Tensor>& tensors,
                              const LoadOptions& options = {});

// name -> tensor for every parameter and buffer (detached, sharing storage).
std::map<std::string, at::Tensor> named_tensors(const torch::nn::Module& module);

bool name_matches(const std::string& name, const std::vector<std::string>& patterns);

}  // namespace yeto::nn
