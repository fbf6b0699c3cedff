#include "data/video.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

#include "core/error.hpp"
#include "data/av_input.hpp"
#include "data/resize.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
namespace {

using av::bad;
using av::FormatPtr;
using av::open_container;
std::string av_error(int code) { return av::error_text(code); }

int best_video_stream(AVFormatContext* fmt, const fs::path& path, const AVCodec** codec) {
  const int idx = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, codec, 0);
  if (idx == AVERROR_STREAM_NOT_FOUND) bad(path.string() + ": no video stream");
  if (idx < 0 || !*codec) bad(path.string() + ": no decoder for its video stream (" + av_error(idx) + ")");
  return idx;
}

VideoInfo info_of(AVFormatContext* fmt, int idx, const fs::path& path, const MediaLimits& limits) {
  const AVStream* st = fmt->streams[idx];
  const AVCodecParameters* par = st->codecpar;
  VideoInfo info;
  info.width = par->width;
  info.height = par->height;
  info.codec = avcodec_get_name(par->codec_id);
  info.container = fmt->iformat ? fmt->iformat->name : "";
  AVRational r = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
  info.fps = r.num > 0 && r.den > 0 ? av_q2d(r) : 0.0;
  if (st->nb_frames > 0) info.declared_frames = st->nb_frames;
  else if (info.fps > 0 && st->duration > 0 && st->time_base.den > 0)
    info.declared_frames = static_cast<std::int64_t>(static_cast<double>(st->duration) * av_q2d(st->time_base) * info.fps + 0.5);
  else if (info.fps > 0 && fmt->duration > 0)
    info.declared_frames = static_cast<std::int64_t>(static_cast<double>(fmt->duration) / AV_TIME_BASE * info.fps + 0.5);
  if (info.width <= 0 || info.height <= 0) bad(path.string() + ": video stream declares no frame size");
  const std::int64_t pixels = static_cast<std::int64_t>(info.width) * info.height;
  if (pixels > limits.max_pixels)
    bad(path.string() + ": video declares " + std::to_string(info.width) + "x" + std::to_string(info.height) + " = " +
        std::to_string(pixels) + " pixels per frame, above data.max_pixels = " + std::to_string(limits.max_pixels) +
        "; refused before decoding (raise data.max_pixels if the video is genuine)");
  if (info.declared_frames > limits.max_frames)
    bad(path.string() + ": video declares " + std::to_string(info.declared_frames) + " frames, above data.max_frames = " +
        std::to_string(limits.max_frames) + "; refused before decoding (trim the clip or raise data.max_frames)");
  return info;
}

}  // namespace

struct VideoReader::Impl {
  fs::path path;
  MediaLimits limits;
  FormatPtr fmt;
  AVCodecContext* dec = nullptr;
  SwsContext* sws = nullptr;
  AVPacket* pkt = nullptr;
  AVFrame* frame = nullptr;
  int stream = -1;
  bool flushed = false;
  std::int64_t decoded = 0;
  VideoInfo info;

  ~Impl() {
    if (sws) sws_freeContext(sws);
    if (frame) av_frame_free(&frame);
    if (pkt) av_packet_free(&pkt);
    if (dec) avcodec_free_context(&dec);
  }

