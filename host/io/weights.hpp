// Loading a component's weights into a LibTorch module by Diffusers / transformers tensor
// names. Names, shapes and dtypes are checked from the headers before any data is read; then
// tensors are read and copied one at a time (converting dtype and device to the module's), so
// peak memory is one tensor beyond the module itself.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/weight_source.hpp"

namespace torch::nn {
class Module;
}

namespace yeto::io {

struct LoadOptions {
  bool strict = true;  // any missing, unexpected or shape-mismatched name is an error
  // Checkpoint names start with this prefix, which is stripped ("transformer." for a
  // pipeline-level LoRA file); checkpoint names without it count as unexpected.
  std::string prefix;
  // Module tensors that may be absent from the checkpoint (buffers a model computes itself,
  // such as position ids): exact names, or a prefix ending in '*'.
  std::vector<std::string> allow_missing;
};

struct LoadReport {
  struct Mismatch {
    std::string name;
    std::vector<std::int64_t> module_shape;
    std::vector<std::int64_t> file_shape;
  };
  std::vector<std::string> loaded;      // module names filled from the checkpoint
  std::vector<std::string> missing;     // module names the checkpoint lacks
  std::vector<std::string> unexpected;  // checkpoint names the module lacks
  std::vector<Mismatch> mismatched;     // present in both with different shapes (not loaded)
  std::uint64_t bytes_read = 0;
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // A readable account naming every problem (at most `max_names` per list).
  std::string describe(std::size_t max_names = 20) const;
};

// One tensor of the source as an owned CPU tensor of its stored dtype (float8 -> float32).
at::Tensor load_tensor(const WeightSource& source, const std::string& name);

// Fills module.named_parameters() and named_buffers() from the source. With strict (the
// default) nothing is copied when there is any problem, and a yeto::Error (bad_input) lists
// the missing, unexpected and mismatched names.
LoadReport load_weights(torch::nn::Module& module, WeightSource& source, bool strict = true);
LoadReport load_weights(torch::nn::Module& module, WeightSource& source, const LoadOptions& options);

}  // namespace yeto::io
