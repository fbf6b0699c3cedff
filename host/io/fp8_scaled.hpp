// Scaled fp8 checkpoints as they are published: an e4m3 weight (safetensors F8_E4M3) stored with
// a companion scale, the weight being decode(code) x scale. Two layouts are read:
// - `<m>.weight` + `<m>.weight_scale` (NAVA_fp8.safetensors' FP8Linear: a bf16 scale);
// - `<m>.weight` + `<m>.scale_weight` (ComfyUI's fp8_scaled files: an F32 scalar), with the
//   `scaled_fp8` marker tensor and, for layers that also quantise their input, `<m>.scale_input`
//   (consumed and ignored: fp8 storage here is weight-only, activations stay in the compute dtype).
// A scale is one value for the whole tensor (shape [] or [1]) or one per output row ([out] or
// [out, 1]). Torch-free: this pairs the names of a file's tensors; io/tensors.hpp reads them.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.hpp"

namespace yeto::io {

struct Fp8Layout {
  // Every F8_E4M3 tensor (not the marker) -> the name of its scale tensor; "" when the file has
  // no scales at all (codes as they are, scale 1).
  std::map<std::string, std::string> scale_of;
  // Names that are not weights of a model: the scales, the marker, the input scales.
  std::set<std::string> consumed;
  std::size_t input_scales = 0;  // `scale_input` tensors consumed (ignored)
};

// Pairs the tensors (name, header) of one checkpoint. Throws yeto::Error (bad_input), naming the
// tensor and `where`, for: a scale whose weight is absent or not F8_E4M3; a scale of another
// shape than [], [1], [out], [out, 1] (out = the weight's first dimension) or of a non-float
// dtype; an F8_E4M3 tensor without a scale in a file that has scales (or the scaled_fp8 marker);
// two scales for one weight.
Fp8Layout pair_fp8_scales(const std::vector<std::pair<std::string, const TensorInfo*>>& tensors,
                          const std::string& where);

}  // namespace yeto::io
