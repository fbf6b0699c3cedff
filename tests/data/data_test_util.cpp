#include "data_test_util.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <stb_image_write.h>

#include "support/process.hpp"

namespace yeto::test {
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> raster(int w, int h, int channels, const PixelFn& f) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const Pixel p = f(x, y);
      std::uint8_t* d = &px[(static_cast<std::size_t>(y) * w + x) * channels];
      if (channels == 1) d[0] = p[0];
      else if (channels == 2) {
        d[0] = p[0];
        d[1] = p[3];
      } else
        for (int c = 0; c < channels; ++c) d[c] = p[c];
    }
  return px;
}

void ensure_dir(const fs::path& p) {
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
}

}  // namespace

fs::path write_png(const fs::path& p, int w, int h, int channels, const PixelFn& f) {
  ensure_dir(p);
  const auto px = raster(w, h, channels, f);
  if (!stbi_write_png(p.c_str(), w, h, channels, px.data(), w * channels)) throw std::runtime_error("stbi_write_png failed");
  return p;
}

fs::path write_bmp(const fs::path& p, int w, int h, const PixelFn& f) {
  ensure_dir(p);
  const auto px = raster(w, h, 3, f);
  if (!stbi_write_bmp(p.c_str(), w, h, 3, px.data())) throw std::runtime_error("stbi_write_bmp failed");
  return p;
}

fs::path write_tga(const fs::path& p, int w, int h, int channels, const PixelFn& f) {
  ensure_dir(p);
  const auto px = raster(w, h, channels, f);
  if (!stbi_write_tga(p.c_str(), w, h, channels, px.data())) throw std::runtime_error("stbi_write_tga failed");
  return p;
}

fs::path write_jpg(const fs::path& p, int w, int h, const PixelFn& f) {
  ensure_dir(p);
  const auto px = raster(w, h, 3, f);
  if (!stbi_write_jpg(p.c_str(), w, h, 3, px.data(), 95)) throw std::runtime_error("stbi_write_jpg failed");
  return p;
}

fs::path solid_png(const fs::path& p, int w, int h, Pixel c) {
  return write_png(p, w, h, 3, [c](int, int) { return c; });
}

void ffmpeg(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = run_process(argv);
  if (r.exit_code != 0) throw std::runtime_error("ffmpeg failed: " + r.all());
}

fs::path indexed_video(const fs::path& p, int w, int h, int frames, int fps, int step) {
  ensure_dir(p);
  const std::string s = std::to_string(step);
  ffmpeg({"-f", "lavfi", "-i",
          "nullsrc=s=" + std::to_string(w) + "x" + std::to_string(h) + ":r=" + std::to_string(fps) + ",format=rgb24,geq=r='N*" + s +
              "':g='N*" + s + "':b='255-N*" + s + "'",
          "-frames:v", std::to_string(frames), "-c:v", "ffv1", p.string()});
  return p;
}

fs::path h264_video(const fs::path& p, int w, int h, double seconds, int fps) {
  ensure_dir(p);
  ffmpeg({"-f", "lavfi", "-i", "testsrc=size=" + std::to_string(w) + "x" + std::to_string(h) + ":rate=" + std::to_string(fps), "-t",
          std::to_string(seconds), "-c:v", "libx264", "-pix_fmt", "yuv420p", p.string()});
  return p;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  ensure_dir(p);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

data::DataOptions small_options(const fs::path& source, int height, int width) {
  data::DataOptions o;
  o.source = source.string();
  o.source_base = fs::current_path();
  o.height = height;
  o.width = width;
  o.workers = 0;
  return o;
}

}  // namespace yeto::test
