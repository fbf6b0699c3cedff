// Raw video through FFmpeg's libraries (any container and codec they decode), and frame
// sequences given as a directory of images or a list of image files.
//
// Budget first: the container's codec parameters (width x height against data.max_pixels, the
// declared or estimated frame count against data.max_frames) are checked before a decoder is
// opened, and every decoded frame is checked again, so a file that lies in its header is
// still refused. Demuxers that read other files or URLs (playlists, concat lists, image
// patterns) are not allowed, and only the `file` protocol is: a manifest can only make
// FFmpeg read the one file it names. Decoders run single-threaded (the loader parallelises
// across rows) with error detection set to fail on corrupt bitstreams.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/frame_sampling.hpp"
#include "data/image.hpp"
#include "data/options.hpp"

namespace yeto::data {

struct MediaLimits {
  std::int64_t max_pixels = 64LL << 20;
  std::int64_t max_frames = 4096;
};

struct VideoInfo {
  int width = 0;
  int height = 0;
  double fps = 0.0;                  // average frame rate; 0 when the container does not say
  std::int64_t declared_frames = 0;  // from the container, or estimated from the duration; 0: unknown
  std::string codec;
  std::string container;
};

// Sequential decoder in presentation order.
class VideoReader {
 public:
  VideoReader(const std::filesystem::path& path, const MediaLimits& limits);
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  // Decodes the next frame; converts it to RGB into `rgb` unless it is null. False at the end.
  bool next(Image* rgb);
  std::int64_t decoded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Container inspection only (no decoder is opened): throws on budget violations.
VideoInfo probe_video(const std::filesystem::path& path, const MediaLimits& limits);
// Exact number of video packets (frames), by demuxing without decoding; refuses above max_frames.
std::int64_t count_video_frames(const std::filesystem::path& path, const MediaLimits& limits);

struct ClipTarget {
  int width = 0;
  int height = 0;
  ResizeMode mode = ResizeMode::center_crop;
  std::int64_t num_frames = 1;
  double fps = 0.0;  // 0: keep the source rate
};

// frames x height x width x 3 bytes.
struct Clip {
  int width = 0;
  int height = 0;
  std::int64_t frames = 0;
  std::vector<std::uint8_t> rgb;
  std::int64_t source_frames = 0;
  double source_fps = 0.0;
  FrameSelection selection;
};

// `before_decode`, when given, is called with the stream's width and height once the container
// is open and before the first frame is decoded (the caller sizes its memory budget by it).
Clip decode_video_clip(const std::filesystem::path& path, const ClipTarget& target, const MediaLimits& limits,
                       const std::function<void(int width, int height)>& before_decode = {});
// `source_fps`: the sequence's declared rate; unset: treated as already at the target rate.
Clip decode_frame_list(const std::vector<std::filesystem::path>& frames, std::optional<double> source_fps, const ClipTarget& target,
                       const MediaLimits& limits);

}  // namespace yeto::data
