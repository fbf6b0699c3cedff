// Audio rows: a video's sound track or the row's own sound file, cut to the sampled frames and
// handed over as the tensor "audio"; declared cached-tensor shapes; `data check`'s bad rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/check.hpp"
#include "data/decode.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"
#include "data_test_util.hpp"
#include "support/av_clips.hpp"
#include "support/process.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::AvClipSpec;
using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> floats(const RawTensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

std::pair<std::int64_t, std::int64_t> loud_span(const std::vector<float>& v, float threshold) {
  std::int64_t first = -1, last = -1;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::fabs(v[i]) > threshold) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      last = static_cast<std::int64_t>(i) + 1;
    }
  return {first, last};
}

DataOptions audio_options(const fs::path& manifest, std::int64_t frames) {
  DataOptions o = test::small_options(manifest);
  o.num_frames = frames;
  o.audio.enabled = true;
  return o;
}

std::vector<Sample> decode_all(const DataOptions& o) {
  const Manifest m = read_manifest(resolve_source(o), o);
  EXPECT_TRUE(m.errors.empty()) << (m.errors.empty() ? "" : m.errors[0].str());
  std::vector<Sample> out;
  for (std::size_t i = 0; i < m.rows.size(); ++i) out.push_back(decode_row(m.rows[i], i, o));
  return out;
}

TEST(DataAudioRows, AVideoRowCarriesTheSoundOfItsSampledFrames) {
  TempDir t;
  test::av_clip(t / "ds/clip.mp4", AvClipSpec{});  // 2 s, 24 fps, AAC; tone + square in [0.75, 1.0)
  AvClipSpec own;
  own.bursts = {{0.5, 0.625}};
  own.audio_codec = "flac";
  test::burst_audio(t / "ds/own.flac", own);
  own.video_codec = "ffv1";
  own.audio_codec = "";
  test::av_clip(t / "ds/silent.mkv", own);  // no sound track: the row's file gives it
  t.write("ds/train.jsonl",
          "{\"video\": \"clip.mp4\", \"prompt\": \"a\"}\n"
          "{\"video\": \"silent.mkv\", \"audio\": \"own.flac\", \"prompt\": \"b\"}\n");
  DataOptions o = audio_options(t / "ds/train.jsonl", 24);
  const auto samples = decode_all(o);
  ASSERT_EQ(samples.size(), 2u);
  // 24 of 48 frames: the window [0.5, 1.5) s, 16000 samples at 16 kHz.
  const RawTensor& a = samples[0].tensors.at("audio");
  EXPECT_EQ(a.dtype, "float32");
  EXPECT_THAT(a.shape, ElementsAre(1, 16000));
  EXPECT_THAT(samples[0].tensor_info.at("audio").shape, ElementsAre(1, 16000));
  auto [on, off] = loud_span(floats(a), 0.1f);
  EXPECT_NEAR(on, 4000, 48);
  EXPECT_NEAR(off, 8000, 48);
  const RawTensor& b = samples[1].tensors.at("audio");
  EXPECT_THAT(b.shape, ElementsAre(1, 16000));
  std::tie(on, off) = loud_span(floats(b), 0.1f);
  EXPECT_NEAR(on, 0, 8);  // own.flac's burst [0.5, 0.625) starts the window
  EXPECT_NEAR(off, 2000, 8);
  // Stereo at 8 kHz, and a padded clip: 60 frames asked of 48, the last 12 silent.
  o.audio = {true, 8000, 2};
  o.num_frames = 60;
  const auto padded = decode_all(o);
  const RawTensor& p = padded[1].tensors.at("audio");
  EXPECT_THAT(p.shape, ElementsAre(2, 20000));
  const auto v = floats(p);
  std::tie(on, off) = loud_span(std::vector<float>(v.begin(), v.begin() + 20000), 0.1f);
  EXPECT_NEAR(on, 4000, 8);
  EXPECT_NEAR(off, 5000, 8);
  EXPECT_EQ(v, floats(decode_all(o)[1].tensors.at("audio")));  // deterministic
  // Audio off: no tensor.
  o.audio.enabled = false;
  EXPECT_EQ(decode_all(o)[0].tensors.count("audio"), 0u);
}

