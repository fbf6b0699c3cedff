// One training row as the manifest describes it: exactly one media source (raw image, raw
// video, a list/directory of frames, or cached latents) and one conditioning source (a prompt
// or cached text embeddings), plus optional shape metadata. Paths are already resolved (and
// checked against escapes) by the manifest reader; nothing here has been decoded yet.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace yeto::data {

enum class MediaKind { none, image, video, frames, latents };
const char* media_kind_name(MediaKind k);

// A cached tensor: a file (.pt/.pth/.npy/.safetensors, optionally one named tensor of a
// safetensors file) or inline values from the manifest. Never resized or resampled.
struct TensorRef {
  std::filesystem::path path;  // empty for inline tensors
  std::string key;             // tensor name inside a safetensors/pt file; empty: the only one
  bool is_inline = false;
  std::string dtype;           // inline: "float32", "float16", "bfloat16", "int64", ...
  std::vector<std::int64_t> shape;  // inline: known; file: filled by probing
  std::vector<double> values;  // inline numbers (row-major) when given as JSON numbers
  std::string bytes;           // inline raw little-endian bytes when given as base64
  std::string describe() const;  // "file.npy", "file.safetensors#name" or "inline"
};

// Shape of one sample after preprocessing: raw media are brought to it, cached latents
// carry it as metadata. Rows are bucketed by it so shapes never mix in a micro batch.
struct ShapeKey {
  bool latent = false;  // cached latents: latent dimensions, not pixels
  std::int64_t frames = 1;
  std::int64_t height = 0;
  std::int64_t width = 0;
  auto operator<=>(const ShapeKey&) const = default;
  std::string str() const;  // "1x512x512", "latent 1x64x64"
};

struct Row {
  // Where the row came from, for every message about it.
  std::filesystem::path manifest;
  std::int64_t number = 0;   // 1-based: the line for JSONL, the array element for JSON
  bool jsonl = false;
  std::string where() const;  // "train.jsonl line 7" / "train.json row 3"

  MediaKind media = MediaKind::none;
  std::filesystem::path media_path;               // image file, video file or frames directory
  std::vector<std::filesystem::path> frame_paths; // frames: ordered image files
  std::string inline_image;                       // image: decoded base64 bytes
  std::string media_ref;                          // the manifest text, for keys and messages
  std::optional<TensorRef> latents;
  std::filesystem::path audio_path;               // the row's sound file (data.audio_column); empty: none

  std::optional<std::string> prompt;
  std::optional<TensorRef> prompt_embeds;
  std::optional<TensorRef> attention_mask;
  std::optional<TensorRef> pooled_embeds;
  std::map<std::string, TensorRef> tensors;  // model-specific cached tensors by name

  // Optional metadata: per-row target size of raw media (multi-aspect buckets), declared
  // source frame rate of a frames list, latent dimensions of cached latents.
  std::optional<std::int64_t> frames, height, width;
  std::optional<double> fps;
  std::map<std::string, std::int64_t> latent_meta;  // latent_frames, latent_height, ...
};

// "<where>: <message>" -- every error about a row goes through this.
std::string row_message(const Row& row, const std::string& message);

}  // namespace yeto::data
