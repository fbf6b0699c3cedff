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

}  // namespace yeto
