#include "sample/media.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/cpu.h>
#include <libavutil/log.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sample/png.hpp"

namespace fs = std::filesystem;

namespace yeto::sample {
namespace {

std::string av_message(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

void check(int code, const fs::path& path, const std::string& what) {
  if (code < 0) throw Error(path.string() + ": " + what + " failed: " + av_message(code), ExitCode::failure);
}

void check_frames(const std::vector<std::uint8_t>& rgb, int frames, int height, int width, const std::string& what) {
  if (frames <= 0 || height <= 0 || width <= 0 ||
      rgb.size() != static_cast<std::size_t>(frames) * static_cast<std::size_t>(height) *
                        static_cast<std::size_t>(width) * 3)
    throw Error(what + ": " + std::to_string(rgb.size()) + " bytes do not make " + std::to_string(frames) + " " +
                    std::to_string(width) + "x" + std::to_string(height) + " RGB frames",
                ExitCode::failure);
}

struct Writer {
  AVFormatContext* fmt = nullptr;
  AVCodecContext* enc = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  SwsContext* sws = nullptr;
  AVCodecContext* audio_enc = nullptr;
  AVFrame* audio_frame = nullptr;
  SwrContext* swr = nullptr;
  std::uint8_t** audio_data = nullptr;  // the whole track in the encoder's format and rate
  ~Writer() {
    if (audio_data) av_freep(&audio_data[0]);
    av_freep(&audio_data);
    swr_free(&swr);
    av_frame_free(&audio_frame);
    avcodec_free_context(&audio_enc);
    sws_freeContext(sws);
    av_packet_free(&packet);
    av_frame_free(&frame);
    avcodec_free_context(&enc);
    if (fmt) {
      if (fmt->pb) avio_closep(&fmt->pb);
      avformat_free_context(fmt);
    }
  }
};

const AVCodec* find_encoder(const std::string& codec) {
  if (codec.empty()) {
    if (const AVCodec* c = avcodec_find_encoder_by_name("libx264")) return c;
    return avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  }
  return avcodec_find_encoder_by_name(codec.c_str());
}

const AVCodec* find_audio_encoder(const std::string& codec) {
  if (!codec.empty()) return avcodec_find_encoder_by_name(codec.c_str());
  for (const char* name : {"aac", "libopus", "opus"})
    if (const AVCodec* c = avcodec_find_encoder_by_name(name)) return c;
  return nullptr;
}

// Sends `f` (nullptr: flush) to `enc` and writes every packet it has ready to stream `st`.
void encode(Writer& w, AVCodecContext* enc, AVStream* st, AVFrame* f, const fs::path& path) {
  check(avcodec_send_frame(enc, f), path, "avcodec_send_frame");
  for (;;) {
    const int r = avcodec_receive_packet(enc, w.packet);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    check(r, path, "avcodec_receive_packet");
    av_packet_rescale_ts(w.packet, enc->time_base, st->time_base);
    w.packet->stream_index = st->index;
    check(av_interleaved_write_frame(w.fmt, w.packet), path, "writing a packet");
  }
}

void encode(Writer& w, AVStream* st, AVFrame* f, const fs::path& path) { encode(w, w.enc, st, f, path); }

void check_audio(const AudioTrack& a, const fs::path& path) {
  if (a.channels != 1 && a.channels != 2)
    throw Error(path.string() + ": audio track with " + std::to_string(a.channels) + " channels; 1 or 2 are written",
                ExitCode::bad_input);
  if (a.sample_rate < 1000 || a.sample_rate > 384000)
    throw Error(path.string() + ": audio sample rate " + std::to_string(a.sample_rate) + " Hz is outside [1000, 384000]",
                ExitCode::bad_input);
  if (a.pcm.empty() || a.pcm.size() % static_cast<std::size_t>(a.channels) != 0)
    throw Error(path.string() + ": the audio track holds " + std::to_string(a.pcm.size()) + " values, not a whole number of " +
                    std::to_string(a.channels) + "-channel samples",
                ExitCode::bad_input);
  for (const float v : a.pcm)
    if (!std::isfinite(v)) throw Error(path.string() + ": the audio track holds NaN or infinite samples", ExitCode::bad_input);
}

// The encoder's rate nearest above `rate` among those it takes (any when it does not say).
int encoder_rate(const AVCodec* c, int rate) {
  if (!c->supported_samplerates) return rate;
  int best = 0, highest = 0;
  for (const int* r = c->supported_samplerates; *r; ++r) {
    if (*r == rate) return rate;
    highest = std::max(highest, *r);
    if (*r > rate && (best == 0 || *r < best)) best = *r;
  }
  return best ? best : highest;
}

AVSampleFormat encoder_format(const AVCodec* c) {
  if (!c->sample_fmts) return AV_SAMPLE_FMT_FLTP;
  for (const AVSampleFormat* f = c->sample_fmts; *f != AV_SAMPLE_FMT_NONE; ++f)
    if (*f == AV_SAMPLE_FMT_FLTP) return *f;
  return c->sample_fmts[0];
}

// The audio stream: the encoder opened, the whole track converted (format, rate) into
// w.audio_data. Returns the number of converted samples.
int open_audio(Writer& w, const AVCodec* codec, const AudioTrack& a, AVStream** st, const fs::path& path) {
  AVCodecContext* enc = w.audio_enc = avcodec_alloc_context3(codec);
  if (!enc) throw Error(path.string() + ": cannot allocate the audio encoder", ExitCode::failure);
  enc->sample_rate = encoder_rate(codec, a.sample_rate);
  enc->sample_fmt = encoder_format(codec);
  av_channel_layout_default(&enc->ch_layout, a.channels);
  enc->time_base = AVRational{1, enc->sample_rate};
  enc->bit_rate = 64000LL * a.channels;
  enc->thread_count = 1;
  enc->strict_std_compliance = FF_COMPLIANCE_EXPERIMENTAL;  // FFmpeg's own Opus encoder is marked experimental
  if (w.fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  check(avcodec_open2(enc, codec, nullptr), path, std::string("opening audio encoder ") + codec->name);
  *st = avformat_new_stream(w.fmt, nullptr);
  if (!*st) throw Error(path.string() + ": cannot add an audio stream", ExitCode::failure);
  (*st)->time_base = enc->time_base;
  check(avcodec_parameters_from_context((*st)->codecpar, enc), path, "copying audio codec parameters");

  AVChannelLayout layout{};
  av_channel_layout_default(&layout, a.channels);
  const int rc = swr_alloc_set_opts2(&w.swr, &layout, enc->sample_fmt, enc->sample_rate, &layout, AV_SAMPLE_FMT_FLTP,
                                     a.sample_rate, 0, nullptr);
  av_channel_layout_uninit(&layout);
  if (rc < 0 || swr_init(w.swr) < 0) throw Error(path.string() + ": cannot convert the audio track for the encoder", ExitCode::failure);
  const auto in_samples = static_cast<int>(a.samples());
  const int capacity = swr_get_out_samples(w.swr, in_samples) + 64;
  check(av_samples_alloc_array_and_samples(&w.audio_data, nullptr, a.channels, capacity, enc->sample_fmt, 0), path,
        "allocating the audio buffer");
  std::vector<const std::uint8_t*> in(static_cast<std::size_t>(a.channels));
  for (int c = 0; c < a.channels; ++c)
    in[static_cast<std::size_t>(c)] = reinterpret_cast<const std::uint8_t*>(a.pcm.data() + static_cast<std::size_t>(c) * in_samples);
  int n = swr_convert(w.swr, w.audio_data, capacity, in.data(), in_samples);
  check(n, path, "converting the audio track");
  // The resampler's delayed tail (nothing when the rate is the encoder's).
  const bool planar = av_sample_fmt_is_planar(enc->sample_fmt) != 0;
  const int bytes = av_get_bytes_per_sample(enc->sample_fmt);
  std::vector<std::uint8_t*> tail(static_cast<std::size_t>(planar ? a.channels : 1));
  for (std::size_t p = 0; p < tail.size(); ++p)
    tail[p] = w.audio_data[p] + static_cast<std::size_t>(n) * static_cast<std::size_t>(bytes) * (planar ? 1u : static_cast<unsigned>(a.channels));
  const int rest = swr_convert(w.swr, tail.data(), capacity - n, nullptr, 0);
  check(rest, path, "converting the audio track");
  return n + rest;
}

void fsync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw Error(p.string() + ": cannot reopen to sync", ExitCode::failure);
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) throw Error(p.string() + ": fsync failed", ExitCode::failure);
}

}  // namespace

std::string default_video_codec() {
  const AVCodec* c = find_encoder("");
  return c ? c->name : "";
}

std::string default_audio_codec() {
  const AVCodec* c = find_audio_encoder("");
  return c ? c->name : "";
}

std::string write_mp4(const fs::path& path, const std::vector<std::uint8_t>& rgb, int frames, int height, int width,
                      double fps, const std::string& codec, const AudioTrack* audio, const std::string& audio_codec) {
  check_frames(rgb, frames, height, width, "MP4 " + path.string());
  if (audio) check_audio(*audio, path);
  if (height % 2 != 0 || width % 2 != 0)
    throw Error(path.string() + ": MP4 needs an even height and width (4:2:0 chroma), got " + std::to_string(width) +
                    "x" + std::to_string(height) + "; sample an even size or write PNG frames (--format frames)",
                ExitCode::bad_input);
  if (!(fps > 0) || fps > 1000)
    throw Error(path.string() + ": frame rate " + std::to_string(fps) + " is outside (0, 1000]; pass --fps R",
                ExitCode::bad_input);
  const AVCodec* codec_ptr = find_encoder(codec);
  if (!codec_ptr)
    throw Error(path.string() + ": this FFmpeg build has no video encoder '" + (codec.empty() ? "mpeg4" : codec) + "'",
                ExitCode::not_available);

  const AVCodec* audio_ptr = audio ? find_audio_encoder(audio_codec) : nullptr;
  if (audio && !audio_ptr)
    throw Error(path.string() + ": this FFmpeg build has no audio encoder '" + (audio_codec.empty() ? "aac" : audio_codec) +
                    "' (nor libopus/opus); write the sound as a WAV file instead (--format frames)",
                ExitCode::not_available);

  av_log_set_level(AV_LOG_ERROR);  // no encoder banners on the command's output
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()));
  Writer w;
  try {
    check(avformat_alloc_output_context2(&w.fmt, nullptr, "mp4", tmp.c_str()), path, "creating the MP4 muxer");
    w.enc = avcodec_alloc_context3(codec_ptr);
    if (!w.enc) throw Error(path.string() + ": cannot allocate the encoder", ExitCode::failure);
    const AVRational rate = av_d2q(fps, 100000);
    w.enc->width = width;
    w.enc->height = height;
    w.enc->pix_fmt = AV_PIX_FMT_YUV420P;
    w.enc->time_base = av_inv_q(rate);
    w.enc->framerate = rate;
    w.enc->gop_size = 12;
    w.enc->thread_count = 1;  // deterministic output for a given input
    if (std::string(codec_ptr->name) == "libx264") {
      av_opt_set(w.enc->priv_data, "preset", "medium", 0);
      av_opt_set(w.enc->priv_data, "crf", "18", 0);
      // On CPUs with AVX-512, x264's AVX-512 kernels make the file depend on what the heap held
      // before (the same frames gave four different files under four malloc perturb bytes,
      // and the same sample command different bytes from one working directory to another);
      // with its AVX2 kernels the bytes are a function of the frames. Held to AVX2 there.
      if (av_get_cpu_flags() & AV_CPU_FLAG_AVX512) av_opt_set(w.enc->priv_data, "x264-params", "asm=AVX2", 0);
    } else {
      w.enc->flags |= AV_CODEC_FLAG_QSCALE;
      w.enc->global_quality = FF_QP2LAMBDA * 2;
    }
    if (w.fmt->oformat->flags & AVFMT_GLOBALHEADER) w.enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    check(avcodec_open2(w.enc, codec_ptr, nullptr), path, std::string("opening encoder ") + codec_ptr->name);
    AVStream* st = avformat_new_stream(w.fmt, nullptr);
    if (!st) throw Error(path.string() + ": cannot add a video stream", ExitCode::failure);
    st->time_base = w.enc->time_base;
    st->avg_frame_rate = rate;
    check(avcodec_parameters_from_context(st->codecpar, w.enc), path, "copying codec parameters");
    AVStream* audio_st = nullptr;
    const int audio_samples = audio ? open_audio(w, audio_ptr, *audio, &audio_st, path) : 0;
    check(avio_open(&w.fmt->pb, tmp.c_str(), AVIO_FLAG_WRITE), tmp, "opening for writing");
    check(avformat_write_header(w.fmt, nullptr), path, "writing the MP4 header");

    w.frame = av_frame_alloc();
    w.packet = av_packet_alloc();
    if (!w.frame || !w.packet) throw Error(path.string() + ": out of memory", ExitCode::failure);
    w.frame->format = AV_PIX_FMT_YUV420P;
    w.frame->width = width;
    w.frame->height = height;
    check(av_frame_get_buffer(w.frame, 0), path, "allocating a frame");
    w.sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                           SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
    if (!w.sws) throw Error(path.string() + ": cannot create the RGB -> YUV converter", ExitCode::failure);
    // Audio frames of the encoder's size, pts in samples, sent up to the time of the video
    // frame about to be encoded, so the muxer interleaves without holding the whole track.
    int audio_sent = 0;
    auto send_audio_until = [&](double seconds) {
      if (!audio) return;
      AVCodecContext* enc = w.audio_enc;
      const bool variable = (audio_ptr->capabilities & (AV_CODEC_CAP_VARIABLE_FRAME_SIZE | AV_CODEC_CAP_SMALL_LAST_FRAME)) != 0;
      const int size = enc->frame_size > 0 ? enc->frame_size : 1024;
      while (audio_sent < audio_samples && static_cast<double>(audio_sent) / enc->sample_rate < seconds) {
        const int n = std::min(size, audio_samples - audio_sent);
        if (!w.audio_frame) {
          w.audio_frame = av_frame_alloc();
          if (!w.audio_frame) throw Error(path.string() + ": out of memory", ExitCode::failure);
        }
        av_frame_unref(w.audio_frame);
        w.audio_frame->format = enc->sample_fmt;
        w.audio_frame->sample_rate = enc->sample_rate;
        w.audio_frame->nb_samples = variable ? n : size;
        check(av_channel_layout_copy(&w.audio_frame->ch_layout, &enc->ch_layout), path, "copying the channel layout");
        check(av_frame_get_buffer(w.audio_frame, 0), path, "allocating an audio frame");
        if (n < w.audio_frame->nb_samples)
          av_samples_set_silence(w.audio_frame->extended_data, 0, w.audio_frame->nb_samples, audio->channels, enc->sample_fmt);
        check(av_samples_copy(w.audio_frame->extended_data, w.audio_data, 0, audio_sent, n, audio->channels, enc->sample_fmt),
              path, "copying audio samples");
        w.audio_frame->pts = audio_sent;
        encode(w, enc, audio_st, w.audio_frame, path);
        audio_sent += n;
      }
    };
    const std::size_t frame_bytes = static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3;
    // swscale's SIMD input readers load whole vectors and so read past a line's last pixel,
    // the last line of the last frame included (valgrind: a 16-byte load 12 bytes before the
    // end of the caller's buffer). Each frame is converted from a copy followed by FFmpeg's
    // input padding, zeroed, so those reads stay inside memory that is ours and defined.
    std::vector<std::uint8_t> staged(frame_bytes + AV_INPUT_BUFFER_PADDING_SIZE, 0);
    for (int i = 0; i < frames; ++i) {
      send_audio_until(static_cast<double>(i) / fps);
      check(av_frame_make_writable(w.frame), path, "av_frame_make_writable");
      std::memcpy(staged.data(), rgb.data() + frame_bytes * static_cast<std::size_t>(i), frame_bytes);
      const std::uint8_t* src[1] = {staged.data()};
      const int stride[1] = {3 * width};
      sws_scale(w.sws, src, stride, 0, height, w.frame->data, w.frame->linesize);
      w.frame->pts = i;
      encode(w, st, w.frame, path);
    }
    encode(w, st, nullptr, path);
    if (audio) {
      send_audio_until(INFINITY);
      encode(w, w.audio_enc, audio_st, nullptr, path);
    }
    check(av_write_trailer(w.fmt), path, "writing the MP4 trailer");
    check(avio_closep(&w.fmt->pb), path, "closing");
    fsync_file(tmp);
    fs::rename(tmp, path);
    fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  } catch (...) {
    std::error_code ec;
    if (w.fmt && w.fmt->pb) avio_closep(&w.fmt->pb);
    fs::remove(tmp, ec);
    throw;
  }
  return audio ? std::string(codec_ptr->name) + " + " + audio_ptr->name : std::string(codec_ptr->name);
}

