#include "sample/png.hpp"

#include <cstdio>
#include <fstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "data/image.hpp"

namespace yeto::sample {

void write_png(const std::filesystem::path& path, const std::vector<std::uint8_t>& rgb, int height, int width) {
  atomic_write(path, data::encode_png(rgb, height, width));
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
