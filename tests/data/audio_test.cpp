// Audio through FFmpeg and libswresample: formats, resampling and channel mixing, the window of
// a video row's sampled frames (checked to the sample against a burst that shows with a square
// in the picture), and the errors a bad file gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "data/audio.hpp"
#include "data/frame_sampling.hpp"
#include "data/video.hpp"
#include "data_test_util.hpp"
#include "support/av_clips.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::AvClipSpec;
using test::TempDir;
using ::testing::HasSubstr;

// First and one-past-last sample of channel `c` whose magnitude exceeds `threshold`.
std::pair<std::int64_t, std::int64_t> loud_span(const Audio& a, int c = 0, float threshold = 0.05f) {
  std::int64_t first = -1, last = -1;
  for (std::int64_t i = 0; i < a.samples; ++i)
    if (std::fabs(a.pcm[static_cast<std::size_t>(c * a.samples + i)]) > threshold) {
      if (first < 0) first = i;
      last = i + 1;
    }
  return {first, last};
}

float peak(const Audio& a, int c) {
  float m = 0;
  for (std::int64_t i = 0; i < a.samples; ++i) m = std::max(m, std::fabs(a.pcm[static_cast<std::size_t>(c * a.samples + i)]));
  return m;
}

// A lossless clip (FFV1 + 16-bit PCM in Matroska): 2 s at 24 fps, a tone and a square in [0.75, 1.0).
fs::path lossless_clip(const TempDir& dir, const std::string& name = "clip.mkv") {
  AvClipSpec s;
  s.video_codec = "ffv1";
  s.audio_codec = "pcm_s16le";
  return test::av_clip(dir.path() / name, s);
}

TEST(DataAudio, TheWindowOfTheSampledFramesHoldsTheirSoundToTheSample) {
  TempDir dir;
  const fs::path clip = lossless_clip(dir);
  const MediaLimits limits;
  // 48 frames, 24 taken: the centred window starts at frame 12 (0.5 s) and lasts 1 s.
  for (const double fps : {0.0, 12.0}) {
    SCOPED_TRACE("data.fps = " + std::to_string(fps));
    const std::int64_t n = fps > 0 ? 12 : 24;
    const FrameSelection sel = select_frames(count_video_frames(clip, limits), 24.0, fps, n);
    double real = 0;
    const AudioWindow w = frames_window(sel, 24.0, fps, &real);
    EXPECT_DOUBLE_EQ(w.start, 0.5);
    EXPECT_DOUBLE_EQ(w.duration, 1.0);
    EXPECT_DOUBLE_EQ(real, 1.0);
    const Audio a = decode_audio(clip, {16000, 1}, w, limits);
    ASSERT_EQ(a.samples, 16000);
    ASSERT_EQ(a.pcm.size(), 16000u);
    // The burst [0.75, 1.0) is [0.25, 0.5) s into the window: samples [4000, 8000) at 16 kHz. One
    // frame off would move it by 667 (24 fps) or 1333 (12 fps) samples; the resampler's filter
    // smears an edge by a few samples.
    const auto [on, off] = loud_span(a);
    EXPECT_NEAR(on, 4000, 8);
    EXPECT_NEAR(off, 8000, 8);
    EXPECT_NEAR(peak(a, 0), 0.5f, 0.01f);
    // And the picture agrees: the square shows on the output frames whose time is in the burst.
    const Clip v = decode_video_clip(clip, {16, 16, ResizeMode::stretch, n, fps}, limits);
    const double frame_seconds = 1.0 / (fps > 0 ? fps : 24.0);
    for (std::int64_t k = 0; k < n; ++k) {
      const std::uint8_t centre = v.rgb[static_cast<std::size_t>(((k * 16 + 8) * 16 + 8) * 3)];
      const double t = static_cast<double>(k) * frame_seconds;  // into the window
      EXPECT_EQ(centre > 128, t >= 0.25 - 1e-9 && t < 0.5 - 1e-9) << "output frame " << k;
    }
  }
}

TEST(DataAudio, PaddedClipsCoverTheirRealFramesAndReportTheRest) {
  // 48 frames asked of a 2 s clip at 12 fps after resampling to 12 fps: 24 real frames, 24 padded.
  const FrameSelection sel = select_frames(48, 24.0, 12.0, 48);
  double real = 0;
  const AudioWindow w = frames_window(sel, 24.0, 12.0, &real);
  EXPECT_DOUBLE_EQ(w.start, 0.0);
  EXPECT_DOUBLE_EQ(w.duration, 4.0);
  EXPECT_DOUBLE_EQ(real, 2.0);
}

TEST(DataAudio, TheSoundTrackOfAnMp4IsDemuxedAndResampled) {
  TempDir dir;
  AvClipSpec s;  // H.264 + AAC at 48 kHz
  const fs::path clip = test::av_clip(dir.path() / "clip.mp4", s);
  const AudioInfo info = probe_audio(clip, {});
  EXPECT_EQ(info.codec, "aac");
  EXPECT_EQ(info.sample_rate, 48000);
  EXPECT_EQ(info.channels, 1);
  const Audio a = decode_audio(clip, {16000, 1}, {0.5, 1.0}, {});
  ASSERT_EQ(a.samples, 16000);
  const auto [on, off] = loud_span(a, 0, 0.1f);
  EXPECT_NEAR(on, 4000, 48);  // AAC's transform smears an edge by a few milliseconds
  EXPECT_NEAR(off, 8000, 48);
  // The whole track: 2 s.
  const Audio all = decode_audio(clip, {16000, 1}, {}, {});
  EXPECT_NEAR(static_cast<double>(all.samples), 32000.0, 16000 * 0.025);
}

