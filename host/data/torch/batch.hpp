// Decoded samples to LibTorch batches: the only part of the data pipeline that includes
// LibTorch (library yeto_data_torch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/decode.hpp"

namespace yeto::data {

struct TensorBatch {
  // Raw media: float32 in [-1, 1], [B, 3, H, W] for images and [B, 3, F, H, W] for videos
  // (channels first, the layout VAEs take). Undefined for cached-latent batches.
  at::Tensor pixel_values;
  std::vector<std::string> prompts;          // rows with a prompt (empty strings otherwise)
  std::map<std::string, at::Tensor> tensors; // cached tensors stacked on a new batch dimension
  std::vector<std::size_t> rows;
};

// One sample's pixels as float32 [3, H, W] or [3, F, H, W] in [-1, 1].
at::Tensor pixels_to_tensor(const Sample& sample);
// Cached tensors, in their stored dtype; .pt/.pth are loaded with torch::pickle_load.
at::Tensor raw_to_tensor(const RawTensor& raw);
at::Tensor load_tensor_file(const TensorRef& ref);

// The other way, for what a plugin generated: its "video" output, else its "images", checked to be
// [1, 3, H, W] or [1, 3, F, H, W] (throws yeto::Error naming `who` otherwise).
at::Tensor generated_media(const std::vector<std::pair<std::string, at::Tensor>>& outputs, const std::string& who);
// [3, F, H, W] (or [3, H, W]) in [0, 1] -> F*H*W*3 bytes, frame-major, rounded as Diffusers'
// numpy_to_pil ((x * 255).round()).
std::vector<std::uint8_t> media_to_rgb8(const at::Tensor& media);

// Throws yeto::Error when samples of one batch differ in kind or shape (bucket_by_shape
// exists to prevent that) or when a cached tensor is missing from some of them.
TensorBatch collate(const std::vector<Sample>& samples);

}  // namespace yeto::data
