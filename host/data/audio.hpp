// Audio through FFmpeg's libraries: the audio stream of any file they demux (WAV, FLAC, MP3,
// M4A/AAC, Ogg/Vorbis/Opus, ... or the sound track of an MP4/MKV), resampled with libswresample
// to a requested rate and channel count, as float PCM.
//
// Time 0 is the stream's first decoded sample (muxers start a clip's audio and video together;
// codec priming is dropped by the decoder). The whole stream is resampled from its start (so a
// window's samples do not depend on where it starts) and decoding stops once the window's end
// is reached. Channels: mono output is the mean of the source channels (as torchaudio and
// librosa make mono); stereo output duplicates a mono source; sources with more than two
// channels are first downmixed to stereo with FFmpeg's standard matrix. The decoder runs
// single-threaded and fails on corrupt bitstreams (AV_EF_EXPLODE), so the same file always
// gives the same samples.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/frame_sampling.hpp"
#include "data/video.hpp"

namespace yeto::data {

struct AudioFormat {
  int sample_rate = 16000;
  int channels = 1;  // 1 or 2
};

struct AudioInfo {
  int sample_rate = 0;
  int channels = 0;
  double duration = 0.0;  // seconds, from the container; 0 when it does not say
  std::string codec;
  std::string container;
};

// A span of the stream in seconds; duration < 0: to the end of the stream.
struct AudioWindow {
  double start = 0.0;
  double duration = -1.0;
};

// Float PCM, channel-major: pcm[c * samples + i] is sample i of channel c.
struct Audio {
  int sample_rate = 0;
  int channels = 0;
  std::int64_t samples = 0;
  std::vector<float> pcm;
  AudioInfo source;
};

// Container inspection (no decoder is opened). Throws yeto::Error (bad_input) naming the file
// when it cannot be read or holds no audio stream.
AudioInfo probe_audio(const std::filesystem::path& path, const MediaLimits& limits);

// Decodes `window` of the file's audio at `format`: exactly round(duration * rate) samples
// starting at sample round(start * rate). Throws yeto::Error (bad_input) naming the file and
// what to do when it has no audio stream, the stream is corrupt, or it ends before the window
// does (a shortfall of up to `tolerance` seconds -- an encoder's last partial frame -- is
// filled with silence instead).
Audio decode_audio(const std::filesystem::path& path, const AudioFormat& format, const AudioWindow& window,
                   const MediaLimits& limits, double tolerance = 0.005);

// The time span of the frames a selection picked from a source at `source_fps`, at the
// selection's output rate `target_fps` (0: the source rate): from the first output frame's
// timestamp to the last one's plus one frame, padded frames included (their audio is
// silence: see real_duration). Returns the window and, in *real_duration, the part covered
// by real (not padded) frames.
AudioWindow frames_window(const FrameSelection& selection, double source_fps, double target_fps, double* real_duration);

// Samples of `seconds` at `rate`, rounded to nearest.
std::int64_t audio_samples(double seconds, int rate);

}  // namespace yeto::data