TEST(DataAudioRows, DataCheckNamesEveryBadAudioRowAndShapeByRow) {
  TempDir t;
  test::av_clip(t / "ds/clip.mp4", AvClipSpec{});
  AvClipSpec s;
  s.video_codec = "ffv1";
  s.audio_codec = "";
  test::av_clip(t / "ds/silent.mkv", s);
  s.seconds = 0.5;
  s.audio_codec = "pcm_s16le";
  test::burst_audio(t / "ds/short.wav", s);
  test::write_bytes(t / "ds/junk.wav", "RIFF....WAVEjunk");
  std::string rows =
      "{\"video\": \"clip.mp4\", \"prompt\": \"ok\"}\n"                                    // 1
      "{\"video\": \"silent.mkv\", \"prompt\": \"no sound track\"}\n"                      // 2
      "{\"video\": \"silent.mkv\", \"audio\": \"short.wav\", \"prompt\": \"short\"}\n"     // 3
      "{\"video\": \"silent.mkv\", \"audio\": \"junk.wav\", \"prompt\": \"unreadable\"}\n" // 4
      "{\"latents\": [[[0.5]]], \"tensors\": {\"audio_latents\": [[1, 2, 3]]}, \"prompt\": \"rank\"}\n"     // 5
      "{\"latents\": [[[0.5]]], \"tensors\": {\"audio_latents\": [[1, 2], [3, 4]]}, \"prompt\": \"ok\"}\n"  // 6
      "{\"latents\": [[[0.5]]], \"prompt\": \"missing\"}\n"                                                 // 7
      "{\"image\": \"x.png\", \"audio\": \"short.wav\", \"prompt\": \"image\"}\n";                        // 8
  test::write_png(t / "ds/x.png", 4, 4, 3, [](int, int) { return test::Pixel{1, 2, 3, 255}; });
  t.write("ds/train.jsonl", rows);
  t.write("run.toml",
          "[data]\npath = \"ds/train.jsonl\"\nnum_frames = 24\nheight = 16\nwidth = 16\naudio = true\n"
          "tensor_shapes = [\"audio_latents=[-1, 2] with latents\"]\n");
  const auto r = test::run_host({"data", "check", "--config", (t / "run.toml").string()});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows: 8 (2 usable, 6 bad)"));
  EXPECT_THAT(r.out, HasSubstr("audio float32[1, 16000]: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 2: " + (t / "ds/silent.mkv").string() + ": has no audio stream"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 3: " + (t / "ds/short.wav").string() +
                                   ": audio is 0.500 s long but the clip needs 0.500 s to 1.500 s"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 4: " + (t / "ds/junk.wav").string() + ": not a readable media file"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 5: tensor 'audio_latents' has shape [1, 3] but the model expects [-1, 2]"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 7: the row has cached latents but no 'audio_latents'"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 8: field 'audio' belongs to a video row"));
  // --quick finds the missing stream and the unreadable file from headers alone.
  const auto q = test::run_host({"data", "check", "--quick", "--config", (t / "run.toml").string()});
  EXPECT_THAT(q.out, HasSubstr("train.jsonl line 2: " + (t / "ds/silent.mkv").string() + ": has no audio stream"));
  EXPECT_THAT(q.out, HasSubstr("train.jsonl line 4: " + (t / "ds/junk.wav").string() + ": not a readable media file"));
}

TEST(DataAudioRows, DeclaredInputsParseApplyAndRefuseContradictions) {
  const auto in = parse_row_inputs(nlohmann::json::parse(R"({"audio": {"sample_rate": 24000, "channels": 2},
      "tensors": {"audio_latents": {"shape": [-1, 128], "with_latents": true}}})"),
                                   "plugin p");
  ASSERT_TRUE(in.audio);
  EXPECT_EQ(in.audio->sample_rate, 24000);
  EXPECT_THAT(in.tensors.at("audio_latents").shape, ElementsAre(-1, 128));
  DataOptions o;
  apply_row_inputs(o, in, "plugin p");
  EXPECT_TRUE(o.audio.enabled);
  EXPECT_EQ(o.audio.channels, 2);
  EXPECT_TRUE(o.tensor_shapes.at("audio_latents").with_latents);
  EXPECT_TRUE(parse_row_inputs(nlohmann::json(), "p").empty());
  for (const char* bad : {R"([1])", R"({"video": {}})", R"({"audio": {"channels": 3}})", R"({"audio": {"sample_rate": 10}})",
                          R"({"tensors": {"x": {"shape": [0]}}})", R"({"tensors": {"x": {}}})"}) {
    try {
      parse_row_inputs(nlohmann::json::parse(bad), "plugin p");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("plugin p: declared inputs:")) << bad;
    }
  }
  DataOptions user;
  user.audio = {false, 22050, 1, true};
  EXPECT_THROW(apply_row_inputs(user, in, "plugin p"), UsageError);
  user.audio = {false, 24000, 2, true};
  EXPECT_NO_THROW(apply_row_inputs(user, in, "plugin p"));
  user.tensor_shapes["audio_latents"] = {{-1, 64}, false};
  EXPECT_THROW(apply_row_inputs(user, in, "plugin p"), UsageError);
}

}  // namespace
}  // namespace yeto::data
