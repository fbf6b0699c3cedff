// The generic diffusion learner on one island: `yeto-host train` without a syncer, and the
// inner loop of the `learner` role through OuterSync. Torch-free header.
//
// Everything family-specific comes from the plugin's hooks (prepare, trainable_parameters,
// encode_media, encode_conditioning, denoiser_kwargs, denoise, align) and the repository's
// training scheduler; the loop never branches on the family.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/options.hpp"

namespace yeto::config {
class Config;
}

namespace yeto::island {
class Collectives;
}

namespace yeto::learner {

class OuterSync;

struct RunOptions {
  std::filesystem::path run_dir;   // --output RUN_DIR (required)
  std::int64_t logical_rank = 0;   // keys every RNG stream: island + islands x island rank
  int world = 1;                   // logical ranks sharing the data (provenance)
  // The data shard: learner island `island` of `islands` takes every islands-th row of an epoch,
  // and its rank r of K (`ranks`) every K-th of those, so islands of different rank counts
  // never share rows.
  int island = 0;
  int islands = 1;
  bool resume = true;              // continue from RUN_DIR/checkpoints/latest when present
  bool console = true;             // progress lines on the console
  // The island's ranks (train.shard = "ddp", WORLD_SIZE > 1), or null for one rank. Every rank
  // trains its own data shard (logical_rank / world above), LoRA gradients are averaged before
  // each optimizer step, and only island rank 0 writes RUN_DIR.
  island::Collectives* ranks = nullptr;
  // What the model's plugin declares of its rows (its load_pipeline plan's "inputs": audio,
  // expected cached-tensor shapes), laid over data.* (data::apply_row_inputs).
  data::RowInputs inputs;
  std::string inputs_from;  // who declared them, for messages ("plugin NAME")
};

struct RunResult {
  std::int64_t steps = 0;          // optimizer steps completed (including resumed ones)
  bool stopped_early = false;      // a signal or save_quit file (or the syncer) ended the run
  std::int64_t skipped_rows = 0;   // rows left out under data.on_bad_row = skip
  std::vector<std::string> bad_rows;  // "<manifest> line N: reason", one per skipped row
  double last_loss = 0.0;
  std::optional<double> first_val_loss;  // of this process's first evaluation
  std::optional<double> last_val_loss;
};

// Opens the pipeline the config names (Pipeline::open), trains it and writes RUN_DIR:
// config.toml, provenance.json, metrics.jsonl, tensorboard/, checkpoints/, lora.safetensors.
// `sync` may be null (a single island).
RunResult run(const config::Config& cfg, const RunOptions& options, OuterSync* sync);

}  // namespace yeto::learner
