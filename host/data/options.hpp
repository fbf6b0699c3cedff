// The data.* settings of a run, read once from the resolved configuration so the rest of the
// pipeline never looks keys up by string.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace yeto::config {
class Config;
}

namespace yeto::data {

enum class ResizeMode { stretch, center_crop };
enum class BadRowPolicy { error, skip };

struct Columns {
  std::string image = "image";
  std::string video = "video";
  std::string latents = "latents";
  std::string prompt = "prompt";
  std::string prompt_embeds = "prompt_embeds";
  std::string attention_mask = "prompt_attention_mask";
  std::string pooled_embeds = "pooled_prompt_embeds";
};

struct DataOptions {
  std::string source;                // data.path as written (path or org/name)
  std::string source_key = "data.path";  // the key that named it, for messages
  std::filesystem::path source_base;  // directory a relative data.path resolves from
  std::string revision = "main";
  std::string format = "auto";
  std::filesystem::path hub_cache;   // model.hub_cache (empty: environment default)
  Columns columns;
  std::int64_t height = 512;
  std::int64_t width = 512;
  ResizeMode resize_mode = ResizeMode::center_crop;
  std::int64_t num_frames = 1;
  double fps = 0.0;
  bool bucket_by_shape = false;
  BadRowPolicy on_bad_row = BadRowPolicy::error;
  bool allow_path_escape = false;
  std::int64_t max_pixels = 64LL << 20;
  std::int64_t max_frames = 4096;
  int workers = 2;
  int prefetch = 4;
  std::uint64_t decode_memory = 1024ull << 20;  // data.decode_memory_mb, see DecodeBudget
  std::uint64_t seed = 0;
  std::int64_t micro_batch_size = 1;
};

// Reads data.*, model.hub_cache, diffusion.seed and train.micro_batch_size ("auto" -> 1).
DataOptions data_options(const config::Config& cfg);

// The held-out dataset validation.data names, read with the same preprocessing and row
// policy as data.path (a relative path resolves from the file that set validation.data).
// Empty when validation.data is not set.
std::optional<DataOptions> validation_data_options(const config::Config& cfg);

const char* resize_mode_name(ResizeMode m);

}  // namespace yeto::data
