#include "io/zip_archive.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/error.hpp"

namespace yeto::io {
namespace fs = std::filesystem;

struct ZipArchive::State {
  fs::path path;
  const unsigned char* base = nullptr;
  std::uint64_t size = 0;
  void* map = nullptr;
  std::vector<ZipEntry> entries;
  std::map<std::string, std::size_t, std::less<>> index;
  ~State() {
    if (map) ::munmap(map, size);
  }
};

namespace {

[[noreturn]] void bad(const fs::path& p, const std::string& what) {
  throw Error(p.string() + ": invalid zip archive: " + what, ExitCode::bad_input);
}

struct Reader {
  const unsigned char* base;
  std::uint64_t size;
  const fs::path& path;
  void need(std::uint64_t off, std::uint64_t n, const char* what) const {
    if (off > size || n > size - off) bad(path, std::string(what) + " lies outside the file");
  }
  std::uint64_t le(std::uint64_t off, int n) const {
    need(off, static_cast<std::uint64_t>(n), "a record");
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | base[off + static_cast<std::uint64_t>(i)];
    return v;
  }
};

}  // namespace

bool ZipArchive::looks_like_zip(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char b[4] = {};
  const bool ok = ::read(fd, b, 4) == 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4;
  ::close(fd);
  return ok;
}

ZipArchive ZipArchive::open(const fs::path& path) {
  auto s = std::make_shared<State>();
  s->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error("cannot open '" + path.string() + "': " + std::strerror(e),
                e == ENOENT ? ExitCode::not_found : ExitCode::bad_input);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("'" + path.string() + "' is not a regular file", ExitCode::bad_input);
  }
  s->size = static_cast<std::uint64_t>(st.st_size);
  if (s->size > 0) {
    void* m = ::mmap(nullptr, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error("cannot map '" + path.string() + "'", ExitCode::bad_input);
    }
    s->map = m;
    s->base = static_cast<const unsigned char*>(m);
  }
  ::close(fd);
  const Reader r{s->base, s->size, path};
  if (s->size < 22) bad(path, "too short for an end-of-central-directory record");
  // The end record sits in the last 22 + 65535 bytes (its comment is at most 64 KiB).
  std::uint64_t eocd = UINT64_MAX;
  const std::uint64_t lowest = s->size > 22 + 65535 ? s->size - 22 - 65535 : 0;
  for (std::uint64_t p = s->size - 22 + 1; p-- > lowest;) {
    if (r.le(p, 4) == 0x06054b50) {
      eocd = p;
      break;
    }
  }
  if (eocd == UINT64_MAX) bad(path, "no end-of-central-directory record");
  std::uint64_t count = r.le(eocd + 10, 2);
  std::uint64_t cd_size = r.le(eocd + 12, 4);
  std::uint64_t cd_off = r.le(eocd + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff) {
    if (eocd < 20 || r.le(eocd - 20, 4) != 0x07064b50) bad(path, "zip64 sizes without a zip64 locator");
    const std::uint64_t z = r.le(eocd - 20 + 8, 8);
    if (r.le(z, 4) != 0x06064b50) bad(path, "bad zip64 end-of-central-directory record");
    count = r.le(z + 32, 8);
    cd_size = r.le(z + 40, 8);
    cd_off = r.le(z + 48, 8);
  }
  r.need(cd_off, cd_size, "the central directory");
  if (count > cd_size / 46) bad(path, "the central directory is too small for " + std::to_string(count) + " entries");
  std::uint64_t p = cd_off;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (r.le(p, 4) != 0x02014b50) bad(path, "bad central-directory entry " + std::to_string(i));
    ZipEntry e;
    e.method = static_cast<std::uint16_t>(r.le(p + 10, 2));
    std::uint64_t csize = r.le(p + 20, 4);
    std::uint64_t usize = r.le(p + 24, 4);
    const std::uint64_t name_len = r.le(p + 28, 2), extra_len = r.le(p + 30, 2), comment_len = r.le(p + 32, 2);
    std::uint64_t local = r.le(p + 42, 4);
    r.need(p + 46, name_len + extra_len + comment_len, "a central-directory name");
    e.name.assign(reinterpret_cast<const char*>(s->base + p + 46), name_len);
    // Zip64 extended information: the 64-bit values of the fields that hold 0xffffffff, in order.
    std::uint64_t x = p + 46 + name_len;
    const std::uint64_t xend = x + extra_len;
    while (x + 4 <= xend) {
      const std::uint64_t id = r.le(x, 2), len = r.le(x + 2, 2);
      if (x + 4 + len > xend) bad(path, "entry '" + e.name + "' has a malformed extra field");
      if (id == 1) {
        std::uint64_t q = x + 4;
        auto take = [&](std::uint64_t& v) {
          if (v != 0xffffffff) return;
          if (q + 8 > x + 4 + len) bad(path, "entry '" + e.name + "' has a short zip64 field");
          v = r.le(q, 8);
          q += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      x += 4 + len;
    }
    if (r.le(local, 4) != 0x04034b50) bad(path, "entry '" + e.name + "' has no local header");
    const std::uint64_t lname = r.le(local + 26, 2), lextra = r.le(local + 28, 2);
    e.data_offset = local + 30 + lname + lextra;
    e.size = e.method == 0 ? usize : csize;
    r.need(e.data_offset, e.size, ("the data of entry '" + e.name + "'").c_str());
    if (e.method == 0 && csize != usize) bad(path, "stored entry '" + e.name + "' has differing sizes");
    s->index.emplace(e.name, s->entries.size());
    s->entries.push_back(std::move(e));
    p += 46 + name_len + extra_len + comment_len;
  }
  ZipArchive a;
  a.s_ = std::move(s);
  return a;
}

const std::vector<ZipEntry>& ZipArchive::entries() const { return s_->entries; }

const ZipEntry* ZipArchive::find(std::string_view name) const {
  const auto it = s_->index.find(name);
  return it == s_->index.end() ? nullptr : &s_->entries[it->second];
}

std::string_view ZipArchive::read(const ZipEntry& e) const {
  if (e.method != 0)
    throw Error(s_->path.string() + ": entry '" + e.name + "' is compressed (method " + std::to_string(e.method) +
                    "); only stored entries are read (torch.save and np.savez write them that way)",
                ExitCode::bad_input);
  return {reinterpret_cast<const char*>(s_->base + e.data_offset), static_cast<std::size_t>(e.size)};
}

const fs::path& ZipArchive::path() const { return s_->path; }

}  // namespace yeto::io
