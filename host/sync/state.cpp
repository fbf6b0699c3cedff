#include "sync/state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/crc32c.hpp"
#include "core/tensorboard.hpp"
#include "sync/protocol.hpp"
#include "sync/wire.hpp"

namespace yeto::sync {
namespace {
constexpr std::uint32_t kCkptMagic = 0x504B4359;  // "YCKP"
constexpr std::uint32_t kDataMagic = 0x464B4359;  // "YCKF": a fragment's data file
// Format 2 added each fragment's public state after its momentum; format 3 moved every
// fragment's values into data files of their own. Formats 1 (no public state: learners held the
// exact parameters) and 2 are still read.
constexpr std::uint32_t kCkptFormat = 3;

nlohmann::json registry_json(const SyncerState& s) {
  nlohmann::json reg = nlohmann::json::array();
  for (const auto& [id, r] : s.registry)
    reg.push_back({{"id", id}, {"live", r.live}, {"pushes", r.pushes}, {"merged", r.merged},
                   {"samples", r.samples}, {"joins", r.joins}});
  return reg;
}

std::string data_header(std::uint32_t p, std::uint64_t version, std::uint64_t numel) {
  ByteWriter w;
  w.u32(kDataMagic);
  w.u32(p);
  w.u64(version);
  w.u64(numel);
  return w.take();
}

std::string_view as_bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

std::string errno_text() { return std::strerror(errno); }

// A fragment's data file, saved as AtomicFile saves (a temporary NAME.tmp.PID.N beside the
// target, which remove_stale_temporaries recognises; fsync; rename; directory fsync), and written
// back to disk every `write_back` bytes as it is written: each chunk's write-back is started
// (sync_file_range) and everything before it waited for, so at most about two chunks are dirty
// at a time and the final fsync has little left to write. A 600 MB file left to its fsync holds
// the filesystem's journal (ext4 data=ordered) for seconds, and every other file's fsync meanwhile
// (the small fragments' checkpoints) waits behind it. write_back 0: everything at the fsync.
class WrittenBackFile {
 public:
  WrittenBackFile(std::filesystem::path target, std::size_t write_back)
      : target_(std::move(target)), write_back_(write_back) {
    static std::atomic<unsigned> counter{0};
    std::filesystem::create_directories(target_.parent_path());
    temp_ = target_.parent_path() / (target_.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                                     std::to_string(counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error("cannot create '" + temp_.string() + "' to write '" + target_.string() + "': " + errno_text());
  }
  ~WrittenBackFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove(temp_, ec);
    }
  }
  WrittenBackFile(const WrittenBackFile&) = delete;
  WrittenBackFile& operator=(const WrittenBackFile&) = delete;

  void write(std::string_view s) {
    while (!s.empty()) {
      const std::size_t piece = write_back_ ? std::min(s.size(), write_back_ - (written_ - started_)) : s.size();
      const ssize_t n = ::write(fd_, s.data(), piece);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error("cannot write '" + target_.string() + "': " + errno_text());
      }
      s.remove_prefix(static_cast<std::size_t>(n));
      written_ += static_cast<std::uint64_t>(n);
      if (write_back_ && written_ - started_ >= write_back_) write_back();
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) throw Error("cannot flush '" + target_.string() + "' to disk: " + errno_text());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error("cannot close '" + target_.string() + "': " + errno_text());
    if (::rename(temp_.c_str(), target_.c_str()) != 0)
      throw Error("cannot move '" + temp_.string() + "' over '" + target_.string() + "': " + errno_text());
    committed_ = true;
    fsync_directory(target_.parent_path());
  }

