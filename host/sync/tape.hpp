// The syncer's event tape, DIR/tape.jsonl: append-only, one JSON object per line, flushed
// per record. Every record has "seq" (continuing across restarts), "event", "time" (Unix
// seconds), "fragment" (-1 when the event is not about one fragment), "version" (that
// fragment's global version after the event, or -1) and "learners" (the learner ids the
// event concerns). A torn last line left by a crash is cut off when the tape is reopened.
// A record is appended whole or not at all: a write that fails part-way (ENOSPC, EFBIG,
// EIO) is cut back to the previous record's end before TapeWriteError is thrown, so the
// writer may retry or stop with the tape intact.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace yeto::sync {

// A record could not be appended; the tape still ends with the previous complete record.
class TapeWriteError : public Error {
 public:
  using Error::Error;
};

struct TapeSummary {
  std::uint64_t records = 0;
  std::uint64_t last_seq = 0;
  bool repaired = false;                          // a torn last line was removed
  std::map<std::int64_t, std::uint64_t> merged;   // fragment -> version of its last merge record
};

// Reads a tape (tolerating a torn last line) without changing it.
TapeSummary read_tape(const std::filesystem::path& path);
std::vector<nlohmann::json> read_tape_records(const std::filesystem::path& path);
// tape.N.jsonl: the N-th newest rotated tape beside `path` (tape.jsonl).
std::filesystem::path rotated_tape_path(const std::filesystem::path& path, std::uint32_t n);
// Every record of the rotated tapes still kept (oldest first), then of `path`.
std::vector<nlohmann::json> read_tape_history(const std::filesystem::path& path);

class Tape {
 public:
  // Cuts a torn last line, then opens for appending; seq continues after the last record.
  explicit Tape(const std::filesystem::path& path);
  ~Tape();
  const TapeSummary& opened() const { return opened_; }
  // Adds seq, time, and the common fields, then appends. Returns the written record.
  nlohmann::json write(const std::string& event, std::int64_t fragment, std::int64_t version,
                       const std::vector<std::string>& learners, nlohmann::json extra = nlohmann::json::object());
  // Appends a record as given (used to restore a merge record from the checkpoint), renumbered.
  void write_raw(nlohmann::json record);
  std::uint64_t bytes() const { return size_; }
  // Closes this tape as tape.1.jsonl (older rotated tapes shift up; `keep` stay) and starts a
  // new one whose first record is `first` (a `tape_rotated` record carrying every fragment's
  // version, so a restart knows them). seq continues.
  void rotate(std::uint32_t keep, nlohmann::json first);
  const std::filesystem::path& path() const { return path_; }

 private:
  void append(nlohmann::json& record);
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  TapeSummary opened_;
  std::uint64_t seq_ = 0;
};

double unix_now();

}  // namespace yeto::sync
