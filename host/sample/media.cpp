#include "sample/media.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
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
  ~Writer() {
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

// Sends `f` (nullptr: flush) and writes every packet the encoder has ready.
void encode(Writer& w, AVStream* st, AVFrame* f, const fs::path& path) {
  check(avcodec_send_frame(w.enc, f), path, "avcodec_send_frame");
  for (;;) {
    const int r = avcodec_receive_packet(w.enc, w.packet);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    check(r, path, "avcodec_receive_packet");
    av_packet_rescale_ts(w.packet, w.enc->time_base, st->time_base);
    w.packet->stream_index = st->index;
    check(av_interleaved_write_frame(w.fmt, w.packet), path, "writing a packet");
  }
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

std::string write_mp4(const fs::path& path, const std::vector<std::uint8_t>& rgb, int frames, int height, int width,
                      double fps, const std::string& codec) {
  check_frames(rgb, frames, height, width, "MP4 " + path.string());
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
    const std::size_t frame_bytes = static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3;
    for (int i = 0; i < frames; ++i) {
      check(av_frame_make_writable(w.frame), path, "av_frame_make_writable");
      const std::uint8_t* src[1] = {rgb.data() + frame_bytes * static_cast<std::size_t>(i)};
      const int stride[1] = {3 * width};
      sws_scale(w.sws, src, stride, 0, height, w.frame->data, w.frame->linesize);
      w.frame->pts = i;
      encode(w, st, w.frame, path);
    }
    encode(w, st, nullptr, path);
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
  return codec_ptr->name;
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
