// Metrics sinks. A run appends one JSON object per record to metrics.jsonl (flushed per
// record so a crash loses at most the record being written). Event-file sinks for
// TensorBoard plug in beside it through the same record interface.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace yeto {

class JsonlWriter {
 public:
  // Opens `path` for appending (creating parent directories).
  explicit JsonlWriter(const std::filesystem::path& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Writes one object as a single line and flushes it. Thread-safe.
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
};

// The metrics of one run: every record goes to RUN_DIR/metrics.jsonl and, when enabled,
// each of its finite numeric fields becomes a TensorBoard scalar (tag = field name) in
// RUN_DIR/tensorboard/, at the record's "step".
class TensorBoardWriter;
class RunMetrics {
 public:
  RunMetrics(const std::filesystem::path& run_dir, bool tensorboard);
  ~RunMetrics();
  // `record` must be an object with an integer "step".
  void record(const nlohmann::json& record);
  // A resumed run continues at `step`: TensorBoard is told to drop what earlier event files hold
  // from that step on (metrics.jsonl is cut back by the learner itself).
  void restart_at(std::int64_t step);
  // An image (PNG bytes of a height x width RGB picture) into TensorBoard, when enabled.
  void image(const std::string& tag, std::int64_t step, const std::string& png, int height, int width);
  const std::filesystem::path& jsonl_path() const { return jsonl_.path(); }
  std::filesystem::path tensorboard_path() const;

 private:
  JsonlWriter jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace yeto
