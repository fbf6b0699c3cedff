// TensorBoard event-file writer (scalars and images), torch-free. The file is a TFRecord stream of
// `Event` protocol buffers, encoded here by hand: each record is a little-endian u64
// length, its masked CRC-32C, the payload and the payload's masked CRC-32C. TensorBoard
// and tensorboard-compatible readers pick up `events.out.tfevents.*` files in a directory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>

#include "core/crc32c.hpp"

namespace yeto {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events file in it, named as TensorBoard expects.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar summary and flushes. Thread-safe.
  void scalar(const std::string& tag, double value, std::int64_t step, double wall_time = -1);
  // Appends one image summary (`png`: the encoded PNG of a height x width picture with
  // `channels` channels) and flushes. Thread-safe.
  void image(const std::string& tag, const std::string& png, int height, int width, int channels, std::int64_t step,
             double wall_time = -1);
  // A SessionLog START event at `step` (a resumed run's first step): TensorBoard then drops the
  // events of earlier files at this step and later, so a resume does not draw a step twice.
  // `message` is the event's text.
  void session_start(std::int64_t step, const std::string& message);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  // One Summary.Value (encoded) as an Event at `step`.
  void write_summary_value(const std::string& value, std::int64_t step, double wall_time);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
};

}  // namespace yeto
