// Sound end to end through yeto-host and the fullstep test plugin: `sample` writes an MP4 whose
// AAC track ffprobe reads with the clip's duration (and a WAV beside frames), and `train` hands
// the plugin each video row's sound when its plan declares an audio input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/audio.hpp"
#include "support/av_clips.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using yeto::test::TempDir;
using ::testing::HasSubstr;

void model_dir(const TempDir& t, const nlohmann::json& inputs = nullptr) {
  nlohmann::json index = {{"_class_name", "YetoFullStepPipeline"}};
  if (!inputs.is_null()) index["yeto_test_inputs"] = inputs;
  t.write("model/model_index.json", index.dump());
}

std::pair<std::int64_t, std::int64_t> loud_span(const yeto::data::Audio& a) {
  std::int64_t on = -1, off = -1;
  for (std::int64_t i = 0; i < a.samples; ++i)
    if (std::fabs(a.pcm[static_cast<std::size_t>(i)]) > 0.1f) {
      if (on < 0) on = i;
      off = i + 1;
    }
  return {on, off};
}

TEST(AudioCli, SampleWritesTheGeneratedSoundIntoTheMp4AndBesideFrames) {
  TempDir t;
  model_dir(t);
  t.write("run.toml", "[model]\nid = \"" + (t / "model").string() + "\"\nadapter = \"fullstep\"\n[run]\ndevice = \"cpu\"\nthreads = 1\n");
  const std::vector<std::string> common = {"sample", "--config", (t / "run.toml").string(), "--prompt", "a beep", "--num-frames", "24",
                                           "--fps", "24", "--height", "32", "--width", "32", "--steps", "1"};
  auto args = common;
  args.insert(args.end(), {"--output", (t / "clip.mp4").string()});
  auto r = yeto::test::run_host(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  // The plugin's track is 10 ms longer than 24 frames at 24 fps: cut to the picture, and logged.
  EXPECT_THAT(r.all(), HasSubstr("the clip is 24 frames at 24 fps = 1.000 s: the last 160 samples cut"));
  const fs::path clip = t / "clip.mp4";
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "codec_name"), "aac");
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "sample_rate"), "16000");
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "channels"), "1");
  const double video = std::stod(yeto::test::ffprobe_stream(clip, "v", "duration"));
  const double audio = std::stod(yeto::test::ffprobe_stream(clip, "a", "duration"));
  EXPECT_NEAR(video, 1.0, 1e-6);
  EXPECT_NEAR(audio, video, 1024.0 / 16000);
  // The tone sounds while the square shows: frames [6, 12), i.e. [0.25, 0.5) s.
  auto [on, off] = loud_span(yeto::data::decode_audio(clip, {16000, 1}, {0.0, 1.0}, {}));
  EXPECT_NEAR(on, 4000, 48);
  EXPECT_NEAR(off, 8000, 48);

  args = common;
  args.insert(args.end(), {"--output", (t / "frames/").string()});
  r = yeto::test::run_host(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(fs::exists(t / "frames/frame-00023.png"));
  const auto wav = yeto::data::decode_audio(t / "frames/audio.wav", {16000, 1}, {}, {});
  EXPECT_EQ(wav.samples, 16160);  // the whole track
}

