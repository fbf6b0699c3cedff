#include "sync/state.hpp"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/tensorboard.hpp"
#include "sync/protocol.hpp"
#include "sync/wire.hpp"

namespace yeto::sync {
namespace {
constexpr std::uint32_t kCkptMagic = 0x504B4359;  // "YCKP"
// Format 2 added each fragment's public state after its momentum; format 1 (no public state:
// learners held the exact parameters) is still read.
constexpr std::uint32_t kCkptFormat = 2;
}  // namespace

std::string encode_checkpoint(const SyncerState& s) {
  ByteWriter w;
  w.u32(kCkptMagic);
  w.u32(kCkptFormat);
  w.u8(s.initialised ? 1 : 0);
  w.u8(s.finished ? 1 : 0);
  w.u64(s.outer_steps);
  w.u64(s.samples_merged);
  w.bytes(&s.wall_seconds, 8);
  if (s.initialised) {
    w.u8(s.layout.pattern == FragmentPattern::binpack ? 0 : 1);
    w.u32(static_cast<std::uint32_t>(s.layout.fragments.size()));
    w.u32(static_cast<std::uint32_t>(s.layout.tensors.size()));
    for (const auto& t : s.layout.tensors) {
      w.str(t.name);
      w.u64(t.numel);
    }
    w.u64(s.layout.fingerprint());
    for (const auto& f : s.fragments) {
      w.u64(f.version);
      w.u64(f.params.size());
      w.floats(f.params);
      w.floats(f.momentum);
      w.floats(f.pub.empty() ? f.params : f.pub);
      w.bytes(&f.spread_ema, 8);
      w.str(f.last_merge_event);
    }
  }
  nlohmann::json reg = nlohmann::json::array();
  for (const auto& [id, r] : s.registry)
    reg.push_back({{"id", id}, {"live", r.live}, {"pushes", r.pushes}, {"merged", r.merged},
                   {"samples", r.samples}, {"joins", r.joins}});
  w.str(reg.dump());
  w.u32(crc32c(w.data()));
  return w.take();
}

SyncerState decode_checkpoint(std::string_view bytes, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Error("syncer checkpoint " + where + " is unusable: " + why +
                     "; restore a good copy or start a new state directory",
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
    if (format != 1 && format != kCkptFormat) throw bad("unknown checkpoint format " + std::to_string(format));
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
      for (const auto& frag : s.layout.fragments) {
        FragmentState f;
        f.version = r.u64();
        const std::uint64_t n = r.u64();
        if (n != frag.numel) throw bad("fragment length mismatch");
        f.params = r.floats(n);
        f.momentum = r.floats(n);
        f.pub = format >= 2 ? r.floats(n) : f.params;
        std::memcpy(&f.spread_ema, r.raw(8).data(), 8);
        f.last_merge_event = r.str(1u << 24);
        s.fragments.push_back(std::move(f));
      }
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

void save_checkpoint(const std::filesystem::path& path, const SyncerState& s) {
  const std::string bytes = encode_checkpoint(s);
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

SyncerState load_checkpoint(const std::filesystem::path& path) {
  return decode_checkpoint(read_file(path), path.string());
}

}  // namespace yeto::sync
