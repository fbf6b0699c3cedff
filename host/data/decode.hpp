// Turning one row into one sample: raw media decoded and resized to the row's target shape
// (frames x height x width x RGB, 8-bit), cached tensors read as raw bytes (never resized),
// and the shape key the sampler buckets by. Torch-free; yeto_data_torch makes tensors of it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/options.hpp"
#include "data/row.hpp"
#include "data/tensor_ref.hpp"
#include "data/video.hpp"

namespace yeto::data {

struct Sample {
  std::size_t row = 0;  // index into the manifest's rows
  MediaKind kind = MediaKind::none;
  ShapeKey shape;
  std::vector<std::uint8_t> pixels;  // raw media: shape.frames x height x width x 3
  std::string prompt;
  bool has_prompt = false;
  std::map<std::string, RawTensor> tensors;   // "latents", "prompt_embeds", ..., model-specific names
  std::map<std::string, TensorRef> deferred;  // .pt/.pth tensors, loaded by yeto_data_torch
  std::map<std::string, TensorInfo> tensor_info;  // every cached tensor's dtype/shape (when known)
  std::string source;  // what was decoded: "png 37x21 grey", "h264 24 fps 48 frames", ...
};

// The row's shape key from metadata and options alone (no decoding): raw media use the row's
// frames/height/width when given, else data.num_frames/height/width; cached latents use
// frames/height/width or latent_frames/latent_height/latent_width metadata, else the latent
// tensor's header ([C,H,W] or [C,F,H,W], optionally with a leading batch dimension of 1).
ShapeKey shape_of(const Row& row, const DataOptions& options);

enum class DecodeDepth {
  full,    // decode and resize media, read cached tensors
  header,  // validate headers and budgets only (stbi_info, container parameters, tensor headers)
};

// Throws yeto::Error (bad_input) with the row's location on any problem.
Sample decode_row(const Row& row, std::size_t index, const DataOptions& options, DecodeDepth depth = DecodeDepth::full);

MediaLimits limits_of(const DataOptions& options);

}  // namespace yeto::data
