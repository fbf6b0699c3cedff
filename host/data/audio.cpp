#include "data/audio.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

#include "data/av_input.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using av::bad;

namespace {

// The longest stretch of audio one call decodes (at the target rate), so a file that lies
// about its length cannot exhaust memory.
constexpr double kMaxAudioSeconds = 3600.0;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

int best_audio_stream(AVFormatContext* fmt, const fs::path& path, const AVCodec** codec) {
  const int idx = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, codec, 0);
  if (idx == AVERROR_STREAM_NOT_FOUND)
    bad(path.string() + ": has no audio stream; give the row a sound file in its 'audio' field, or use a video with a sound track");
  if (idx < 0 || !*codec) bad(path.string() + ": no decoder for its audio stream (" + av::error_text(idx) + ")");
  return idx;
}

AudioInfo info_of(const AVFormatContext* fmt, int idx) {
  const AVStream* st = fmt->streams[idx];
  AudioInfo info;
  info.sample_rate = st->codecpar->sample_rate;
  info.channels = st->codecpar->ch_layout.nb_channels;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  info.container = fmt->iformat ? fmt->iformat->name : "";
  if (st->duration > 0 && st->time_base.den > 0) info.duration = static_cast<double>(st->duration) * av_q2d(st->time_base);
  else if (fmt->duration > 0) info.duration = static_cast<double>(fmt->duration) / AV_TIME_BASE;
  return info;
}

struct Decoder {
  AVCodecContext* dec = nullptr;
  SwrContext* swr = nullptr;
  AVPacket* pkt = nullptr;
  AVFrame* frame = nullptr;
  ~Decoder() {
    swr_free(&swr);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&dec);
  }
};

}  // namespace

std::int64_t audio_samples(double seconds, int rate) { return std::llround(seconds * static_cast<double>(rate)); }

AudioWindow frames_window(const FrameSelection& s, double source_fps, double target_fps, double* real_duration) {
  const auto n = static_cast<std::int64_t>(s.indices.size());
  const bool resample = target_fps > 0.0 && source_fps > 0.0 && std::abs(target_fps - source_fps) > 1e-9;
  const double fps = resample ? target_fps : source_fps;
  // The first output frame's position on the (resampled) timeline, as select_frames placed it.
  const std::int64_t first = s.padded > 0 ? 0 : (s.resampled_frames - n) / 2;
  AudioWindow w;
  w.start = static_cast<double>(first) / fps;
  w.duration = static_cast<double>(n) / fps;
  if (real_duration) *real_duration = static_cast<double>(n - s.padded) / fps;
  return w;
}

AudioInfo probe_audio(const fs::path& path, const MediaLimits& limits) {
  auto fmt = av::open_container(path, limits);
  const AVCodec* codec = nullptr;
  const int idx = best_audio_stream(fmt.get(), path, &codec);
  AudioInfo info = info_of(fmt.get(), idx);
  if (info.sample_rate <= 0 || info.channels <= 0)
    bad(path.string() + ": its audio stream declares no sample rate or channels; is the file truncated or corrupt?");
  return info;
}

