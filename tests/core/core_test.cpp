#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <optional>
#include <thread>

#include <cstring>
#include <nlohmann/json.hpp>

#include <stb_image.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/metrics.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "data/image.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using yeto::test::TempDir;

TEST(Strings, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(yeto::edit_distance("lora", "lora"), 0u);
  EXPECT_EQ(yeto::edit_distance("lroa", "lora"), 1u);
  EXPECT_EQ(yeto::edit_distance("lor", "lora"), 1u);
  EXPECT_EQ(yeto::edit_distance("", "abc"), 3u);
  EXPECT_EQ(yeto::edit_distance("kitten", "sitting"), 3u);
}

TEST(Strings, ClosestMatchRejectsFarCandidates) {
  const std::vector<std::string> c = {"lora.r", "lora.alpha", "train.max_steps"};
  EXPECT_EQ(yeto::closest_match("lora.alhpa", c), "lora.alpha");
  EXPECT_EQ(yeto::closest_match("train.max_step", c), "train.max_steps");
  EXPECT_EQ(yeto::closest_match("completely.different", c), "");
  EXPECT_EQ(yeto::did_you_mean("lora.rr", c), ", did you mean 'lora.r'?");
}

TEST(Strings, SplitTrimJoin) {
  EXPECT_EQ(yeto::split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(yeto::trim("  x y \t\n"), "x y");
  EXPECT_EQ(yeto::join({"a", "b", "c"}, ", "), "a, b, c");
}

TEST(AtomicFile, WritesAndReplaces) {
  TempDir t;
  const fs::path p = t / "sub/dir/file.txt";
  yeto::atomic_write(p, "first");
  EXPECT_EQ(yeto::read_file(p), "first");
  yeto::atomic_write(p, "second, longer");
  EXPECT_EQ(yeto::read_file(p), "second, longer");
  // No temporary files are left behind.
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path())) (void)e, ++n;
  EXPECT_EQ(n, 1u);
}

TEST(AtomicFile, UncommittedWriterLeavesTargetUntouched) {
  TempDir t;
  const fs::path p = t / "state.bin";
  yeto::atomic_write(p, "good state");
  {
    yeto::AtomicFile f(p);
    f.write("half-written new sta");
    // destroyed without commit(), as when an exception unwinds mid-save
  }
  EXPECT_EQ(yeto::read_file(p), "good state");
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(t.path())) (void)e, ++n;
  EXPECT_EQ(n, 1u);
}

// A writer killed mid-write leaves NAME.tmp.PID.N; the next start removes those of dead
// processes (to the given depth) and keeps a live writer's and every other file.
TEST(AtomicFile, StaleTemporariesOfDeadWritersAreRemoved) {
  TempDir t;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);  // `child` is now a PID of no process
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  fs::create_directories(t / "checkpoints" / "step-00000004");
  for (const auto& p : {t / ("state.json.tmp." + dead + ".0"), t / "checkpoints" / ("latest.tmp." + dead + ".3"),
                        t / "checkpoints" / "step-00000004" / ("trainable.safetensors.tmp." + dead + ".7"),
                        t / ("metrics.jsonl.tmp." + alive + ".1"), t / "notes.tmp.txt", t / "x.tmp.12a.1",
                        t / "state.json"})
    yeto::atomic_write(p, "x");
  EXPECT_EQ(yeto::remove_stale_temporaries(t.path(), 0), 1u);
  EXPECT_TRUE(fs::exists(t / "checkpoints" / ("latest.tmp." + dead + ".3")));  // below the depth
  EXPECT_EQ(yeto::remove_stale_temporaries(t.path(), 2), 2u);
  EXPECT_FALSE(fs::exists(t / "checkpoints" / "step-00000004" / ("trainable.safetensors.tmp." + dead + ".7")));
  EXPECT_TRUE(fs::exists(t / ("metrics.jsonl.tmp." + alive + ".1")));  // its writer is running
  EXPECT_TRUE(fs::exists(t / "notes.tmp.txt"));
  EXPECT_TRUE(fs::exists(t / "x.tmp.12a.1"));
  EXPECT_TRUE(fs::exists(t / "state.json"));
}