void write_wav(const fs::path& path, const AudioTrack& a) {
  check_audio(a, path);
  const std::int64_t n = a.samples();
  const std::uint64_t data_bytes = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(a.channels) * 2;
  if (data_bytes > 0xFFFFFFFFull - 36)
    throw Error(path.string() + ": the audio track is too long for a WAV file", ExitCode::bad_input);
  std::string out;
  out.reserve(44 + data_bytes);
  auto u32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto u16 = [&](std::uint16_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  };
  out += "RIFF";
  u32(static_cast<std::uint32_t>(36 + data_bytes));
  out += "WAVEfmt ";
  u32(16);
  u16(1);  // PCM
  u16(static_cast<std::uint16_t>(a.channels));
  u32(static_cast<std::uint32_t>(a.sample_rate));
  u32(static_cast<std::uint32_t>(a.sample_rate * a.channels * 2));
  u16(static_cast<std::uint16_t>(a.channels * 2));
  u16(16);
  out += "data";
  u32(static_cast<std::uint32_t>(data_bytes));
  for (std::int64_t i = 0; i < n; ++i)
    for (int c = 0; c < a.channels; ++c) {
      const float v = std::clamp(a.pcm[static_cast<std::size_t>(c * n + i)], -1.0f, 1.0f);
      u16(static_cast<std::uint16_t>(static_cast<std::int16_t>(std::lround(v * 32767.0f))));
    }
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  atomic_write(path, out);
}

