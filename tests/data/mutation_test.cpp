// Mutation test: seeded random damage (bit flips, overwritten and inserted bytes, truncation)
// to a manifest, PNG/JPEG/GIF/BMP images, an MP4 and MKV video and tensor files. Every
// mutant must either decode or fail with a yeto::Error naming its row -- never crash, hang
// or trip AddressSanitizer/UBSan (CTest label `asan`; run it in a -DYETO_SANITIZE=ON build).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "core/error.hpp"
#include "data/decode.hpp"
#include "data/manifest.hpp"
#include "data/sampler.hpp"
#include "data/source.hpp"
#include "data_test_util.hpp"
#include "support/av_clips.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string mutate(const std::string& in, SeededStream& rng) {
  std::string s = in;
  const int kind = static_cast<int>(rng.below(5));
  const std::size_t n = std::max<std::size_t>(1, s.size());
  switch (kind) {
    case 0:  // flip bits
      for (int i = 0, k = 1 + static_cast<int>(rng.below(8)); i < k && !s.empty(); ++i)
        s[rng.below(s.size())] ^= static_cast<char>(1u << rng.below(8));
      break;
    case 1:  // overwrite a run with random bytes
      for (std::size_t i = rng.below(n), k = 1 + rng.below(16); i < s.size() && k > 0; ++i, --k) s[i] = static_cast<char>(rng.below(256));
      break;
    case 2:  // truncate
      s.resize(rng.below(n));
      break;
    case 3:  // insert bytes
      s.insert(rng.below(n), std::string(1 + rng.below(8), static_cast<char>(rng.below(256))));
      break;
    default:  // extreme values in a header-sized prefix (sizes, lengths)
      for (int i = 0; i < 4 && !s.empty(); ++i) s[rng.below(std::min<std::size_t>(s.size(), 64))] = static_cast<char>(0xFF);
      break;
  }
  return s;
}

// Decodes `file` as `kind` through a one-row manifest; returns true when it decoded.
bool try_row(const TempDir& t, const std::string& row_json, const DataOptions& o, int& errors) {
  t.write("m.jsonl", row_json + "\n");
  try {
    const Manifest m = read_manifest(resolve_source(o), o);
    for (const auto& e : m.errors) EXPECT_THAT(e.str(), ::testing::HasSubstr("m.jsonl line "));
    for (std::size_t i = 0; i < m.rows.size(); ++i) decode_row(m.rows[i], i, o);
    if (!m.errors.empty()) ++errors;
    return m.errors.empty();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("m.jsonl line ")) << e.what();
    ++errors;
    return false;
  }
}

// The unmutated media, generated once per process (ctest runs each case as its own process,
// possibly in parallel, so every process has its own directory).
fs::path& seed_dir() {
  static fs::path d;
  return d;
}

// `keep`: unmutated files the row also names, copied beside the mutant. `audio`: decode the
// row's sound too.
void mutate_media(const std::string& file, const std::string& row, int rounds, std::uint64_t seed, std::int64_t frames = 1,
                  bool audio = false, const std::vector<std::string>& keep = {}) {
  TempDir t;
  const fs::path src = seed_dir() / file;
  const std::string original = test::read_bytes(src);
  ASSERT_FALSE(original.empty()) << src;
  for (const auto& k : keep) fs::copy_file(seed_dir() / k, t / k);
  DataOptions o = test::small_options(t / "m.jsonl", 12, 10);
  o.num_frames = frames;
  o.audio.enabled = audio;
  o.max_pixels = 1 << 22;
  o.max_frames = 600;
  SeededStream rng(seed);
  int errors = 0, decoded = 0;
  for (int i = 0; i < rounds; ++i) {
    test::write_bytes(t / file, mutate(original, rng));
    decoded += try_row(t, row, o, errors) ? 1 : 0;
  }
  EXPECT_EQ(errors + decoded, rounds);
  EXPECT_GT(errors, 0) << "no mutant of " << file << " was rejected";
}

