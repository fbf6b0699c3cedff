// Turning one row into one sample: raw media decoded and resized to the row's target shape
// (frames x height x width x RGB, 8-bit), cached tensors read as raw bytes (never resized),
// and the shape key the sampler buckets by. Torch-free; yeto_data_torch makes tensors of it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

// The memory that media decoding may hold at once, across every thread of the process (the
// loader's data.workers, the cache builder's threads): before decoding, a row reserves its
// estimated peak (read from the header: the decoded source, its RGB conversion and the resized
// output) and waits, in arrival order, until it fits in data.decode_memory_mb. A row larger
// than the whole budget runs alone. So decode memory is bounded by the budget (or the largest
// single row), not by data.workers x data.max_pixels.
class DecodeBudget {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(DecodeBudget* b, std::uint64_t bytes) : budget_(b), bytes_(bytes) {}
    Lease(Lease&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();

   private:
    DecodeBudget* budget_ = nullptr;
    std::uint64_t bytes_ = 0;
  };
  DecodeBudget();
  ~DecodeBudget();
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;
  static DecodeBudget& process();  // the one decode_row uses
  // Blocks until `bytes` fit within `capacity` next to what others hold (or nothing else is held).
  Lease reserve(std::uint64_t bytes, std::uint64_t capacity);
  std::uint64_t in_use() const;
  std::uint64_t peak() const;  // the most held at once since the last reset_peak()
  void reset_peak();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace yeto::data
