// Resumable local checkpoints in RUN_DIR/checkpoints/step-NNNNNNNN/:
//   trainable.safetensors  the float32 master trainable tensors (canonical names)
//   optimizer.safetensors  AdamW moments
//   state.json             step, samples, data position (epoch, micro batch), skipped rows,
//                          config hash and the SHA-256 of both tensor files
// Every file is written atomically; RUN_DIR/checkpoints/latest (the directory name) is
// replaced last, so a crash at any point leaves the previous checkpoint as the latest.
// The RNG needs no saved state: every stream is a pure function of (seed, rank, step).
// Include only where LibTorch is already in use.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

#include "learner/adamw.hpp"

namespace yeto::learner {

struct TrainState {
  std::int64_t step = 0;     // optimizer steps done
  std::int64_t samples = 0;  // samples trained on
  std::int64_t epoch = 0;    // data position: epoch and micro batches consumed in it
  std::int64_t batch_in_epoch = 0;
  std::int64_t skipped_rows = 0;  // rows left out so far (each counted once)
  std::map<std::string, std::string> skipped;  // "<manifest> line N" -> reason, for the report
  std::string config_hash;
  // Island ranks > 1: every rank's data position (epoch, batch_in_epoch), by island rank; the
  // fields above hold rank 0's. Empty for one rank.
  std::vector<std::array<std::int64_t, 2>> rank_positions;
};

nlohmann::json to_json(const TrainState& s);
TrainState train_state_from_json(const nlohmann::json& j, const std::string& label);

// Writes the checkpoint of `state.step` and points `latest` at it; keeps the `keep` newest.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const TrainState& state,
                                      const NamedParams& trainable, const AdamW& optimizer, int keep = 2);

// The latest checkpoint directory, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// What a resume tries, in order: the checkpoint `latest` names (when it names a directory),
// then the older ones kept, newest first. Empty when there is no `latest`.
struct ResumeCandidates {
  std::filesystem::path latest;             // what `latest` names (it may be gone)
  std::vector<std::filesystem::path> dirs;  // in the order to try
};
ResumeCandidates resume_candidates(const std::filesystem::path& run_dir);

// A checkpoint whose files are missing, unreadable or do not match the hashes its state.json
// records (bad_input): a resume falls back to an older one.
class CheckpointDamaged : public Error {
 public:
  explicit CheckpointDamaged(std::string message) : Error(std::move(message), ExitCode::bad_input) {}
};

// Restores trainable tensors (in place, under no_grad) and the optimizer from `dir`; verifies
// the files' hashes (CheckpointDamaged before anything is restored) and that every trainable
// tensor is present with its shape. Throws yeto::Error (bad_input) naming the file and tensor.
TrainState load_checkpoint(const std::filesystem::path& dir, const NamedParams& trainable, AdamW& optimizer);

}  // namespace yeto::learner