  void convert(Image& out) {
    const int w = frame->width, h = frame->height;
    if (w <= 0 || h <= 0 || static_cast<std::int64_t>(w) * h > limits.max_pixels)
      bad(path.string() + ": decoded frame " + std::to_string(decoded) + " has size " + std::to_string(w) + "x" + std::to_string(h) +
          ", outside data.max_pixels = " + std::to_string(limits.max_pixels));
    sws = sws_getCachedContext(sws, w, h, static_cast<AVPixelFormat>(frame->format), w, h, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr,
                               nullptr, nullptr);
    if (!sws) bad(path.string() + ": cannot convert pixel format " + std::to_string(frame->format) + " to RGB");
    out.width = w;
    out.height = h;
    out.rgb.resize(static_cast<std::size_t>(w) * h * 3);
    uint8_t* dst[4] = {out.rgb.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {w * 3, 0, 0, 0};
    sws_scale(sws, frame->data, frame->linesize, 0, h, dst, dst_stride);
  }
};

VideoReader::VideoReader(const fs::path& path, const MediaLimits& limits) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.limits = limits;
  m.fmt = open_container(path, limits);
  const AVCodec* codec = nullptr;
  m.stream = best_video_stream(m.fmt.get(), path, &codec);
  m.info = info_of(m.fmt.get(), m.stream, path, limits);  // budget check before the decoder exists
  m.dec = avcodec_alloc_context3(codec);
  if (!m.dec) bad(path.string() + ": out of memory opening the decoder");
  if (avcodec_parameters_to_context(m.dec, m.fmt->streams[m.stream]->codecpar) < 0) bad(path.string() + ": bad codec parameters");
  m.dec->thread_count = 1;
  m.dec->max_pixels = std::min<std::int64_t>(limits.max_pixels, INT32_MAX);
  m.dec->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK | AV_EF_BITSTREAM;
  const int rc = avcodec_open2(m.dec, codec, nullptr);
  if (rc < 0) bad(path.string() + ": cannot open the " + m.info.codec + " decoder (" + av_error(rc) + ")");
  m.pkt = av_packet_alloc();
  m.frame = av_frame_alloc();
  if (!m.pkt || !m.frame) bad(path.string() + ": out of memory");
}

VideoReader::~VideoReader() = default;
const VideoInfo& VideoReader::info() const { return impl_->info; }
std::int64_t VideoReader::decoded() const { return impl_->decoded; }

bool VideoReader::next(Image* rgb) {
  Impl& m = *impl_;
  for (;;) {
    int rc = avcodec_receive_frame(m.dec, m.frame);
    if (rc == 0) {
      ++m.decoded;
      if (m.decoded > m.limits.max_frames)
        bad(m.path.string() + ": more than data.max_frames = " + std::to_string(m.limits.max_frames) + " frames");
      if (rgb) m.convert(*rgb);
      av_frame_unref(m.frame);
      return true;
    }
    if (rc == AVERROR_EOF) return false;
    if (rc != AVERROR(EAGAIN)) bad(m.path.string() + ": corrupt video: decoding frame " + std::to_string(m.decoded + 1) + " failed (" + av_error(rc) + ")");
    if (m.flushed) return false;
    rc = av_read_frame(m.fmt.get(), m.pkt);
    if (rc < 0) {
      if (rc != AVERROR_EOF && m.decoded == 0) bad(m.path.string() + ": corrupt video: reading failed (" + av_error(rc) + ")");
      avcodec_send_packet(m.dec, nullptr);  // flush the decoder's delayed frames
      m.flushed = true;
      continue;
    }
    if (m.pkt->stream_index != m.stream) {
      av_packet_unref(m.pkt);
      continue;
    }
    rc = avcodec_send_packet(m.dec, m.pkt);
    av_packet_unref(m.pkt);
    if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_EOF)
      bad(m.path.string() + ": corrupt video: decoding frame " + std::to_string(m.decoded + 1) + " failed (" + av_error(rc) + ")");
  }
}

VideoInfo probe_video(const fs::path& path, const MediaLimits& limits) {
  FormatPtr fmt = open_container(path, limits);
  const AVCodec* codec = nullptr;
  const int idx = best_video_stream(fmt.get(), path, &codec);
  return info_of(fmt.get(), idx, path, limits);
}

std::int64_t count_video_frames(const fs::path& path, const MediaLimits& limits) {
  FormatPtr fmt = open_container(path, limits);
  const AVCodec* codec = nullptr;
  const int idx = best_video_stream(fmt.get(), path, &codec);
  info_of(fmt.get(), idx, path, limits);
  AVPacket* pkt = av_packet_alloc();
  std::int64_t n = 0;
  while (av_read_frame(fmt.get(), pkt) >= 0) {
    if (pkt->stream_index == idx) ++n;
    av_packet_unref(pkt);
    if (n > limits.max_frames) {
      av_packet_free(&pkt);
      bad(path.string() + ": video has more than data.max_frames = " + std::to_string(limits.max_frames) +
          " frames; trim the clip or raise data.max_frames");
    }
  }
  av_packet_free(&pkt);
  if (n == 0) bad(path.string() + ": video stream holds no frames");
  return n;
}

