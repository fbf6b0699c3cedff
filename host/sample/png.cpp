#include "sample/png.hpp"

#include <cstdio>
#include <fstream>

#include <stb_image_write.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::sample {

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

void write_png(const std::filesystem::path& path, const std::vector<std::uint8_t>& rgb, int height, int width) {
  atomic_write(path, encode_png(rgb, height, width));
}

std::filesystem::path output_path(const std::filesystem::path& path, std::size_t index, std::size_t count) {
  if (count <= 1) return path;
  char num[32];
  std::snprintf(num, sizeof num, "%03zu", index);
  const std::string ext = path.has_extension() ? path.extension().string() : std::string(".png");
  return path.parent_path() / (path.stem().string() + "-" + num + ext);
}

std::vector<std::string> read_prompts_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("--prompts: " + path.string() + " does not exist or cannot be read", ExitCode::not_found);
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    prompts.push_back(line);
  }
  if (prompts.empty())
    throw Error("--prompts: " + path.string() + " holds no prompt (one prompt per line)", ExitCode::bad_input);
  return prompts;
}

}  // namespace yeto::sample