class DataMutation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    seeds_ = std::make_unique<TempDir>();
    seed_dir() = seeds_->path();
    const fs::path d = seed_dir();
    auto px = [](int x, int y) { return test::Pixel{static_cast<std::uint8_t>(x * 9), static_cast<std::uint8_t>(y * 5), 77, 128}; };
    test::write_png(d / "a.png", 23, 17, 4, px);
    test::write_jpg(d / "a.jpg", 23, 17, px);
    test::write_bmp(d / "a.bmp", 23, 17, px);
    test::write_tga(d / "a.tga", 23, 17, 3, px);
    test::ffmpeg({"-f", "lavfi", "-i", "testsrc=size=16x12:rate=5", "-t", "0.6", "-f", "gif", (d / "a.gif").string()});
    test::h264_video(d / "a.mp4", 32, 24, 0.5, 12);
    test::indexed_video(d / "a.mkv", 16, 12, 6, 6, 30);
    test::AvClipSpec sound;
    sound.width = 16;
    sound.height = 12;
    sound.fps = 12;
    sound.seconds = 0.5;
    sound.sample_rate = 22050;
    sound.bursts = {{0.1, 0.3}};
    test::av_clip(d / "sound.mp4", sound);
    sound.video_codec = "ffv1";
    sound.audio_codec = "";
    test::av_clip(d / "silent.mkv", sound);
    for (const auto& [name, codec] : std::vector<std::pair<std::string, std::string>>{
             {"a.wav", "pcm_s16le"}, {"a.flac", "flac"}, {"a.mp3", "libmp3lame"}, {"a.ogg", "libvorbis"}}) {
      sound.audio_codec = codec;
      test::burst_audio(d / name, sound);
    }
  }
  static void TearDownTestSuite() { seeds_.reset(); }
  static std::unique_ptr<TempDir> seeds_;
};
std::unique_ptr<TempDir> DataMutation::seeds_;

TEST_F(DataMutation, Images) {
  mutate_media("a.png", R"({"image": "a.png", "prompt": "x"})", 300, 1);
  mutate_media("a.jpg", R"({"image": "a.jpg", "prompt": "x"})", 200, 2);
  mutate_media("a.bmp", R"({"image": "a.bmp", "prompt": "x"})", 150, 3);
  mutate_media("a.tga", R"({"image": "a.tga", "prompt": "x"})", 150, 4);
  mutate_media("a.gif", R"({"image": "a.gif", "prompt": "x"})", 150, 5);
}

TEST_F(DataMutation, Videos) {
  mutate_media("a.mp4", R"({"video": "a.mp4", "prompt": "x"})", 80, 6, 4);
  mutate_media("a.mkv", R"({"video": "a.mkv", "prompt": "x"})", 80, 7, 4);
}

TEST_F(DataMutation, SoundTracksAndSoundFiles) {
  mutate_media("sound.mp4", R"({"video": "sound.mp4", "prompt": "x"})", 80, 11, 4, true);
  for (const auto& [name, seed] : std::vector<std::pair<std::string, std::uint64_t>>{
           {"a.wav", 12}, {"a.flac", 13}, {"a.mp3", 14}, {"a.ogg", 15}})
    mutate_media(name, R"({"video": "silent.mkv", "audio": ")" + name + R"(", "prompt": "x"})", 60, seed, 4, true,
                 {"silent.mkv"});
}

TEST_F(DataMutation, TensorFiles) {
  TempDir t;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  const std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header + std::string(24, '\0');
  const std::string st_header = R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string st(8, '\0');
  st[0] = static_cast<char>(st_header.size());
  st += st_header + std::string(16, '\0');
  DataOptions o = test::small_options(t / "m.jsonl");
  SeededStream rng(8);
  int errors = 0, ok = 0;
  for (int i = 0; i < 200; ++i) {
    test::write_bytes(t / "e.npy", mutate(npy, rng));
    test::write_bytes(t / "e.safetensors", mutate(st, rng));
    ok += try_row(t, R"({"latents": "e.npy", "prompt_embeds": "e.safetensors"})", o, errors) ? 1 : 0;
  }
  EXPECT_EQ(errors + ok, 200);
  EXPECT_GT(errors, 0);
}

TEST_F(DataMutation, ManifestLines) {
  TempDir t;
  test::solid_png(t / "a.png", 4, 4, {1, 2, 3, 255});
  const std::string good =
      R"({"image": "a.png", "prompt": "p", "height": 8, "width": 8, "prompt_embeds": {"shape": [1, 2], "data": [1, 2]}})";
  DataOptions o = test::small_options(t / "m.jsonl");
  SeededStream rng(9);
  int errors = 0, ok = 0;
  for (int i = 0; i < 400; ++i) ok += try_row(t, mutate(good, rng), o, errors) ? 1 : 0;
  EXPECT_EQ(errors + ok, 400);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace yeto::data