Clip decode_video_clip(const fs::path& path, const ClipTarget& t, const MediaLimits& limits,
                       const std::function<void(int width, int height)>& before_decode) {
  const std::int64_t count = count_video_frames(path, limits);
  VideoReader reader(path, limits);
  if (before_decode) before_decode(reader.info().width, reader.info().height);
  Clip clip;
  clip.width = t.width;
  clip.height = t.height;
  clip.frames = t.num_frames;
  clip.source_frames = count;
  clip.source_fps = reader.info().fps;
  clip.selection = select_frames(count, clip.source_fps, t.fps, t.num_frames);
  const std::size_t frame_bytes = static_cast<std::size_t>(t.width) * t.height * 3;
  clip.rgb.resize(frame_bytes * static_cast<std::size_t>(t.num_frames));
  const auto& idx = clip.selection.indices;
  const std::int64_t last_needed = *std::max_element(idx.begin(), idx.end());
  Image frame;
  std::int64_t i = 0;
  std::int64_t last_done = -1;  // highest source index converted so far
  std::vector<std::uint8_t> last_frame;
  for (; i <= last_needed; ++i) {
    const bool needed = std::find(idx.begin(), idx.end(), i) != idx.end();
    if (!reader.next(needed ? &frame : nullptr)) break;
    if (!needed) continue;
    std::vector<std::uint8_t> resized(frame_bytes);
    resize_rgb(frame.rgb.data(), frame.width, frame.height, resized.data(), t.width, t.height, t.mode);
    for (std::size_t k = 0; k < idx.size(); ++k)
      if (idx[k] == i) std::memcpy(clip.rgb.data() + k * frame_bytes, resized.data(), frame_bytes);
    last_done = i;
    last_frame = std::move(resized);
  }
  if (last_done < 0) bad(path.string() + ": no decodable frames");
  // The container counted more packets than the decoder produced (e.g. a trailing partial
  // frame): the missing positions repeat the last decoded frame, like padding.
  for (std::size_t k = 0; k < idx.size(); ++k)
    if (idx[k] > last_done) std::memcpy(clip.rgb.data() + k * frame_bytes, last_frame.data(), frame_bytes);
  return clip;
}

Clip decode_frame_list(const std::vector<fs::path>& frames, std::optional<double> source_fps, const ClipTarget& t,
                       const MediaLimits& limits) {
  const auto count = static_cast<std::int64_t>(frames.size());
  if (count == 0) bad("empty frame list");
  if (count > limits.max_frames)
    bad("frame list has " + std::to_string(count) + " images, above data.max_frames = " + std::to_string(limits.max_frames));
  Clip clip;
  clip.width = t.width;
  clip.height = t.height;
  clip.frames = t.num_frames;
  clip.source_frames = count;
  clip.source_fps = source_fps.value_or(t.fps);
  clip.selection = select_frames(count, clip.source_fps, t.fps, t.num_frames);
  const std::size_t frame_bytes = static_cast<std::size_t>(t.width) * t.height * 3;
  clip.rgb.resize(frame_bytes * static_cast<std::size_t>(t.num_frames));
  const auto& idx = clip.selection.indices;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    if (k > 0 && idx[k] == idx[k - 1]) {
      std::memcpy(clip.rgb.data() + k * frame_bytes, clip.rgb.data() + (k - 1) * frame_bytes, frame_bytes);
      continue;
    }
    const Image img = decode_image_file(frames[static_cast<std::size_t>(idx[k])], limits.max_pixels);
    resize_rgb(img.rgb.data(), img.width, img.height, clip.rgb.data() + k * frame_bytes, t.width, t.height, t.mode);
  }
  return clip;
}

}  // namespace yeto::data
