// Helpers shared by the data tests: images written with stb_image_write, videos made with the
// ffmpeg CLI, manifests, and small data options.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/options.hpp"
#include "support/temp_dir.hpp"

namespace yeto::test {

using Pixel = std::array<std::uint8_t, 4>;
using PixelFn = std::function<Pixel(int x, int y)>;

// `channels`: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA (grey takes the pixel's first component).
std::filesystem::path write_png(const std::filesystem::path& p, int w, int h, int channels, const PixelFn& f);
std::filesystem::path write_bmp(const std::filesystem::path& p, int w, int h, const PixelFn& f);
std::filesystem::path write_tga(const std::filesystem::path& p, int w, int h, int channels, const PixelFn& f);
std::filesystem::path write_jpg(const std::filesystem::path& p, int w, int h, const PixelFn& f);
std::filesystem::path solid_png(const std::filesystem::path& p, int w, int h, Pixel c);

// Runs ffmpeg with -hide_banner -loglevel error -y prepended; throws on failure.
void ffmpeg(const std::vector<std::string>& args);
// `frames` frames at `fps` whose frame N has R = G = N * step (B = 255 - N * step), lossless (FFV1 in Matroska).
std::filesystem::path indexed_video(const std::filesystem::path& p, int w, int h, int frames, int fps, int step);
// testsrc in H.264/MP4.
std::filesystem::path h264_video(const std::filesystem::path& p, int w, int h, double seconds, int fps);

std::string read_bytes(const std::filesystem::path& p);
void write_bytes(const std::filesystem::path& p, const std::string& bytes);

data::DataOptions small_options(const std::filesystem::path& manifest_or_dir, int height = 16, int width = 16);

}  // namespace yeto::test
