// Sample outputs besides single PNGs: MP4 clips through FFmpeg's libraries, frames directories
// of PNGs, and prompts files with per-prompt seeds. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace yeto::sample {

// A sound track: float PCM, channel-major (pcm[c * samples + i]), nominally in [-1, 1].
struct AudioTrack {
  std::vector<float> pcm;
  int sample_rate = 0;
  int channels = 0;  // 1 or 2
  std::int64_t samples() const { return channels > 0 ? static_cast<std::int64_t>(pcm.size()) / channels : 0; }
};

// Encodes `frames` RGB frames (frame-major, each height x width x 3 bytes) as an MP4 clip at
// `fps` frames per second and writes it atomically to `path` (a temporary file beside it,
// renamed when complete). `codec` "" picks H.264 (libx264) when this FFmpeg build has that
// encoder, else MPEG-4 part 2 ("mpeg4"); "libx264" or "mpeg4" forces one. Height and width
// must be even (4:2:0 chroma). With `audio`, the clip gets a sound track encoded with
// FFmpeg's native AAC encoder (Opus when this build has no AAC encoder; `audio_codec` forces
// one), resampled with libswresample only when the encoder does not take the track's rate.
// Audio timestamps count samples from 0 like the video's count frames, and packets of both
// streams are written in time order. Returns the encoders used ("libx264", "libx264 + aac").
// Throws yeto::Error naming the file.
std::string write_mp4(const std::filesystem::path& path, const std::vector<std::uint8_t>& rgb, int frames, int height,
                      int width, double fps, const std::string& codec = "", const AudioTrack* audio = nullptr,
                      const std::string& audio_codec = "");

// The encoder write_mp4 picks by default on this build ("libx264" or "mpeg4").
std::string default_video_codec();
// The audio encoder write_mp4 picks by default on this build ("aac", else "libopus" or "opus"; "" none).
std::string default_audio_codec();

// Writes `audio` as a 16-bit PCM WAV file (samples clamped to [-1, 1] and rounded), atomically.
void write_wav(const std::filesystem::path& path, const AudioTrack& audio);

// Writes each frame as <dir>/frame-00000.png, frame-00001.png, ... (atomically, file by file),
// creating `dir`. Returns the files written.
std::vector<std::filesystem::path> write_frames(const std::filesystem::path& dir, const std::vector<std::uint8_t>& rgb,
                                                int frames, int height, int width);

struct PromptEntry {
  std::string prompt;
  std::optional<std::uint64_t> seed;  // absent: the run's --seed
};

// A prompts file: one prompt per line, or JSON objects per line ({"prompt": "...", "seed": N},
// seed optional); both may mix. Blank lines are skipped and a trailing '\r' removed. Throws
// yeto::Error naming the file (and line) when it is missing, holds no prompt or a JSON line is
// malformed.
std::vector<PromptEntry> read_prompt_entries(const std::filesystem::path& path);

}  // namespace yeto::sample