TEST(DataAudio, EveryCommonFormatDecodesToTheSameTimeline) {
  TempDir dir;
  AvClipSpec s;
  s.sample_rate = 44100;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"tone.wav", "pcm_s16le"}, {"tone.flac", "flac"}, {"tone.ogg", "libvorbis"}, {"tone.mp3", "libmp3lame"}, {"tone.m4a", "aac"}};
  for (const auto& [name, codec] : files) {
    SCOPED_TRACE(name);
    s.audio_codec = codec;
    const fs::path f = test::burst_audio(dir.path() / name, s);
    const Audio a = decode_audio(f, {16000, 1}, {0.0, 1.5}, {});
    ASSERT_EQ(a.samples, 24000);
    const auto [on, off] = loud_span(a, 0, 0.1f);
    EXPECT_NEAR(on, 12000, 16000 * 0.01);
    EXPECT_NEAR(off, 16000, 16000 * 0.01);
  }
}

TEST(DataAudio, ChannelsAreMixedOrDuplicatedAndDecodingIsDeterministic) {
  TempDir dir;
  AvClipSpec s;
  s.channels = 2;  // left 0.5, right 0.25
  s.audio_codec = "pcm_s16le";
  const fs::path f = test::burst_audio(dir.path() / "stereo.wav", s);
  const Audio stereo = decode_audio(f, {22050, 2}, {0.0, 2.0}, {});
  ASSERT_EQ(stereo.channels, 2);
  ASSERT_EQ(stereo.samples, 44100);
  EXPECT_NEAR(peak(stereo, 0), 0.5f, 0.01f);
  EXPECT_NEAR(peak(stereo, 1), 0.25f, 0.01f);
  const Audio mono = decode_audio(f, {22050, 1}, {0.0, 2.0}, {});
  EXPECT_NEAR(peak(mono, 0), 0.375f, 0.01f);  // the mean of the two channels
  for (std::int64_t i = 0; i < mono.samples; i += 97)
    EXPECT_NEAR(mono.pcm[static_cast<std::size_t>(i)],
                0.5f * (stereo.pcm[static_cast<std::size_t>(i)] + stereo.pcm[static_cast<std::size_t>(stereo.samples + i)]), 1e-6f);
  s.channels = 1;
  const fs::path m = test::burst_audio(dir.path() / "mono.wav", s);
  const Audio dup = decode_audio(m, {16000, 2}, {0.0, 2.0}, {});
  for (std::int64_t i = 0; i < dup.samples; ++i)
    ASSERT_EQ(dup.pcm[static_cast<std::size_t>(i)], dup.pcm[static_cast<std::size_t>(dup.samples + i)]);
  const Audio again = decode_audio(f, {22050, 2}, {0.0, 2.0}, {});
  EXPECT_EQ(again.pcm, stereo.pcm);
  // A window is the same samples as the whole stream's, wherever it starts.
  const Audio window = decode_audio(f, {22050, 2}, {0.5, 1.0}, {});
  ASSERT_EQ(window.samples, 22050);
  for (int c = 0; c < 2; ++c)
    for (std::int64_t i = 0; i < window.samples; ++i)
      ASSERT_EQ(window.pcm[static_cast<std::size_t>(c * window.samples + i)],
                stereo.pcm[static_cast<std::size_t>(c * stereo.samples + 11025 + i)])
          << "channel " << c << " sample " << i;
}

TEST(DataAudio, BadFilesAreErrorsNamingTheFileAndWhatToDo) {
  TempDir dir;
  const fs::path silent = test::indexed_video(dir.path() / "silent.mkv", 16, 16, 4, 24, 10);
  try {
    decode_audio(silent, {}, {0.0, 0.1}, {});
    FAIL() << "no audio stream was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("silent.mkv: has no audio stream"));
    EXPECT_THAT(e.what(), HasSubstr("'audio' field"));
  }
  AvClipSpec s;
  s.audio_codec = "flac";
  const fs::path flac = test::burst_audio(dir.path() / "tone.flac", s);
  try {
    decode_audio(flac, {}, {1.5, 1.0}, {});
    FAIL() << "a window beyond the end was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tone.flac: audio is 2.000 s long but the clip needs 1.500 s to 2.500 s"));
  }
  // Garbled frames: FLAC's CRCs catch them.
  std::string bytes = test::read_bytes(flac);
  for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 400; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  const fs::path bad = dir.path() / "garbled.flac";
  test::write_bytes(bad, bytes);
  try {
    decode_audio(bad, {}, {}, {});
    FAIL() << "a corrupt stream was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("garbled.flac: corrupt audio"));
  }
  test::write_bytes(dir.path() / "empty.wav", "");
  EXPECT_THROW(decode_audio(dir.path() / "empty.wav", {}, {}, {}), Error);
  test::write_bytes(dir.path() / "junk.wav", "RIFF\x10\0\0\0WAVEfmt junk junk junk");
  EXPECT_THROW(decode_audio(dir.path() / "junk.wav", {}, {}, {}), Error);
  EXPECT_THROW(decode_audio(flac, {16000, 3}, {}, {}), Error);
}

}  // namespace
}  // namespace yeto::data
