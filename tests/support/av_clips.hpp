// Short clips with sound for tests, made with the ffmpeg CLI (lavfi sources, nothing binary is
// committed): a black picture on which a white square shows exactly while a tone plays, so a
// test can check that sound and picture stay aligned through decoding, sampling and muxing.
// Burst edges are exact to the sample (the tone is an aevalsrc expression of t) and to the
// frame (the square is drawn on frames whose timestamp lies in a burst).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace yeto::test {

struct AvClipSpec {
  int width = 64;
  int height = 64;
  int fps = 24;
  double seconds = 2.0;
  int sample_rate = 48000;
  int channels = 1;       // 2: the tone on the left channel, half its amplitude on the right
  double tone_hz = 440.0;
  double amplitude = 0.5;
  std::vector<std::pair<double, double>> bursts = {{0.75, 1.0}};  // [start, end) seconds
  // Codecs: video "libx264" (MP4) or "ffv1" (Matroska, lossless); audio "aac", "pcm_s16le",
  // "flac", "libvorbis", "libmp3lame", ... or "" for a clip without sound.
  std::string video_codec = "libx264";
  std::string audio_codec = "aac";
};

// Writes a clip to `path` (its extension picks the container: .mp4, .mkv, ...).
std::filesystem::path av_clip(const std::filesystem::path& path, const AvClipSpec& spec);

// Writes the clip's sound alone (no video stream) to `path` (.wav, .flac, .ogg, .mp3, .m4a).
std::filesystem::path burst_audio(const std::filesystem::path& path, const AvClipSpec& spec);

// The aevalsrc expression of one channel: amplitude * sin(2 pi f t) inside the bursts, 0 outside.
std::string burst_expression(const AvClipSpec& spec, double amplitude);

// Reads one value of ffprobe's report of `path`'s first stream of `type` ("a" or "v"):
// `entry` is a stream entry such as "codec_name", "sample_rate", "channels", "duration".
std::string ffprobe_stream(const std::filesystem::path& path, const std::string& type, const std::string& entry);

}  // namespace yeto::test
