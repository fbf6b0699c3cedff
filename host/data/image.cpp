#include "data/image.hpp"

#include <climits>
#include <memory>
#include <cstdint>
#include <utility>
#include <string_view>
#include <optional>

#include <stb_image.h>
#include <stb_image_write.h>

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


// The size an image's header declares, read without the decoder (PNG, JPEG, GIF, BMP): the
// decoder's own probe gives up on sizes beyond its limits and then names no size at all.
std::optional<std::pair<std::int64_t, std::int64_t>> declared_size(std::string_view b) {
  const auto u8 = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(b[i])); };
  const auto be16 = [&](std::size_t i) { return (u8(i) << 8) | u8(i + 1); };
  const auto be32 = [&](std::size_t i) { return (be16(i) << 16) | be16(i + 2); };
  const auto le16 = [&](std::size_t i) { return u8(i) | (u8(i + 1) << 8); };
  const auto le32 = [&](std::size_t i) { return le16(i) | (le16(i + 2) << 16); };
  if (b.size() >= 24 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8) && b.substr(12, 4) == "IHDR")
    return std::pair<std::int64_t, std::int64_t>{be32(16), be32(20)};
  if (b.size() >= 10 && (b.substr(0, 6) == "GIF87a" || b.substr(0, 6) == "GIF89a"))
    return std::pair<std::int64_t, std::int64_t>{le16(6), le16(8)};
  if (b.size() >= 26 && b.substr(0, 2) == "BM") {
    const auto h = static_cast<std::int32_t>(le32(22));
    return std::pair<std::int64_t, std::int64_t>{static_cast<std::int32_t>(le32(18)), h < 0 ? -static_cast<std::int64_t>(h) : h};
  }
  if (b.size() >= 4 && u8(0) == 0xFF && u8(1) == 0xD8) {  // JPEG: walk the segments to a start-of-frame
    std::size_t i = 2;
    while (i + 4 <= b.size()) {
      if (u8(i) != 0xFF) return std::nullopt;
      const std::uint32_t m = u8(i + 1);
      if (m == 0xFF) {  // fill byte
        ++i;
        continue;
      }
      if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // markers without a length
        i += 2;
        continue;
      }
      const std::uint32_t len = be16(i + 2);
      const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
      if (sof && i + 9 <= b.size()) return std::pair<std::int64_t, std::int64_t>{be16(i + 7), be16(i + 5)};
      if (len < 2) return std::nullopt;
      i += 2 + len;
    }
  }
  return std::nullopt;
}

[[noreturn]] void over_budget(const std::string& what, std::int64_t w, std::int64_t h, std::int64_t max_pixels) {
  bad(what + ": image declares " + std::to_string(w) + "x" + std::to_string(h) + " = " + std::to_string(w * h) +
      " pixels, above data.max_pixels = " + std::to_string(max_pixels) +
      "; refused before decoding (raise data.max_pixels if the image is genuine)");
}

}  // namespace

ImageInfo probe_image(std::string_view bytes, const std::string& what, std::int64_t max_pixels) {
  const int len = checked_len(bytes, what);
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  ImageInfo info;
  const auto declared = declared_size(bytes);
  if (declared && declared->first > 0 && declared->second > 0 && declared->first * declared->second > max_pixels)
    over_budget(what, declared->first, declared->second, max_pixels);
  if (!stbi_info_from_memory(data, len, &info.width, &info.height, &info.channels)) {
    const char* why = stbi_failure_reason();
    if (declared)
      bad(what + ": image declares " + std::to_string(declared->first) + "x" + std::to_string(declared->second) +
          " but cannot be decoded (" + std::string(why ? why : "decode failed") + ")");
    bad(what + ": not a decodable image (" + std::string(why ? why : "unknown format") +
        "); supported: PNG, JPEG, BMP, TGA, GIF, PNM, PSD, HDR");
  }
  if (info.width <= 0 || info.height <= 0) bad(what + ": image declares an empty size " + std::to_string(info.width) + "x" + std::to_string(info.height));
  const std::int64_t pixels = static_cast<std::int64_t>(info.width) * info.height;
  if (pixels > max_pixels) over_budget(what, info.width, info.height, max_pixels);
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

std::string read_media_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) bad(path.string() + ": cannot read (" + ec.message() + ")");
  if (size == 0) bad(path.string() + ": empty file (0 bytes); replace it or remove the row");
  return read_file(path);
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

std::string encode_png(const std::vector<std::uint8_t>& rgb, int height, int width) {
  if (height <= 0 || width <= 0 || rgb.size() != static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3)
    throw Error("PNG: " + std::to_string(rgb.size()) + " bytes do not make a " + std::to_string(width) + "x" +
                    std::to_string(height) + " RGB image",
                ExitCode::failure);
  std::string out;
  auto sink = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), static_cast<std::size_t>(size));
  };
  if (!stbi_write_png_to_func(sink, &out, width, height, 3, rgb.data(), width * 3) || out.empty())
    throw Error("PNG: encoding a " + std::to_string(width) + "x" + std::to_string(height) + " image failed",
                ExitCode::failure);
  return out;
}

}  // namespace yeto::data
