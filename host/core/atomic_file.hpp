// The one way the project saves anything: write to a temporary file beside the target,
// fsync it, rename it over the target, fsync the directory. A crash at any point leaves
// either the old file or the new one, never a torn mix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace yeto {

// Replaces `path` atomically with `bytes`. Creates missing parent directories. `mode` is the
// file's permission bits from its creation on (0600: private from the first byte; the umask
// still applies).
void atomic_write(const std::filesystem::path& path, std::string_view bytes, unsigned mode = 0644);

// Streaming variant for large outputs: write() any number of times, then commit().
// Destroying an uncommitted writer removes the temporary file and leaves the target as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target, unsigned mode = 0644);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view s) { write(s.data(), s.size()); }
  std::uint64_t bytes_written() const { return written_; }
  void commit();
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

// Reads a whole file; throws yeto::Error naming the file when it cannot.
std::string read_file(const std::filesystem::path& path);

// fsyncs a directory so a rename inside it is durable.
void fsync_directory(const std::filesystem::path& dir);

// Removes the temporaries (NAME.tmp.PID.N) that writers killed mid-write left in `dir` and,
// to `depth` levels, its subdirectories; a temporary whose PID is still a running process is
// kept. Returns how many were removed. Best effort: unreadable entries are skipped.
std::size_t remove_stale_temporaries(const std::filesystem::path& dir, int depth = 0);

}  // namespace yeto
