// PNG encoding of 8-bit RGB images (stb_image_write), written atomically. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace yeto::sample {

// data::encode_png, then yeto::atomic_write to `path` (a partial file never appears).
void write_png(const std::filesystem::path& path, const std::vector<std::uint8_t>& rgb, int height, int width);

// The output file of prompt `index` of `count`: `path` itself for a single prompt, else
// "<stem>-<index, zero-padded to 3 digits>.<ext>" beside it (out.png -> out-000.png, ...).
std::filesystem::path output_path(const std::filesystem::path& path, std::size_t index, std::size_t count);

// Prompts of a prompts file: one per line, blank lines skipped, trailing '\r' removed. Throws
// yeto::Error (not_found / bad_input) naming the file when it is missing or holds no prompt.
std::vector<std::string> read_prompts_file(const std::filesystem::path& path);

}  // namespace yeto::sample
