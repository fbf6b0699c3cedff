#include "sync/tape.hpp"

#include <chrono>
#include <fstream>

#include "core/metrics.hpp"

namespace yeto::sync {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

namespace {
// Returns the length of the tape's intact prefix (up to the last newline).
std::uint64_t scan(const std::filesystem::path& path, TapeSummary& s, std::vector<nlohmann::json>* records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::string line;
  std::uint64_t good = 0, pos = 0;
  while (std::getline(in, line)) {
    const bool complete = !in.eof();
    pos += line.size() + (complete ? 1 : 0);
    if (!complete) {
      s.repaired = true;
      break;
    }
    good = pos;
    if (line.empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      ++s.records;
      s.last_seq = j.value("seq", s.last_seq);
      if (j.value("event", "") == "merge") s.merged[j.value("fragment", -1)] = j.value("version", 0);
      if (j.value("event", "") == "rollback") s.merged[j.value("fragment", -1)] = j.value("version", 0);
      if (records) records->push_back(std::move(j));
    } catch (const nlohmann::json::exception&) {
      s.repaired = true;  // a corrupt complete line: keep it (append-only), but report
    }
  }
  return good;
}
}  // namespace

TapeSummary read_tape(const std::filesystem::path& path) {
  TapeSummary s;
  scan(path, s, nullptr);
  return s;
}

std::vector<nlohmann::json> read_tape_records(const std::filesystem::path& path) {
  TapeSummary s;
  std::vector<nlohmann::json> r;
  scan(path, s, &r);
  return r;
}

Tape::Tape(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const std::uint64_t good = scan(path, opened_, nullptr);
    if (good != std::filesystem::file_size(path)) std::filesystem::resize_file(path, good);
  }
  seq_ = opened_.last_seq;
  out_ = std::make_unique<JsonlWriter>(path);
}

Tape::~Tape() = default;

nlohmann::json Tape::write(const std::string& event, std::int64_t fragment, std::int64_t version,
                           const std::vector<std::string>& learners, nlohmann::json extra) {
  nlohmann::json j = {{"seq", ++seq_}, {"event", event}, {"time", unix_now()}, {"fragment", fragment},
                      {"version", version}, {"learners", learners}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  out_->write(j);
  return j;
}

void Tape::write_raw(nlohmann::json record) {
  record["seq"] = ++seq_;
  out_->write(record);
}

}  // namespace yeto::sync