std::vector<fs::path> write_frames(const fs::path& dir, const std::vector<std::uint8_t>& rgb, int frames, int height,
                                   int width) {
  check_frames(rgb, frames, height, width, "frames " + dir.string());
  fs::create_directories(dir);
  const std::size_t frame_bytes = static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3;
  std::vector<fs::path> out;
  for (int i = 0; i < frames; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "frame-%05d.png", i);
    const auto begin = rgb.begin() + static_cast<std::ptrdiff_t>(frame_bytes * static_cast<std::size_t>(i));
    write_png(dir / name, std::vector<std::uint8_t>(begin, begin + static_cast<std::ptrdiff_t>(frame_bytes)), height,
              width);
    out.push_back(dir / name);
  }
  return out;
}

std::vector<PromptEntry> read_prompt_entries(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("--prompts " + path.string() + ": cannot open the prompts file", ExitCode::not_found);
  std::vector<PromptEntry> out;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    if (line[first] != '{') {
      out.push_back({line, std::nullopt});
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not valid JSON (" + e.what() + "); write {\"prompt\": \"...\", \"seed\": N} or a plain "
                  "prompt line",
                  ExitCode::bad_input);
    }
    if (!j.contains("prompt") || !j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
      throw Error(where + ": key 'prompt' is missing or not a non-empty string", ExitCode::bad_input);
    PromptEntry e{j["prompt"].get<std::string>(), std::nullopt};
    if (j.contains("seed")) {
      if (!j["seed"].is_number_unsigned())
        throw Error(where + ": key 'seed' must be a non-negative integer, got " + j["seed"].dump(), ExitCode::bad_input);
      e.seed = j["seed"].get<std::uint64_t>();
    }
    for (const auto& [k, v] : j.items())
      if (k != "prompt" && k != "seed")
        throw Error(where + ": unknown key '" + k + "' (a line holds 'prompt' and optionally 'seed')",
                    ExitCode::bad_input);
    out.push_back(std::move(e));
  }
  if (out.empty()) throw Error("--prompts " + path.string() + ": the file holds no prompt", ExitCode::bad_input);
  return out;
}

}  // namespace yeto::sample
