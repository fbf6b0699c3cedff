// Exporting a trained adapter: the trainable tensors of a checkpoint, checked against the
// exact layout the run's settings rebuild (canonical names, shapes, fragments), written as an
// adapter directory (adapter.hpp). Torch-free interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::artifacts {

// One trainable tensor as the plugin lays it out: "<component>.<module>.lora_A.weight" etc.
struct TrainableTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};

// The settings the layout depends on, with the flag that sets each (for messages).
struct ExportSettings {
  std::string model;                 // model.id (--model)
  std::int64_t r = 0;                // lora.r (--lora-r)
  double alpha = 0;                  // lora.alpha (--lora-alpha)
  std::vector<std::string> targets;  // lora.targets (--lora-targets)
  std::uint32_t fragments = 1;       // sync.fragments (--fragments)
  std::string fragment_pattern = "binpack";  // sync.fragment_pattern (--fragment-pattern)
};

struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The checkpoint file a --checkpoint argument names: the syncer's checkpoint.bin (or its state
// directory), a learner's trainable.safetensors (or its step directory), or a run directory
// (RUN_DIR/checkpoints/latest). Throws yeto::Error (not_found) saying what it looked for.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& where);

// Reads the trainable tensors of a checkpoint (resolve_checkpoint) and checks them against
// `expected` (canonical order) and, for a syncer checkpoint, the fragment settings.
// Throws yeto::Error (bad_input) naming the differing setting: sync.fragments /
// sync.fragment_pattern for another fragment layout, lora.targets or model.id for other tensor
// names, lora.r for other sizes.
std::vector<CheckpointTensor> read_trainable_checkpoint(const std::filesystem::path& checkpoint,
                                                        const std::vector<TrainableTensor>& expected,
                                                        const ExportSettings& settings);

struct ExportRequest {
  std::filesystem::path checkpoint;
  std::vector<TrainableTensor> expected;      // the rebuilt trainable layout
  std::vector<std::string> candidate_modules;  // every LoRA-capable "<component>.<module>" (PEFT targets)
  ExportSettings settings;
  std::string base_model_class;                // the denoiser's class (PEFT auto_mapping)
  nlohmann::json record = nlohmann::json::object();  // base model, plugin, recipes, provenance
  std::filesystem::path output_dir;
  bool comfyui = false;
  // The denoiser to export when the run trains several (Wan 2.2's transformer / transformer_2):
  // one adapter directory per denoiser. "": the run's only one.
  std::string component;
};

struct ExportReport {
  std::string component;
  std::size_t modules = 0;
  std::vector<std::string> files;
};

// True for a LoRA weight under its canonical name ("....lora_A.weight" / "....lora_B.weight").
bool is_lora_weight(std::string_view name);

// read_trainable_checkpoint + write_adapter_dir. One denoiser component per adapter.
ExportReport export_adapter(const ExportRequest& request);
// The same from tensors read_trainable_checkpoint already returned for `request`.
ExportReport export_adapter(const ExportRequest& request, std::vector<CheckpointTensor> tensors);

}  // namespace yeto::artifacts
