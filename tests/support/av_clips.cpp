#include "support/av_clips.hpp"

#include <cstdio>
#include <stdexcept>

#include "support/process.hpp"

namespace fs = std::filesystem;

namespace yeto::test {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void run_ffmpeg(std::vector<std::string> args) {
  std::vector<std::string> argv = {"ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = run_process(argv);
  if (r.exit_code != 0) throw std::runtime_error("ffmpeg failed: " + r.all());
}

// gte(t,a)*lt(t,b) + ... : 1 inside a burst, 0 outside.
std::string inside(const AvClipSpec& s) {
  std::string e;
  for (const auto& [a, b] : s.bursts) e += (e.empty() ? "" : "+") + std::string("gte(t,") + num(a) + ")*lt(t," + num(b) + ")";
  return e.empty() ? "0" : e;
}

std::string audio_source(const AvClipSpec& s) {
  std::string expr = burst_expression(s, s.amplitude);
  if (s.channels == 2) expr += "|" + burst_expression(s, s.amplitude / 2);
  return "aevalsrc='" + expr + "':s=" + std::to_string(s.sample_rate) + ":d=" + num(s.seconds);
}

}  // namespace

std::string burst_expression(const AvClipSpec& s, double amplitude) {
  return num(amplitude) + "*sin(2*PI*" + num(s.tone_hz) + "*t)*(" + inside(s) + ")";
}

fs::path av_clip(const fs::path& path, const AvClipSpec& s) {
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  const std::string box = "drawbox=x=" + std::to_string(s.width / 4) + ":y=" + std::to_string(s.height / 4) +
                          ":w=" + std::to_string(s.width / 2) + ":h=" + std::to_string(s.height / 2) +
                          ":color=white:t=fill:enable='" + inside(s) + "'";
  std::vector<std::string> args = {"-f", "lavfi", "-i",
                                   "color=c=black:s=" + std::to_string(s.width) + "x" + std::to_string(s.height) +
                                       ":r=" + std::to_string(s.fps) + ":d=" + num(s.seconds) + "," + box};
  if (!s.audio_codec.empty()) {
    args.insert(args.end(), {"-f", "lavfi", "-i", audio_source(s), "-c:a", s.audio_codec});
  }
  args.insert(args.end(), {"-c:v", s.video_codec, "-pix_fmt", s.video_codec == "ffv1" ? "rgb24" : "yuv420p"});
  if (s.video_codec == "libx264") args.insert(args.end(), {"-threads", "1"});
  args.push_back(path.string());
  run_ffmpeg(args);
  return path;
}

fs::path burst_audio(const fs::path& path, const AvClipSpec& s) {
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  std::vector<std::string> args = {"-f", "lavfi", "-i", audio_source(s)};
  if (!s.audio_codec.empty() && s.audio_codec != "aac") args.insert(args.end(), {"-c:a", s.audio_codec});
  args.push_back(path.string());
  run_ffmpeg(args);
  return path;
}

std::string ffprobe_stream(const fs::path& path, const std::string& type, const std::string& entry) {
  const ProcessResult r = run_process({"ffprobe", "-v", "error", "-select_streams", type + ":0", "-show_entries",
                                       "stream=" + entry, "-of", "default=noprint_wrappers=1:nokey=1", path.string()});
  if (r.exit_code != 0) throw std::runtime_error("ffprobe failed on " + path.string() + ": " + r.all());
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace yeto::test
