#include "sync/tape.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <iterator>

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
      if (j.value("event", "") == "tape_rotated" && j.contains("versions") && j["versions"].is_array())
        for (std::size_t p = 0; p < j["versions"].size(); ++p)
          s.merged[static_cast<std::int64_t>(p)] = j["versions"][p].get<std::uint64_t>();
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

std::filesystem::path rotated_tape_path(const std::filesystem::path& path, std::uint32_t n) {
  return path.parent_path() / (path.stem().string() + "." + std::to_string(n) + path.extension().string());
}

std::vector<nlohmann::json> read_tape_history(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (std::uint32_t n = 1; std::filesystem::exists(rotated_tape_path(path, n), ec); ++n)
    files.insert(files.begin(), rotated_tape_path(path, n));
  files.push_back(path);
  std::vector<nlohmann::json> all;
  for (const auto& f : files) {
    auto r = read_tape_records(f);
    all.insert(all.end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
  }
  return all;
}

Tape::Tape(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const std::uint64_t good = scan(path, opened_, nullptr);
    if (good != std::filesystem::file_size(path)) std::filesystem::resize_file(path, good);
  }
  seq_ = opened_.last_seq;
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open the event tape " + path.string() + ": " + std::strerror(errno));
  struct stat sb {};
  size_ = ::fstat(fd_, &sb) == 0 ? static_cast<std::uint64_t>(sb.st_size) : 0;
}

Tape::~Tape() {
  if (fd_ >= 0) ::close(fd_);
}

void Tape::rotate(std::uint32_t keep, nlohmann::json first) {
  namespace fs = std::filesystem;
  keep = std::max<std::uint32_t>(keep, 1);
  std::error_code ec;
  fs::remove(rotated_tape_path(path_, keep), ec);
  for (std::uint32_t n = keep; n > 1; --n)
    if (fs::exists(rotated_tape_path(path_, n - 1), ec)) fs::rename(rotated_tape_path(path_, n - 1), rotated_tape_path(path_, n));
  ::fsync(fd_);
  fs::rename(path_, rotated_tape_path(path_, 1));
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw TapeWriteError("cannot start a new event tape " + path_.string() + ": " + std::strerror(errno));
  size_ = 0;
  first["seq"] = ++seq_;
  append(first);
}

void Tape::append(nlohmann::json& record) {
  // NaN and Inf are not JSON; they are written as null.
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    // Cut back a partial record so the tape still ends at a record boundary.
    if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      // The torn line is cut when the tape is next opened.
    }
    --seq_;
    throw TapeWriteError("cannot append to the event tape " + path_.string() + ": " + std::strerror(err));
  }
  size_ += line.size();
}

nlohmann::json Tape::write(const std::string& event, std::int64_t fragment, std::int64_t version,
                           const std::vector<std::string>& learners, nlohmann::json extra) {
  nlohmann::json j = {{"seq", ++seq_}, {"event", event}, {"time", unix_now()}, {"fragment", fragment},
                      {"version", version}, {"learners", learners}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  append(j);
  return j;
}

void Tape::write_raw(nlohmann::json record) {
  record["seq"] = ++seq_;
  append(record);
}

}  // namespace yeto::sync
