// MP4 clips with a sound track and WAV files, read back with ffprobe and our own decoders:
// the audio stream's codec, rate, channels and duration, packets interleaved in time order,
// picture and sound in sync, deterministic bytes, refused tracks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <malloc.h>

#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "data/audio.hpp"
#include "data/video.hpp"
#include "sample/media.hpp"
#include "support/av_clips.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace yeto::sample {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

constexpr double kPi = 3.14159265358979323846;

// 2 s at 24 fps, 64x64: a white square on frames 18-23 ([0.75, 1.0) s) and a tone at the same
// time; the tone on the left channel, half as loud on the right.
struct Clip {
  std::vector<std::uint8_t> rgb;
  AudioTrack audio;
};

Clip burst_clip(int rate, int channels, double seconds = 2.0) {
  Clip c;
  const int frames = static_cast<int>(std::lround(seconds * 24));
  c.rgb.assign(static_cast<std::size_t>(frames) * 64 * 64 * 3, 0);
  for (int f = 18; f < 24 && f < frames; ++f)
    for (int y = 16; y < 48; ++y)
      for (int x = 16; x < 48; ++x)
        for (int k = 0; k < 3; ++k) c.rgb[static_cast<std::size_t>(((f * 64 + y) * 64 + x) * 3 + k)] = 255;
  const auto n = static_cast<std::int64_t>(std::lround(seconds * rate));
  c.audio.sample_rate = rate;
  c.audio.channels = channels;
  c.audio.pcm.assign(static_cast<std::size_t>(n * channels), 0.0f);
  for (int ch = 0; ch < channels; ++ch)
    for (std::int64_t i = 0; i < n; ++i) {
      const double t = static_cast<double>(i) / rate;
      if (t >= 0.75 && t < 1.0)
        c.audio.pcm[static_cast<std::size_t>(ch * n + i)] = static_cast<float>((ch ? 0.25 : 0.5) * std::sin(2 * kPi * 440 * t));
    }
  return c;
}

double probe_double(const fs::path& p, const std::string& type, const std::string& entry) {
  return std::stod(test::ffprobe_stream(p, type, entry));
}

TEST(SampleMp4Audio, TheClipGetsAnAacTrackOfTheRightRateChannelsAndDuration) {
  TempDir t;
  for (const auto& [rate, channels] : std::vector<std::pair<int, int>>{{16000, 1}, {44100, 2}}) {
    SCOPED_TRACE(std::to_string(rate) + " Hz x" + std::to_string(channels));
    const Clip c = burst_clip(rate, channels);
    const fs::path out = t / ("clip-" + std::to_string(rate) + ".mp4");
    const std::string used = write_mp4(out, c.rgb, 48, 64, 64, 24.0, "", &c.audio);
    EXPECT_THAT(used, HasSubstr("+ aac"));
    EXPECT_EQ(test::ffprobe_stream(out, "a", "codec_name"), "aac");
    EXPECT_EQ(test::ffprobe_stream(out, "a", "sample_rate"), std::to_string(rate));
    EXPECT_EQ(test::ffprobe_stream(out, "a", "channels"), std::to_string(channels));
    const double video = probe_double(out, "v", "duration"), audio = probe_double(out, "a", "duration");
    EXPECT_NEAR(video, 2.0, 1e-6);
    EXPECT_NEAR(audio, video, 1024.0 / rate);  // within one AAC frame
    // Sound and picture still agree: our decoders find the tone where the square is.
    const data::Audio a = data::decode_audio(out, {16000, 1}, {0.0, 2.0}, {});
    std::int64_t on = -1, off = -1;
    for (std::int64_t i = 0; i < a.samples; ++i)
      if (std::fabs(a.pcm[static_cast<std::size_t>(i)]) > 0.1f) {
        if (on < 0) on = i;
        off = i + 1;
      }
    EXPECT_NEAR(on, 12000, 48);
    EXPECT_NEAR(off, 16000, 48);
    const data::Clip v = data::decode_video_clip(out, {8, 8, data::ResizeMode::stretch, 48, 0.0}, {});
    for (int f = 0; f < 48; ++f)
      EXPECT_EQ(v.rgb[static_cast<std::size_t>(((f * 8 + 4) * 8 + 4) * 3)] > 128, f >= 18 && f < 24) << "frame " << f;
  }
}