 private:
  void write_back() {
#ifdef __linux__
    const auto start = static_cast<off_t>(started_);
    int rc = ::sync_file_range(fd_, start, static_cast<off_t>(written_ - started_), SYNC_FILE_RANGE_WRITE);
    if (rc == 0 && start > 0)
      rc = ::sync_file_range(fd_, 0, start,
                             SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    if (rc != 0 && errno != ENOSYS && errno != EINVAL && errno != ESPIPE)
      throw Error("cannot write '" + target_.string() + "' back to disk: " + errno_text());
#else
    if (::fdatasync(fd_) != 0) throw Error("cannot flush '" + target_.string() + "' to disk: " + errno_text());
#endif
    started_ = written_;
  }

  std::filesystem::path target_, temp_;
  std::size_t write_back_ = 0;
  int fd_ = -1;
  std::uint64_t written_ = 0, started_ = 0;  // started_: bytes whose write-back was started
  bool committed_ = false;
};
}  // namespace

std::filesystem::path fragment_data_name(std::uint32_t p, std::uint64_t version) {
  return std::filesystem::path("fragments") / ("f" + std::to_string(p) + "-v" + std::to_string(version) + ".bin");
}

std::uint32_t save_fragment_data(const std::filesystem::path& dir, std::uint32_t p, const FragmentState& f,
                                 std::size_t write_back) {
  const std::vector<float>& theta = f.theta();
  const std::vector<float>& pub = f.public_values();
  const std::vector<float>& m = *f.momentum;
  if (pub.size() != theta.size() || m.size() != theta.size())
    throw Error("syncer checkpoint: fragment " + std::to_string(p) + " has buffers of different lengths");
  const std::string head = data_header(p, f.version, theta.size());
  std::uint32_t crc = crc32c(head);
  WrittenBackFile out(dir / fragment_data_name(p, f.version), write_back);
  out.write(head);
  for (const auto* v : {&theta, &m, &pub}) {
    out.write(as_bytes(*v));
    crc = crc32c_extend(crc, as_bytes(*v));
  }
  out.commit();
  return crc;
}

std::string encode_manifest(const SyncerState& s, const std::vector<std::uint32_t>& data_crc) {
  ByteWriter w;
  w.u32(kCkptMagic);
  w.u32(kCkptFormat);
  w.u8(s.initialised ? 1 : 0);
  w.u8(s.finished ? 1 : 0);
  w.u64(s.outer_steps);
  w.u64(s.samples_merged);
  w.bytes(&s.wall_seconds, 8);
  if (s.initialised) {
    if (data_crc.size() != s.fragments.size())
      throw Error("syncer checkpoint: " + std::to_string(data_crc.size()) + " data checksums for " +
                  std::to_string(s.fragments.size()) + " fragments");
    w.u8(s.layout.pattern == FragmentPattern::binpack ? 0 : 1);
    w.u32(static_cast<std::uint32_t>(s.layout.fragments.size()));
    w.u32(static_cast<std::uint32_t>(s.layout.tensors.size()));
    for (const auto& t : s.layout.tensors) {
      w.str(t.name);
      w.u64(t.numel);
    }
    w.u64(s.layout.fingerprint());
    for (std::size_t p = 0; p < s.fragments.size(); ++p) {
      const auto& f = s.fragments[p];
      w.u64(f.version);
      w.u64(f.params->size());
      w.u32(data_crc[p]);
      w.bytes(&f.spread_ema, 8);
      w.str(f.last_merge_event);
    }
  }
  w.str(registry_json(s).dump());
  w.u32(crc32c(w.data()));
  return w.take();
}

namespace {
// The manifest without the fragments' values; crcs gets each data file's CRC (format 3).
SyncerState decode_impl(std::string_view bytes, const std::string& where, const std::filesystem::path* dir,
                        std::vector<std::uint32_t>* crcs) {
  auto bad = [&](const std::string& why) {
    return Error("syncer checkpoint " + where + " is unusable: " + why +
                     "; restore a good copy of the whole state directory or start a new one",
                 ExitCode::bad_input);
  };
  if (bytes.size() < 12) throw bad("too short");
  std::uint32_t crc;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (crc32c(bytes.substr(0, bytes.size() - 4)) != crc) throw bad("checksum mismatch");
  try {
    ByteReader r(bytes.substr(0, bytes.size() - 4));
    if (r.u32() != kCkptMagic) throw bad("not a syncer checkpoint");
    const std::uint32_t format = r.u32();
    if (format < 1 || format > kCkptFormat) throw bad("unknown checkpoint format " + std::to_string(format));
    SyncerState s;
    s.initialised = r.u8() != 0;
    s.finished = r.u8() != 0;
    s.outer_steps = r.u64();
    s.samples_merged = r.u64();
    std::memcpy(&s.wall_seconds, r.raw(8).data(), 8);
    if (s.initialised) {
      const std::uint8_t pat = r.u8();
      if (pat > 1) throw bad("unknown fragment pattern");
      const std::uint32_t fragments = r.u32();
      const std::uint32_t ntensors = r.u32();
      if (ntensors > r.remaining() / 12) throw bad("tensor list is truncated");
      std::vector<TensorSpec> tensors;
      for (std::uint32_t i = 0; i < ntensors; ++i) {
        TensorSpec t;
        t.name = r.str(kMaxTensorName);
        t.numel = r.u64();
        tensors.push_back(std::move(t));
      }
      s.layout = build_layout(std::move(tensors), fragments,
                              pat == 0 ? FragmentPattern::binpack : FragmentPattern::strided);
      if (r.u64() != s.layout.fingerprint()) throw bad("layout fingerprint mismatch");
      for (std::uint32_t p = 0; p < s.layout.fragments.size(); ++p) {
        const auto& frag = s.layout.fragments[p];
        FragmentState f;
        f.version = r.u64();
        const std::uint64_t n = r.u64();
        if (n != frag.numel) throw bad("fragment length mismatch");
        if (format >= 3) {
          const std::uint32_t want = r.u32();
          if (crcs) crcs->push_back(want);
          if (dir) {
            const auto file = *dir / fragment_data_name(p, f.version);
            if (!std::filesystem::exists(file))
              throw bad("fragment " + std::to_string(p) + "'s data file " + file.string() +
                        " is missing (a checkpoint is its whole state directory: checkpoint.bin and fragments/)");
            const std::string data = read_file(file);
            if (crc32c(data) != want) throw bad("fragment " + std::to_string(p) + "'s data file " + file.string() +
                                                " does not match the checksum the checkpoint names");
            ByteReader d(data);
            if (d.u32() != kDataMagic || d.u32() != p || d.u64() != f.version || d.u64() != n)
              throw bad("fragment " + std::to_string(p) + "'s data file " + file.string() + " has a wrong header");
            f.params = make_floats(d.floats(n));
            f.momentum = make_floats(d.floats(n));
            f.pub = make_floats(d.floats(n));
            d.expect_end();
          }
        } else {
          f.params = make_floats(r.floats(n));
          f.momentum = make_floats(r.floats(n));
          f.pub = format >= 2 ? make_floats(r.floats(n)) : f.params;
        }
        std::memcpy(&f.spread_ema, r.raw(8).data(), 8);
        f.last_merge_event = r.str(1u << 24);
        s.fragments.push_back(std::move(f));
      }
      if (format >= 3 && !dir && !crcs) throw bad("a format 3 checkpoint is read with its directory");
    }
    const auto reg = nlohmann::json::parse(r.str(1u << 30));
    for (const auto& j : reg) {
      LearnerRecord lr;
      lr.id = j.at("id").get<std::string>();
      lr.live = j.at("live").get<bool>();
      lr.pushes = j.at("pushes").get<std::uint64_t>();
      lr.merged = j.at("merged").get<std::uint64_t>();
      lr.samples = j.at("samples").get<std::uint64_t>();
      lr.joins = j.at("joins").get<std::uint64_t>();
      s.registry[lr.id] = lr;
    }
    r.expect_end();
    return s;
  } catch (const WireError& e) {
    throw bad(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("registry: ") + e.what());
  }
}
}  // namespace

SyncerState decode_checkpoint(std::string_view bytes, const std::string& where, const std::filesystem::path& dir) {
  return decode_impl(bytes, where, dir.empty() ? nullptr : &dir, nullptr);
}

void save_checkpoint(const std::filesystem::path& path, const SyncerState& s) {
  const auto dir = path.parent_path();
  std::vector<std::uint32_t> crcs;
  for (std::uint32_t p = 0; p < s.fragments.size(); ++p) crcs.push_back(save_fragment_data(dir, p, s.fragments[p]));
  atomic_write(path, encode_manifest(s, crcs));
}

SyncerState load_checkpoint(const std::filesystem::path& path) {
  return decode_checkpoint(read_file(path), path.string(), path.parent_path());
}

std::vector<std::uint32_t> checkpoint_data_crcs(const std::filesystem::path& path) {
  std::vector<std::uint32_t> crcs;
  decode_impl(read_file(path), path.string(), nullptr, &crcs);
  return crcs;
}

std::size_t remove_unreferenced_fragment_data(const std::filesystem::path& dir, const SyncerState& s) {
  std::set<std::string> keep;
  for (std::uint32_t p = 0; p < s.fragments.size(); ++p)
    keep.insert(fragment_data_name(p, s.fragments[p].version).filename().string());
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir / "fragments", ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || keep.count(name) || name.size() < 5 || name.substr(name.size() - 4) != ".bin" ||
        name[0] != 'f')
      continue;
    if (std::filesystem::remove(e.path(), ec)) ++n;
  }
  return n;
}

}  // namespace yeto::sync
