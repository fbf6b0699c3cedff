// The memory model's inventory of a run's model (memory/memory_model.hpp), built from the
// repository and run configuration without reading a weight: the pipeline is opened with every
// component constructed under io::DeferredInit (parameters allocated, never written, so they
// cost neither time nor resident pages) and LoRA attached, then every component's parameters
// and the run's trainable tensors are listed. A repository that has only its configs (no
// weights at all) is enough, at any size. Torch-free header.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "memory/memory_model.hpp"

namespace yeto::app {

// The run configuration is `file` + `overrides` (as the command line gives them), with
// model.storage = auto (fp8 is applied by the model, memory::RunShape::storage: quantising at
// prepare would read every weight) and, when `precision` is not empty, model.precision =
// `precision` ("bf16" for a GPU plan). The frozen base is listed in the compute dtype.
memory::Inventory build_memory_inventory(const std::optional<std::filesystem::path>& file,
                                         std::vector<config::Override> overrides, const std::string& precision = "");

// The run's shape as its configuration gives it: data.height / width / num_frames,
// model.max_sequence_length, train.micro_batch_size ("auto": 1), model.storage,
// train.activation_checkpointing(_every), model.block_swap (when the schema has it),
// train.shard = fsdp over train.island_ranks. The backend is this build's (cpu).
memory::RunShape run_shape_from_config(const config::Config& cfg);

class CommandContext;
// run_shape_from_config with the command's --block-swap N, --backend cpu|cuda (cuda: fused
// attention, as LibTorch 2.x's SDPA) and --cached-latents.
memory::RunShape memory_run_shape(CommandContext& ctx);
// A non-negative count given on the command line; UsageError naming `what` otherwise.
int parse_count(const std::string& text, const std::string& what);

}  // namespace yeto::app