// A private file is private from its creation: the temporary already has the mode.
TEST(AtomicFile, AModeIsTheFilesFromItsFirstByte) {
  TempDir t;
  const ::mode_t old = ::umask(022);
  yeto::atomic_write(t / "secret", "s3cret", 0600);
  yeto::atomic_write(t / "public", "hello");
  ::umask(old);
  struct stat sb {};
  ASSERT_EQ(::stat((t / "secret").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((t / "public").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0644u);
  EXPECT_EQ(yeto::read_file(t / "secret"), "s3cret");
}

TEST(AtomicFile, ReadMissingFileNamesItAndIsNotFound) {
  TempDir t;
  try {
    yeto::read_file(t / "nope.txt");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.txt"), std::string::npos);
    EXPECT_EQ(e.code(), yeto::ExitCode::not_found);
  }
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(yeto::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(yeto::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  TempDir t;
  const auto p = t.write("f", "abc");
  EXPECT_EQ(yeto::sha256_file(p), yeto::sha256_hex("abc"));
}

TEST(Jsonl, AppendsOneObjectPerLine) {
  TempDir t;
  const fs::path p = t / "run/metrics.jsonl";
  {
    yeto::JsonlWriter w(p);
    w.write({{"step", 1}, {"loss", 0.5}});
    w.write({{"step", 2}, {"loss", std::nan("")}});
  }
  {
    yeto::JsonlWriter w(p);  // reopening appends
    w.write({{"step", 3}});
  }
  const std::string text = yeto::test::read_text(p);
  const auto lines = yeto::split(text, '\n');
  ASSERT_EQ(lines.size(), 4u);  // three records and the empty tail after the last newline
  EXPECT_EQ(nlohmann::json::parse(lines[0])["loss"], 0.5);
  EXPECT_TRUE(nlohmann::json::parse(lines[1])["loss"].is_null());  // NaN is not JSON
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 3);
}

TEST(Location, Renders) {
  EXPECT_EQ((yeto::Location{"a.toml", 3, 7}).str(), "a.toml:3:7");
  EXPECT_EQ((yeto::Location{"a.toml", 3, 0}).str(), "a.toml:3");
  EXPECT_EQ((yeto::Location{}).str(), "");
  EXPECT_EQ(yeto::with_location({"f", 1, 2}, "bad"), "f:1:2: bad");
}

// ---- TensorBoard event files -------------------------------------------------------------

#include "core/tensorboard.hpp"

namespace {

// Minimal protobuf reader for the fields the writer emits.
struct Reader {
  std::string_view s;
  std::size_t i = 0;
  bool done() const { return i >= s.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; i < s.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(s[i++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  }
  std::uint64_t fixed(int n) {
    std::uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i++])) << (8 * k);
    return v;
  }
  std::string_view bytes() {
    const auto n = varint();
    auto out = s.substr(i, n);
    i += n;
    return out;
  }
};

struct Scalar {
  std::int64_t step;
  std::string tag;
  float value;
};

struct SessionStart {
  std::int64_t step;
  std::uint64_t status;
  std::string message;
};

std::vector<std::uint8_t> rgb_expected(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7);
  return v;
}

struct ImageSummary {
  std::int64_t step;
  std::string tag;
  std::uint64_t height, width, colorspace;
  std::string png;
};

std::vector<Scalar> read_scalars(const std::string& file, std::string* file_version,
                                 std::vector<SessionStart>* sessions = nullptr,
                                 std::vector<ImageSummary>* images = nullptr) {
  std::vector<Scalar> out;
  std::size_t pos = 0;
  while (pos < file.size()) {
    Reader hdr{std::string_view(file).substr(pos, 12)};
    const auto len = hdr.fixed(8);
    const auto len_crc = static_cast<std::uint32_t>(hdr.fixed(4));
    EXPECT_EQ(len_crc, yeto::masked_crc32c(std::string_view(file).substr(pos, 8)));
    const std::string_view payload = std::string_view(file).substr(pos + 12, len);
    Reader tail{std::string_view(file).substr(pos + 12 + len, 4)};
    EXPECT_EQ(static_cast<std::uint32_t>(tail.fixed(4)), yeto::masked_crc32c(payload));
    pos += 12 + len + 4;
    Reader ev{payload};
    std::int64_t step = 0;
    while (!ev.done()) {
      const auto key = ev.varint();
      const int field = static_cast<int>(key >> 3);
      if (field == 1) ev.fixed(8);
      else if (field == 2) step = static_cast<std::int64_t>(ev.varint());
      else if (field == 3) *file_version = std::string(ev.bytes());
      else if (field == 7) {
        Reader log{ev.bytes()};
        SessionStart st{step, 0, ""};
        while (!log.done()) {
          const auto k = log.varint();
          if ((k >> 3) == 1) st.status = log.varint();
          else st.message = std::string(log.bytes());
        }
        if (sessions) sessions->push_back(st);
      }
      else if (field == 5) {
        Reader sum{ev.bytes()};
        while (!sum.done()) {
          sum.varint();
          Reader val{sum.bytes()};
          Scalar sc{step, "", 0};
          std::optional<ImageSummary> image;
          while (!val.done()) {
            const auto k = val.varint();
            if ((k >> 3) == 1) {
              sc.tag = std::string(val.bytes());
            } else if ((k >> 3) == 4) {  // Summary.Image
              Reader img{val.bytes()};
              image = ImageSummary{step, "", 0, 0, 0, ""};
              while (!img.done()) {
                const auto f = img.varint() >> 3;
                if (f == 1) image->height = img.varint();
                else if (f == 2) image->width = img.varint();
                else if (f == 3) image->colorspace = img.varint();
                else image->png = std::string(img.bytes());
              }
            } else {
              const auto bits = static_cast<std::uint32_t>(val.fixed(4));
              std::memcpy(&sc.value, &bits, 4);
            }
          }
          if (image) {
            image->tag = sc.tag;
            if (images) images->push_back(*image);
          } else {
            out.push_back(sc);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cKnownVector) {
  EXPECT_EQ(yeto::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(yeto::crc32c(""), 0u);
}

TEST(TensorBoard, RunMetricsWritesJsonlAndDecodableEvents) {
  TempDir t;
  fs::path events;
  {
    yeto::RunMetrics m(t.path(), true);
    m.record({{"step", 1}, {"loss", 0.75}, {"lr", 1e-4}, {"note", "text is not a scalar"}});
    m.record({{"step", 2}, {"loss", 0.5}, {"val_loss", std::nan("")}});
    m.image("samples/p0", 2, yeto::data::encode_png(rgb_expected(4 * 6 * 3), 4, 6), 4, 6);
    events = m.tensorboard_path();
    EXPECT_THROW(m.record({{"loss", 1.0}}), yeto::Error);  // no step
  }
  ASSERT_TRUE(fs::exists(events));
  EXPECT_EQ(events.parent_path(), t / "tensorboard");
  EXPECT_EQ(events.filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::string version;
  std::vector<ImageSummary> images;
  const auto scalars = read_scalars(yeto::test::read_text(events), &version, nullptr, &images);
  EXPECT_EQ(version, "brain.Event:2");
  // The image summary decodes to the picture that was written.
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].tag, "samples/p0");
  EXPECT_EQ(images[0].step, 2);
  EXPECT_EQ(images[0].height, 4u);
  EXPECT_EQ(images[0].width, 6u);
  EXPECT_EQ(images[0].colorspace, 3u);
  int w = 0, h = 0, c = 0;
  unsigned char* px = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(images[0].png.data()),
                                            static_cast<int>(images[0].png.size()), &w, &h, &c, 3);
  ASSERT_NE(px, nullptr);
  EXPECT_EQ(w, 6);
  EXPECT_EQ(h, 4);
  const auto want = rgb_expected(4 * 6 * 3);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), px));
  stbi_image_free(px);
  ASSERT_EQ(scalars.size(), 3u);  // loss, lr at step 1; loss at step 2 (NaN dropped)
  EXPECT_EQ(scalars[0].tag, "loss");
  EXPECT_EQ(scalars[0].step, 1);
  EXPECT_FLOAT_EQ(scalars[0].value, 0.75f);
  EXPECT_EQ(scalars[1].tag, "lr");
  EXPECT_FLOAT_EQ(scalars[1].value, 1e-4f);
  EXPECT_EQ(scalars[2].step, 2);
  EXPECT_FLOAT_EQ(scalars[2].value, 0.5f);
  const auto lines = yeto::split(yeto::test::read_text(t / "metrics.jsonl"), '\n');
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["step"], 2);
}

// A resumed run opens a new event file whose session START at the resumed step makes
// TensorBoard drop what the earlier file holds from that step on (no step drawn twice).
TEST(TensorBoard, ARestartWritesASessionStartAtTheResumedStep) {
  TempDir t;
  fs::path second;
  {
    yeto::RunMetrics first(t.path(), true);
    for (int s = 1; s <= 5; ++s) first.record({{"step", s}, {"loss", 1.0 / s}});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // event file names carry seconds
  {
    yeto::RunMetrics resumed(t.path(), true);
    resumed.restart_at(4);
    resumed.record({{"step", 4}, {"loss", 0.3}});
    second = resumed.tensorboard_path();
  }
  std::string version;
  std::vector<SessionStart> sessions;
  const auto scalars = read_scalars(yeto::test::read_text(second), &version, &sessions);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].step, 4);
  EXPECT_EQ(sessions[0].status, 1u);  // SessionLog.START
  EXPECT_EQ(sessions[0].message, "resumed from step 3");
  ASSERT_EQ(scalars.size(), 1u);
  EXPECT_EQ(scalars[0].step, 4);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(t / "tensorboard")) files += e.is_regular_file();
  EXPECT_EQ(files, 2u);
}

TEST(Crc32c, SlicedMatchesBytewiseOnEveryLengthAndAlignment) {
  // Reference: the plain bit-at-a-time definition.
  auto reference = [](std::string_view d) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : d) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
  };
  std::string data(300, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131 + 7) & 0xFF);
  for (std::size_t off = 0; off < 8; ++off)
    for (std::size_t len = 0; off + len <= data.size(); len += 13)
      ASSERT_EQ(yeto::crc32c(std::string_view(data).substr(off, len)), reference(std::string_view(data).substr(off, len)))
          << off << "+" << len;
  const std::string_view all(data);
  EXPECT_EQ(yeto::crc32c_extend(yeto::crc32c(all.substr(0, 77)), all.substr(77)), yeto::crc32c(all));
}
