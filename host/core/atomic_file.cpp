#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace yeto {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

fs::path temp_name_for(const fs::path& target) {
  static std::atomic<unsigned> counter{0};
  return target.parent_path() /
         (target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
          std::to_string(counter.fetch_add(1)));
}

}  // namespace

namespace {
// The PID of a temporary's name "NAME.tmp.PID.N", or -1 when the name is not one.
long temporary_pid(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  const std::string rest = name.substr(at + 5);
  const auto dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return -1;
  for (std::size_t i = 0; i < rest.size(); ++i)
    if (i != dot && (rest[i] < '0' || rest[i] > '9')) return -1;
  if (dot > 9) return -1;
  return std::stol(rest.substr(0, dot));
}
}  // namespace

std::size_t remove_stale_temporaries(const fs::path& dir, int depth) {
  std::size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& p = it->path();
    if (it->is_directory(ec)) {
      if (depth > 0) removed += remove_stale_temporaries(p, depth - 1);
      continue;
    }
    const long pid = temporary_pid(p.filename().string());
    if (pid <= 0) continue;
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;
    std::error_code rec;
    if (fs::remove(p, rec)) ++removed;
  }
  return removed;
}

void fsync_directory(const fs::path& dir) {
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;  // best effort: some filesystems do not allow opening directories
  ::fsync(dfd);
  ::close(dfd);
}

AtomicFile::AtomicFile(fs::path target, unsigned mode) : target_(std::move(target)) {
  const fs::path parent = target_.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw Error("cannot create directory '" + parent.string() + "': " + ec.message());
  }
  temp_ = temp_name_for(target_);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd_ < 0)
    throw Error("cannot create '" + temp_.string() + "' to write '" + target_.string() +
                "': " + errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::write(const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write '" + target_.string() + "': " + errno_text());
    }
    p += n;
    size -= static_cast<std::size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (committed_) return;
  if (::fsync(fd_) != 0)
    throw Error("cannot flush '" + target_.string() + "' to disk: " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw Error("cannot close '" + target_.string() + "': " + errno_text());
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw Error("cannot move '" + temp_.string() + "' over '" + target_.string() +
                "': " + errno_text());
  committed_ = true;
  fsync_directory(target_.parent_path());
}

void atomic_write(const fs::path& path, std::string_view bytes, unsigned mode) {
  AtomicFile f(path, mode);
  f.write(bytes);
  f.commit();
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const bool exists = fs::exists(path, ec);
    throw Error(exists ? "cannot read '" + path.string() + "'"
                       : "file not found: '" + path.string() + "'",
                exists ? ExitCode::failure : ExitCode::not_found);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace yeto
