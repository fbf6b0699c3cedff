#include "data/av_input.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/log.h>
}

#include "core/error.hpp"

namespace yeto::data::av {
namespace fs = std::filesystem;

[[noreturn]] void bad(const std::string& msg) { throw Error(msg, ExitCode::bad_input); }

std::string error_text(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

namespace {

// Every demuxer except those that open further files or URLs named inside the input.
const std::string& allowed_demuxers() {
  static const std::string list = [] {
    static const char* refused[] = {"hls", "applehttp", "concat", "dash", "image2", "ffmetadata", "tee", "webm_dash_manifest",
                                    "sdp", "rtsp", "rtp", "mpd", "imf", "avisynth", "tty"};
    std::string out;
    void* it = nullptr;
    while (const AVInputFormat* f = av_demuxer_iterate(&it)) {
      bool skip = false;
      for (const char* r : refused)
        if (std::strcmp(f->name, r) == 0) skip = true;
      if (skip) continue;
      if (!out.empty()) out += ',';
      out += f->name;
    }
    return out;
  }();
  return list;
}

}  // namespace

FormatPtr open_container(const fs::path& path, const MediaLimits& limits) {
  // FFmpeg's own log lines would interleave with our reports; every failure it has is turned
  // into an error naming the file instead.
  static std::once_flag quiet;
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_FATAL); });
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) bad(path.string() + ": cannot read (" + ec.message() + ")");
  if (size == 0) bad(path.string() + ": empty file (0 bytes); replace it or remove the row");
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "protocol_whitelist", "file", 0);
  av_dict_set(&opts, "format_whitelist", allowed_demuxers().c_str(), 0);
  AVFormatContext* raw = nullptr;
  const std::string url = "file:" + path.string();
  const int rc = avformat_open_input(&raw, url.c_str(), nullptr, &opts);
  av_dict_free(&opts);
  if (rc < 0) bad(path.string() + ": not a readable media file (" + error_text(rc) + "); is the file truncated or corrupt?");
  FormatPtr fmt(raw);
  // The header's dimensions are checked before avformat_find_stream_info, which decodes a few
  // frames; its probe decoders are also capped by the codec option max_pixels.
  std::vector<AVDictionary*> stream_opts(fmt->nb_streams, nullptr);
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVCodecParameters* par = fmt->streams[i]->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO && par->width > 0 && par->height > 0 &&
        static_cast<std::int64_t>(par->width) * par->height > limits.max_pixels) {
      for (auto*& d : stream_opts) av_dict_free(&d);
      bad(path.string() + ": video declares " + std::to_string(par->width) + "x" + std::to_string(par->height) + " = " +
          std::to_string(static_cast<std::int64_t>(par->width) * par->height) + " pixels per frame, above data.max_pixels = " +
          std::to_string(limits.max_pixels) + "; refused before decoding (raise data.max_pixels if the video is genuine)");
    }
    av_dict_set_int(&stream_opts[i], "max_pixels", std::min<std::int64_t>(limits.max_pixels, INT32_MAX), 0);
    av_dict_set(&stream_opts[i], "threads", "1", 0);
  }
  // avformat_find_stream_info decodes frames to fill in what the header lacks (for a short
  // H.264 clip: most of its frames). Containers whose header already gives every video
  // stream's codec, size and rate and every audio stream's codec, rate and channels (MP4/MOV,
  // Matroska, WAV, FLAC, ...) skip it.
  bool header_complete = fmt->nb_streams > 0;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVStream* st = fmt->streams[i];
    const AVCodecParameters* par = st->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_AUDIO &&
        (par->codec_id == AV_CODEC_ID_NONE || par->sample_rate <= 0 || par->ch_layout.nb_channels <= 0))
      header_complete = false;
    if (par->codec_type != AVMEDIA_TYPE_VIDEO) continue;
    const bool rate = (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) || (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0);
    if (par->codec_id == AV_CODEC_ID_NONE || par->width <= 0 || par->height <= 0 || !rate) header_complete = false;
  }
  const int si = header_complete ? 0 : avformat_find_stream_info(fmt.get(), stream_opts.empty() ? nullptr : stream_opts.data());
  for (auto*& d : stream_opts) av_dict_free(&d);
  if (si < 0) bad(path.string() + ": cannot read stream information (" + error_text(si) + ")");
  return fmt;
}

}  // namespace yeto::data::av
