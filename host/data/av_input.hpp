// Opening a media file with FFmpeg's demuxers, shared by the video and audio readers: only the
// `file` protocol and demuxers that cannot open further files (no playlists, concat lists or
// image patterns), the video budget (data.max_pixels) checked against the header before
// avformat_find_stream_info, which runs only when the header lacks a stream's parameters.
// Internal to yeto_data: includes FFmpeg's headers.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

extern "C" {
#include <libavformat/avformat.h>
}

#include "data/video.hpp"

namespace yeto::data::av {

[[noreturn]] void bad(const std::string& msg);
std::string error_text(int code);

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatCloser>;

// Throws yeto::Error (bad_input) naming the file when it cannot be opened or is over budget.
FormatPtr open_container(const std::filesystem::path& path, const MediaLimits& limits);

}  // namespace yeto::data::av
