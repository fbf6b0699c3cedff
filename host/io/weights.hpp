// Loading a component's weights into a LibTorch module by Diffusers / transformers tensor
// names. Names, shapes and dtypes are checked from the headers before any data is read; then each
// tensor takes its checkpoint's bytes: a view of the file's mapping where dtype and device match
// the module's (no copy; the frozen weights stay file-backed), else one converted copy read
// straight from the mapping, so no tensor ever exists twice.
#pragma once

#include <memory>
#include <string>
#include <utility>
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

// ---- construction without initialisation ----------------------------------------------------
//
// While a DeferredInit lives on a thread, the random fills that initialise new parameters there
// (uniform_ and normal_: what Linear, Conv, Embedding and kaiming/xavier initialisation come down
// to) leave their tensors as allocated and untouched, and converting such a tensor (`to` another
// dtype or device, as Module::to does) allocates the result without reading it. Untouched memory
// costs neither time nor resident pages, so a component whose every weight comes from a
// checkpoint is built for free, and the checkpoint's tensors then replace the placeholders
// (load_weights, tensor_as + set_data). It works through LibTorch's one dispatcher, so it reaches
// modules a plugin builds as well as the host's. Deterministic tensors a constructor computes
// (rotary tables, position ids) are untouched by it. Outside the scope nothing changes: random
// initialisation (init-model, LoRA, tests) draws exactly what it always did.
class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;

  // True for a tensor whose values were never written (a skipped fill, or a conversion of one)
  // while a scope is open on this thread.
  static bool uninitialized(const at::Tensor& t);
  // Throws yeto::Error (bad_input) naming `what` and the tensors that are still placeholders
  // (a checkpoint that left them out): such a component must not be used.
  static void check_initialized(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                const std::string& what);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One tensor of the source as an owned CPU tensor of its stored dtype (float8 -> float32).
at::Tensor load_tensor(const WeightSource& source, const std::string& name);

// Fills module.named_parameters() and named_buffers() from the source (each keeps its dtype and
// device; see above). With strict (the
// default) nothing is copied when there is any problem, and a yeto::Error (bad_input) lists
// the missing, unexpected and mismatched names.
LoadReport load_weights(torch::nn::Module& module, WeightSource& source, bool strict = true);
LoadReport load_weights(torch::nn::Module& module, WeightSource& source, const LoadOptions& options);

}  // namespace yeto::io
