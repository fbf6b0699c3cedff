// Raw image decoding with stb_image (Debian's compiled libstb): PNG, JPEG, BMP, TGA, GIF (first
// frame), PNM, PSD, HDR; 8- or 16-bit; grey, grey+alpha, RGB, RGBA. Everything comes out as
// 8-bit RGB: grey is replicated, alpha is dropped (as PIL's convert("RGB") does), 16-bit is
// rounded to 8 bits. The declared size is checked against the pixel budget with stbi_info
// before any decode buffer is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::data {

// Interleaved 8-bit RGB, row-major, no padding.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;
  std::uint8_t at(int x, int y, int c) const { return rgb[(static_cast<std::size_t>(y) * width + x) * 3 + c]; }
};

struct ImageInfo {
  int width = 0;
  int height = 0;
  int channels = 0;  // in the file: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  bool sixteen_bit = false;
};

// Header only. Throws yeto::Error (bad_input) with `what` (a file name or "inline image") when
// the bytes are not a supported image, or when width x height exceeds max_pixels.
ImageInfo probe_image(std::string_view bytes, const std::string& what, std::int64_t max_pixels);
Image decode_image(std::string_view bytes, const std::string& what, std::int64_t max_pixels);
// Reads the file (refusing empty files) and decodes it.
// A media file's bytes; throws yeto::Error (bad_input) naming it when it cannot be read or is empty.
std::string read_media_file(const std::filesystem::path& path);
Image decode_image_file(const std::filesystem::path& path, std::int64_t max_pixels);
ImageInfo probe_image_file(const std::filesystem::path& path, std::int64_t max_pixels);

// Encodes height x width RGB pixels (row-major, 3 bytes each) as PNG bytes (stb_image_write).
// Throws yeto::Error when the size does not match or encoding fails.
std::string encode_png(const std::vector<std::uint8_t>& rgb, int height, int width);

}  // namespace yeto::data
