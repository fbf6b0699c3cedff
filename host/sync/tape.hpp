// The syncer's event tape, DIR/tape.jsonl: append-only, one JSON object per line, flushed
// per record. Every record has "seq" (continuing across restarts), "event", "time" (Unix
// seconds), "fragment" (-1 when the event is not about one fragment), "version" (that
// fragment's global version after the event, or -1) and "learners" (the learner ids the
// event concerns). A torn last line left by a crash is cut off when the tape is reopened.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto {
class JsonlWriter;
}

namespace yeto::sync {

struct TapeSummary {
  std::uint64_t records = 0;
  std::uint64_t last_seq = 0;
  bool repaired = false;                          // a torn last line was removed
  std::map<std::int64_t, std::uint64_t> merged;   // fragment -> version of its last merge record
};

// Reads a tape (tolerating a torn last line) without changing it.
TapeSummary read_tape(const std::filesystem::path& path);
std::vector<nlohmann::json> read_tape_records(const std::filesystem::path& path);

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

 private:
  std::unique_ptr<JsonlWriter> out_;
  TapeSummary opened_;
  std::uint64_t seq_ = 0;
};

double unix_now();

}  // namespace yeto::sync
