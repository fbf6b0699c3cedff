// Data pipeline throughput: decode + resize through the prefetching loader with 1 and 2
// worker threads, side by side with the raw decode throughput of the same files on one
// thread (stb_image to RGB at native size; FFmpeg decode + RGB conversion of every frame).
// Media are generated at start (stb_image_write, the ffmpeg CLI), so the numbers are
// comparable between machines only as ratios.
//
//   data_decode_bench [--images N] [--videos N] [--size WxH] [--target WxH] [--repeat R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <stb_image_write.h>

#include "data/decode.hpp"
#include "data/image.hpp"
#include "data/loader.hpp"
#include "data/video.hpp"

namespace fs = std::filesystem;
using namespace yeto::data;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "failed: %s\n", cmd.c_str());
    std::exit(1);
  }
}

Row image_row(const fs::path& p, std::size_t i) {
  Row r;
  r.manifest = "bench.jsonl";
  r.number = static_cast<std::int64_t>(i + 1);
  r.media = MediaKind::image;
  r.media_path = p;
  r.prompt = "";
  return r;
}

// Decode + resize every row through a Loader with `workers` threads; returns items/s where
// an item is a row (images) or a frame (videos, `frames_per_row`).
double loader_rate(const std::vector<Row>& rows, const DataOptions& o, int workers, int repeat, double frames_per_row) {
  BatchPlan plan;
  for (int k = 0; k < repeat; ++k)
    for (std::size_t i = 0; i < rows.size(); ++i) plan.push_back({i});
  const double t0 = now();
  Loader loader(plan, [&](std::size_t i) { return decode_row(rows[i], i, o); }, {workers, 8, BadRowPolicy::error});
  std::size_t n = 0;
  while (auto b = loader.next()) n += b->samples.size();
  return static_cast<double>(n) * frames_per_row / (now() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  int images = 48, videos = 4, repeat = 2;
  int sw = 640, sh = 480, tw = 256, th = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--images") images = std::atoi(argv[i + 1]);
    else if (a == "--videos") videos = std::atoi(argv[i + 1]);
    else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
    else if (a == "--size") std::sscanf(argv[i + 1], "%dx%d", &sw, &sh);
    else if (a == "--target") std::sscanf(argv[i + 1], "%dx%d", &tw, &th);
  }
  const fs::path dir = fs::temp_directory_path() / ("yeto-data-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  // Half PNG, half JPEG, with content that does not compress to nothing.
  std::vector<fs::path> image_files;
  std::vector<unsigned char> px(static_cast<std::size_t>(sw) * sh * 3);
  for (int i = 0; i < images; ++i) {
    for (int y = 0; y < sh; ++y)
      for (int x = 0; x < sw; ++x) {
        unsigned char* p = &px[(static_cast<std::size_t>(y) * sw + x) * 3];
        p[0] = static_cast<unsigned char>(x * 3 + i);
        p[1] = static_cast<unsigned char>((y * 5) ^ (x * 7));
        p[2] = static_cast<unsigned char>((x * y + i * 31) >> 4);
      }
    const fs::path p = dir / ("img" + std::to_string(i) + (i % 2 ? ".jpg" : ".png"));
    if (i % 2) stbi_write_jpg(p.c_str(), sw, sh, 3, px.data(), 90);
    else stbi_write_png(p.c_str(), sw, sh, 3, px.data(), sw * 3);
    image_files.push_back(p);
  }
  std::vector<fs::path> video_files;
  for (int i = 0; i < videos; ++i) {
    const fs::path p = dir / ("clip" + std::to_string(i) + ".mp4");
    run("ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i testsrc=size=" + std::to_string(sw) + "x" + std::to_string(sh) +
        ":rate=24 -t 2 -c:v libx264 -pix_fmt yuv420p " + p.string());
    video_files.push_back(p);
  }

  // Raw decode, one thread.
  double t0 = now();
  for (int k = 0; k < repeat; ++k)
    for (const auto& f : image_files) (void)decode_image_file(f, 1LL << 30);
  const double raw_images = static_cast<double>(images * repeat) / (now() - t0);
  std::int64_t frames_per_clip = 0;
  t0 = now();
  std::int64_t frames = 0;
  for (int k = 0; k < repeat; ++k)
    for (const auto& f : video_files) {
      VideoReader r(f, {1LL << 30, 100000});
      Image img;
      std::int64_t n = 0;
      while (r.next(&img)) ++n;
      frames += n;
      frames_per_clip = n;
    }
  const double raw_frames = static_cast<double>(frames) / (now() - t0);

  DataOptions o;
  o.height = th;
  o.width = tw;
  o.resize_mode = ResizeMode::center_crop;
  o.max_pixels = 1LL << 30;
  std::vector<Row> irows;
  for (std::size_t i = 0; i < image_files.size(); ++i) irows.push_back(image_row(image_files[i], i));
  std::vector<Row> vrows;
  for (std::size_t i = 0; i < video_files.size(); ++i) {
    Row r = image_row(video_files[i], i);
    r.media = MediaKind::video;
    r.frames = frames_per_clip;  // every frame, so the work matches the raw decode
    vrows.push_back(r);
  }
  double img_rate[2], vid_rate[2];
  for (int w = 1; w <= 2; ++w) {
    img_rate[w - 1] = loader_rate(irows, o, w, repeat, 1.0);
    vid_rate[w - 1] = loader_rate(vrows, o, w, repeat, static_cast<double>(frames_per_clip));
  }

  std::printf("data_decode_bench: %d images (PNG+JPEG) and %d H.264 clips of %lld frames, %dx%d -> %dx%d center-crop, %d passes\n",
              images, videos, static_cast<long long>(frames_per_clip), sw, sh, tw, th, repeat);
  std::printf("%-34s %14s %8s %16s %8s\n", "mode", "images/s", "x raw", "video frames/s", "x raw");
  std::printf("%-34s %14.1f %8.2f %16.1f %8.2f\n", "raw decode (1 thread, no resize)", raw_images, 1.0, raw_frames, 1.0);
  for (int w = 1; w <= 2; ++w)
    std::printf("%-34s %14.1f %8.2f %16.1f %8.2f\n", (std::string("decode+resize, loader ") + std::to_string(w) + " worker" + (w > 1 ? "s" : "")).c_str(),
                img_rate[w - 1], img_rate[w - 1] / raw_images, vid_rate[w - 1], vid_rate[w - 1] / raw_frames);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