Audio decode_audio(const fs::path& path, const AudioFormat& format, const AudioWindow& window, const MediaLimits& limits,
                   double tolerance) {
  if (format.sample_rate < 1000 || format.sample_rate > 384000)
    bad(path.string() + ": audio sample rate " + std::to_string(format.sample_rate) + " Hz is outside [1000, 384000]");
  if (format.channels != 1 && format.channels != 2)
    bad(path.string() + ": audio channels " + std::to_string(format.channels) + ": only 1 (mono) or 2 (stereo) are supported");
  if (!(window.start >= 0.0) || !std::isfinite(window.duration))
    bad(path.string() + ": audio window starts at " + std::to_string(window.start) + " s; it must be a time >= 0");
  const int rate = format.sample_rate;
  const std::int64_t first = audio_samples(window.start, rate);
  const bool to_end = window.duration < 0.0;
  const std::int64_t wanted = to_end ? -1 : audio_samples(window.duration, rate);
  const std::int64_t cap = audio_samples(kMaxAudioSeconds, rate);
  if (!to_end && first + wanted > cap)
    bad(path.string() + ": audio window ends at " + seconds_text(window.start + window.duration) + ", beyond the " +
        seconds_text(kMaxAudioSeconds) + " one row may decode; cut the clip");
  const std::int64_t end = to_end ? cap : first + wanted;  // stop once this many samples are resampled

  auto fmt = av::open_container(path, limits);
  const AVCodec* codec = nullptr;
  const int idx = best_audio_stream(fmt.get(), path, &codec);
  Audio out;
  out.source = info_of(fmt.get(), idx);
  out.sample_rate = rate;
  out.channels = format.channels;

  Decoder d;
  d.dec = avcodec_alloc_context3(codec);
  if (!d.dec) bad(path.string() + ": out of memory opening the audio decoder");
  if (avcodec_parameters_to_context(d.dec, fmt->streams[idx]->codecpar) < 0) bad(path.string() + ": bad audio codec parameters");
  d.dec->thread_count = 1;
  d.dec->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;
  int rc = avcodec_open2(d.dec, codec, nullptr);
  if (rc < 0) bad(path.string() + ": cannot open the " + out.source.codec + " decoder (" + av::error_text(rc) + ")");
  d.pkt = av_packet_alloc();
  d.frame = av_frame_alloc();
  if (!d.pkt || !d.frame) bad(path.string() + ": out of memory");

  // Resampled channels (the source's, or stereo for more than two) from the window's first
  // sample on, appended as they come; `produced` counts every resampled sample.
  std::vector<std::vector<float>> planes;
  int in_rate = 0, in_format = -1;
  AVChannelLayout in_layout{};
  std::int64_t produced = 0;
  auto append = [&](const std::uint8_t* const* data, int count) {
    const auto skip = static_cast<int>(std::clamp<std::int64_t>(first - produced, 0, count));
    for (std::size_t c = 0; c < planes.size(); ++c) {
      const auto* p = reinterpret_cast<const float*>(data[c]);
      planes[c].insert(planes[c].end(), p + skip, p + count);
    }
    produced += count;
  };
  std::vector<std::uint8_t*> out_ptrs;
  std::vector<std::vector<float>> scratch;
  auto convert = [&](const AVFrame* f) {
    const int in_count = f ? f->nb_samples : 0;
    const int capacity = swr_get_out_samples(d.swr, in_count);
    if (capacity < 0) bad(path.string() + ": audio resampling failed");
    if (capacity == 0) return;
    for (auto& s : scratch) s.resize(static_cast<std::size_t>(capacity));
    for (std::size_t c = 0; c < scratch.size(); ++c) out_ptrs[c] = reinterpret_cast<std::uint8_t*>(scratch[c].data());
    const int n = swr_convert(d.swr, out_ptrs.data(), capacity, f ? const_cast<const std::uint8_t**>(f->extended_data) : nullptr,
                              in_count);
    if (n < 0) bad(path.string() + ": audio resampling failed (" + av::error_text(n) + ")");
    std::vector<const std::uint8_t*> src(out_ptrs.begin(), out_ptrs.end());
    append(src.data(), n);
  };
  auto start_resampler = [&](const AVFrame* f) {
    in_rate = f->sample_rate;
    in_format = f->format;
    if (av_channel_layout_copy(&in_layout, &f->ch_layout) < 0) bad(path.string() + ": out of memory");
    const int src_channels = f->ch_layout.nb_channels;
    if (in_rate <= 0 || src_channels <= 0) bad(path.string() + ": corrupt audio: a frame without sample rate or channels");
    AVChannelLayout out_layout{};
    if (src_channels <= 2) av_channel_layout_default(&out_layout, src_channels);
    else out_layout = AV_CHANNEL_LAYOUT_STEREO;
    // A layout FFmpeg cannot name (channels without positions) is taken as its default order.
    AVChannelLayout in_named{};
    if (f->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC) av_channel_layout_default(&in_named, src_channels);
    else av_channel_layout_copy(&in_named, &f->ch_layout);
    rc = swr_alloc_set_opts2(&d.swr, &out_layout, AV_SAMPLE_FMT_FLTP, rate, &in_named, static_cast<AVSampleFormat>(in_format),
                             in_rate, 0, nullptr);
    av_channel_layout_uninit(&in_named);
    if (rc < 0 || !d.swr || swr_init(d.swr) < 0)
      bad(path.string() + ": cannot resample its audio (" + std::to_string(in_rate) + " Hz, " + std::to_string(src_channels) +
          " channels) to " + std::to_string(rate) + " Hz");
    planes.assign(static_cast<std::size_t>(out_layout.nb_channels), {});
    scratch.assign(planes.size(), {});
    out_ptrs.assign(planes.size(), nullptr);
    av_channel_layout_uninit(&out_layout);
  };

  bool flushed = false;
  std::int64_t frames_decoded = 0;
  while (produced < end) {
    rc = avcodec_receive_frame(d.dec, d.frame);
    if (rc == 0) {
      ++frames_decoded;
      if (!d.swr) start_resampler(d.frame);
      else if (d.frame->sample_rate != in_rate || d.frame->format != in_format ||
               av_channel_layout_compare(&d.frame->ch_layout, &in_layout) != 0)
        bad(path.string() + ": its audio changes sample rate, format or channels mid-stream; re-encode it (ffmpeg -i IN -ar " +
            std::to_string(rate) + " OUT.wav)");
      convert(d.frame);
      av_frame_unref(d.frame);
      continue;
    }
    if (rc == AVERROR_EOF) break;
    if (rc != AVERROR(EAGAIN))
      bad(path.string() + ": corrupt audio: decoding failed after " + seconds_text(static_cast<double>(produced) / rate) + " (" +
          av::error_text(rc) + "); re-encode or replace the file");
    if (flushed) break;
    rc = av_read_frame(fmt.get(), d.pkt);
    if (rc < 0) {
      if (rc != AVERROR_EOF && frames_decoded == 0)
        bad(path.string() + ": corrupt audio: reading failed (" + av::error_text(rc) + ")");
      avcodec_send_packet(d.dec, nullptr);
      flushed = true;
      continue;
    }
    if (d.pkt->stream_index != idx) {
      av_packet_unref(d.pkt);
      continue;
    }
    rc = avcodec_send_packet(d.dec, d.pkt);
    av_packet_unref(d.pkt);
    if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_EOF)
      bad(path.string() + ": corrupt audio: decoding failed after " + seconds_text(static_cast<double>(produced) / rate) + " (" +
          av::error_text(rc) + "); re-encode or replace the file");
  }
  av_channel_layout_uninit(&in_layout);
  if (!d.swr) bad(path.string() + ": its audio stream holds no samples; replace the file or remove the row");
  if (produced < end) convert(nullptr);  // the resampler's delayed tail
  if (to_end && produced >= cap)
    bad(path.string() + ": audio is longer than the " + seconds_text(kMaxAudioSeconds) + " one row may decode; cut the clip");

  const std::int64_t available = produced;
  const std::int64_t count = to_end ? std::max<std::int64_t>(0, available - first) : wanted;
  const std::int64_t shortfall = first + count - available;
  if (shortfall > 0 && static_cast<double>(shortfall) > tolerance * rate)
    bad(path.string() + ": audio is " + seconds_text(static_cast<double>(available) / rate) + " long but the clip needs " +
        seconds_text(window.start) + " to " + seconds_text(static_cast<double>(first + count) / rate) +
        "; use a sound file as long as the video, or trim the video (data.num_frames / data.fps choose how much of it a row uses)");
  if (count == 0) bad(path.string() + ": its audio stream holds no samples after " + seconds_text(window.start));

  out.samples = count;
  out.pcm.assign(static_cast<std::size_t>(count) * static_cast<std::size_t>(format.channels), 0.0f);
  const std::int64_t have = std::max<std::int64_t>(0, std::min(count, available - first));
  const std::size_t src_channels = planes.size();
  for (int c = 0; c < format.channels; ++c) {
    float* dst = out.pcm.data() + static_cast<std::size_t>(c) * static_cast<std::size_t>(count);
    for (std::int64_t i = 0; i < have; ++i) {
      const auto at = static_cast<std::size_t>(i);
      float v;
      if (format.channels == 1) {
        double sum = 0.0;
        for (const auto& p : planes) sum += p[at];
        v = static_cast<float>(sum / static_cast<double>(src_channels));
      } else {
        v = planes[std::min<std::size_t>(static_cast<std::size_t>(c), src_channels - 1)][at];
      }
      dst[i] = v;
    }
  }
  return out;
}

}  // namespace yeto::data
