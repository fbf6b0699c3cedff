#include "data/image.hpp"

#include <climits>
#include <memory>

#include <stb_image.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::data {
namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(msg, ExitCode::bad_input); }

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

int checked_len(std::string_view bytes, const std::string& what) {
  if (bytes.empty()) bad(what + ": empty image (0 bytes)");
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) bad(what + ": image file larger than 2 GiB");
  return static_cast<int>(bytes.size());
}

std::string read_media_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) bad(path.string() + ": cannot read (" + ec.message() + ")");
  if (size == 0) bad(path.string() + ": empty file (0 bytes); replace it or remove the row");
  return read_file(path);
}

}  // namespace

ImageInfo probe_image(std::string_view bytes, const std::string& what, std::int64_t max_pixels) {
  const int len = checked_len(bytes, what);
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  ImageInfo info;
  if (!stbi_info_from_memory(data, len, &info.width, &info.height, &info.channels)) {
    const char* why = stbi_failure_reason();
    bad(what + ": not a decodable image (" + std::string(why ? why : "unknown format") +
        "); supported: PNG, JPEG, BMP, TGA, GIF, PNM, PSD, HDR");
  }
  if (info.width <= 0 || info.height <= 0) bad(what + ": image declares an empty size " + std::to_string(info.width) + "x" + std::to_string(info.height));
  const std::int64_t pixels = static_cast<std::int64_t>(info.width) * info.height;
  if (pixels > max_pixels)
    bad(what + ": image declares " + std::to_string(info.width) + "x" + std::to_string(info.height) + " = " + std::to_string(pixels) +
        " pixels, above data.max_pixels = " + std::to_string(max_pixels) +
        "; refused before decoding (raise data.max_pixels if the image is genuine)");
  info.sixteen_bit = stbi_is_16_bit_from_memory(data, len) != 0;
  return info;
}

Image decode_image(std::string_view bytes, const std::string& what, std::int64_t max_pixels) {
  const ImageInfo info = probe_image(bytes, what, max_pixels);
  const int len = static_cast<int>(bytes.size());
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  int w = 0, h = 0, comp = 0;
  Image img;
  if (info.sixteen_bit) {
    std::unique_ptr<stbi_us, StbFree> px(stbi_load_16_from_memory(data, len, &w, &h, &comp, 3));
    if (!px) bad(what + ": corrupt image (" + std::string(stbi_failure_reason() ? stbi_failure_reason() : "decode failed") + ")");
    img.width = w;
    img.height = h;
    img.rgb.resize(static_cast<std::size_t>(w) * h * 3);
    // Round to nearest rather than stb's truncating >> 8, so 65535 -> 255 and 32896 -> 128.
    for (std::size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<std::uint8_t>((px.get()[i] * 255u + 32767u) / 65535u);
  } else {
    std::unique_ptr<stbi_uc, StbFree> px(stbi_load_from_memory(data, len, &w, &h, &comp, 3));
    if (!px) bad(what + ": corrupt image (" + std::string(stbi_failure_reason() ? stbi_failure_reason() : "decode failed") + ")");
    img.width = w;
    img.height = h;
    img.rgb.assign(px.get(), px.get() + static_cast<std::size_t>(w) * h * 3);
  }
  if (w != info.width || h != info.height) bad(what + ": decoded size differs from the declared size");
  return img;
}

Image decode_image_file(const std::filesystem::path& path, std::int64_t max_pixels) {
  const std::string bytes = read_media_file(path);
  return decode_image(bytes, path.string(), max_pixels);
}

ImageInfo probe_image_file(const std::filesystem::path& path, std::int64_t max_pixels) {
  // The whole file: a JPEG's size marker may follow large EXIF/ICC segments.
  const std::string bytes = read_media_file(path);
  return probe_image(bytes, path.string(), max_pixels);
}

}  // namespace yeto::data