TEST(SampleMp4Audio, PacketsAreInterleavedInTimeOrderAndTheBytesAreDeterministic) {
  TempDir t;
  const Clip c = burst_clip(16000, 1, 4.0);
  const fs::path a = t / "a.mp4", b = t / "b.mp4";
  write_mp4(a, c.rgb, 96, 64, 64, 24.0, "", &c.audio);
  write_mp4(b, c.rgb, 96, 64, 64, 24.0, "", &c.audio);
  EXPECT_EQ(test::read_text(a), test::read_text(b));
  const auto r = test::run_process({"ffprobe", "-v", "error", "-show_entries", "packet=codec_type,dts_time", "-of", "csv=p=0",
                                    a.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  std::istringstream lines(r.out);
  std::string line;
  double latest = 0, worst = 0;
  int audio_packets = 0, video_packets = 0, switches = 0;
  std::string last_type;
  while (std::getline(lines, line)) {
    const auto comma = line.find(',');
    if (comma == std::string::npos) continue;
    const std::string type = line.substr(0, comma);
    const double time = std::stod(line.substr(comma + 1));
    (type == "audio" ? audio_packets : video_packets)++;
    if (!last_type.empty() && type != last_type) ++switches;
    last_type = type;
    worst = std::max(worst, latest - time);
    latest = std::max(latest, time);
  }
  EXPECT_EQ(video_packets, 96);
  EXPECT_GE(audio_packets, 4 * 16000 / 1024);
  EXPECT_GT(switches, 10);     // not one stream after the other
  EXPECT_LT(worst, 0.5);       // never far back in time (the muxer's interleaving window)
  // No temporary file is left beside the outputs.
  int files = 0;
  for (const auto& e : fs::directory_iterator(t.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);
}

// Same frames, same bytes, whatever the process's heap held before: the encoders' buffers are
// recycled memory (glibc's M_PERTURB fills each new allocation with a different byte per
// write here), and junk lies just past the frames in the caller's allocation. The frames are
// five that NAVA's tiny-av preset sampled (tests/fixtures/video/README.md): on a CPU with
// AVX-512, x264's AVX-512 kernels gave a different file for each perturb byte on them;
// write_mp4 holds x264 to AVX2 there.
TEST(SampleMp4, TheBytesDoNotDependOnWhatTheHeapHeld) {
  TempDir t;
  const int frames = 5, size = 64;
  const std::string raw = test::read_text(fs::path(YETO_TEST_FIXTURES) / "video" / "nava-tiny-av-5x64x64.rgb");
  const std::size_t n = static_cast<std::size_t>(frames) * size * size * 3;
  ASSERT_EQ(raw.size(), n);
  AudioTrack sound;
  sound.sample_rate = 24000;
  sound.channels = 1;
  sound.pcm.resize(24000 * frames / 24);
  for (std::size_t i = 0; i < sound.pcm.size(); ++i) sound.pcm[i] = static_cast<float>(0.3 * std::sin(0.05 * i));
  std::vector<std::string> files;
  for (const int junk : {0x00, 0x55, 0xaa, 0xff}) {
    std::vector<std::uint8_t> v(n + 4096, static_cast<std::uint8_t>(junk));
    v.resize(n);  // the junk stays in the allocation, just past the frames
    std::copy(raw.begin(), raw.end(), v.begin());
    ASSERT_EQ(mallopt(M_PERTURB, junk), 1);
    const fs::path out = t / ("junk-" + std::to_string(junk) + ".mp4");
    write_mp4(out, v, frames, size, size, 24.0, "", &sound);
    mallopt(M_PERTURB, 0);
    files.push_back(test::read_text(out));
  }
  for (std::size_t i = 1; i < files.size(); ++i)
    EXPECT_TRUE(files[i] == files[0]) << "perturb byte run " << i << ": " << files[i].size() << " bytes against "
                                      << files[0].size();
}

TEST(SampleMp4Audio, OpusIsUsedWhenAskedAndOddRatesAreResampled) {
  TempDir t;
  const Clip c = burst_clip(22050, 1);
  const fs::path out = t / "opus.mp4";
  const std::string used = write_mp4(out, c.rgb, 48, 64, 64, 24.0, "", &c.audio, "libopus");
  EXPECT_THAT(used, HasSubstr("+ libopus"));
  EXPECT_EQ(test::ffprobe_stream(out, "a", "codec_name"), "opus");
  EXPECT_NEAR(probe_double(out, "a", "duration"), 2.0, 0.03);
}

TEST(SampleMp4Audio, BadTracksAreRefusedAndNothingIsWritten) {
  TempDir t;
  Clip c = burst_clip(16000, 1);
  c.audio.channels = 3;
  EXPECT_THROW(write_mp4(t / "x.mp4", c.rgb, 48, 64, 64, 24.0, "", &c.audio), Error);
  c = burst_clip(16000, 2);
  c.audio.pcm[5] = std::nanf("");
  try {
    write_mp4(t / "x.mp4", c.rgb, 48, 64, 64, 24.0, "", &c.audio);
    FAIL() << "a NaN sample was written";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.mp4: the audio track holds NaN"));
  }
  c.audio.pcm.pop_back();
  EXPECT_THROW(write_wav(t / "x.wav", c.audio), Error);
  EXPECT_TRUE(fs::is_empty(t.path()));
}

TEST(SampleWav, AWavHoldsTheTrackAt16Bits) {
  TempDir t;
  const Clip c = burst_clip(16000, 2);
  write_wav(t / "out/sound.wav", c.audio);
  EXPECT_EQ(test::ffprobe_stream(t / "out/sound.wav", "a", "codec_name"), "pcm_s16le");
  const data::Audio a = data::decode_audio(t / "out/sound.wav", {16000, 2}, {}, {});
  ASSERT_EQ(a.samples, 32000);
  for (std::size_t i = 0; i < a.pcm.size(); ++i) ASSERT_NEAR(a.pcm[i], c.audio.pcm[i], 1.0f / 32767) << i;
}

}  // namespace
}  // namespace yeto::sample