TEST(AudioCli, TrainingHandsTheDeclaredAudioOfEachRowToThePlugin) {
  TempDir t;
  model_dir(t, {{"audio", {{"sample_rate", 8000}, {"channels", 1}}}});
  yeto::test::AvClipSpec s;
  s.width = s.height = 16;
  yeto::test::av_clip(t / "data/a.mp4", s);
  s.bursts = {{0.25, 0.5}};
  yeto::test::av_clip(t / "data/b.mp4", s);
  t.write("data/train.jsonl", "{\"video\": \"a.mp4\", \"prompt\": \"a\"}\n{\"video\": \"b.mp4\", \"prompt\": \"b\"}\n");
  const std::string toml = "[model]\nid = \"" + (t / "model").string() +
                           "\"\nadapter = \"fullstep\"\n[run]\ndevice = \"cpu\"\nthreads = 1\n"
                           "[data]\npath = \"data/train.jsonl\"\nnum_frames = 8\nheight = 16\nwidth = 16\nworkers = 0\n"
                           "[train]\nmax_steps = 2\ncheckpoint_every = 0\n";
  t.write("run.toml", toml);
  auto r = yeto::test::run_host({"train", "--config", (t / "run.toml").string(), "--output", (t / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("takes audio: each video row's sound at 8000 Hz, 1 channel(s)"));
  std::istringstream in(yeto::test::read_text(t / "run/metrics.jsonl"));
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++steps;
    // 8 frames at 24 fps = 1/3 s = 2667 samples at 8 kHz.
    ASSERT_TRUE(j.contains("model/audio_samples")) << line;
    EXPECT_EQ(j.at("model/audio_samples").get<double>(), 2667.0) << line;
    EXPECT_EQ(j.at("model/audio_channels").get<double>(), 1.0) << line;
  }
  EXPECT_EQ(steps, 2);

  // A row without sound stops the run, named by its line; a rate the model does not take is refused.
  yeto::test::AvClipSpec silent = s;
  silent.audio_codec = "";
  yeto::test::av_clip(t / "data/silent.mp4", silent);
  t.write("data/train.jsonl", "{\"video\": \"a.mp4\", \"prompt\": \"a\"}\n{\"video\": \"silent.mp4\", \"prompt\": \"s\"}\n");
  r = yeto::test::run_host({"train", "--config", (t / "run.toml").string(), "--output", (t / "run2").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("train.jsonl line 2: " + (t / "data/silent.mp4").string() + ": has no audio stream"));
  t.write("run.toml", toml.substr(0, toml.find("[train]")) + "audio_sample_rate = 16000\n" + toml.substr(toml.find("[train]")));
  r = yeto::test::run_host({"train", "--config", (t / "run.toml").string(), "--output", (t / "run3").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("data.audio_sample_rate / data.audio_channels = 16000 Hz, 1 channel(s), but the model's plugin "
                                 "(fullstep) takes audio at 8000 Hz"));
}

TEST(AudioCli, DataCheckChecksRowsForWhatTheModelDeclares) {
  TempDir t;
  model_dir(t, {{"audio", {{"sample_rate", 8000}, {"channels", 1}}},
                {"tensors", {{"audio_latents", {{"shape", {-1, 2}}, {"with_latents", true}}}}}});
  yeto::test::AvClipSpec s;
  s.width = s.height = 16;
  yeto::test::av_clip(t / "data/a.mp4", s);
  s.audio_codec = "";
  yeto::test::av_clip(t / "data/silent.mp4", s);
  t.write("data/train.jsonl",
          "{\"video\": \"a.mp4\", \"prompt\": \"a\"}\n"
          "{\"video\": \"silent.mp4\", \"prompt\": \"s\"}\n"
          "{\"latents\": [[[0.5]]], \"prompt\": \"no audio latents\"}\n"
          "{\"latents\": [[[0.5]]], \"tensors\": {\"audio_latents\": [[1, 2, 3]]}, \"prompt\": \"wrong shape\"}\n");
  const std::string toml = "[model]\nid = \"" + (t / "model").string() +
                           "\"\nadapter = \"fullstep\"\n[data]\npath = \"data/train.jsonl\"\nnum_frames = 8\nheight = 16\n"
                           "width = 16\n";
  t.write("run.toml", toml);
  auto r = yeto::test::run_host({"data", "check", "--config", (t / "run.toml").string()});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows checked for what the model's plugin (fullstep) declares: audio at 8000 Hz, 1 channel(s); "
                               "audio_latents [-1, 2]"));
  EXPECT_THAT(r.out, HasSubstr("audio float32[1, 2667]: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 2: " + (t / "data/silent.mp4").string() + ": has no audio stream"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 3: the row has cached latents but no 'audio_latents'"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 4: tensor 'audio_latents' has shape [1, 3] but the model expects [-1, 2]"));
  // Without a readable model, data.* alone, and a warning says so.
  t.write("run.toml", "[model]\nid = \"" + (t / "nowhere").string() + "\"\n" + toml.substr(toml.find("adapter")));
  r = yeto::test::run_host({"data", "check", "--config", (t / "run.toml").string()});
  EXPECT_THAT(r.out, HasSubstr("what the model declares of its rows could not be read")) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows: 4 (4 usable, 0 bad)")) << r.all();
}

}  // namespace
