// safetensors <-> LibTorch. Kept apart from safetensors.hpp so torch-free code can read files.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "io/safetensors.hpp"

namespace yeto::io {

// The LibTorch dtype a safetensors dtype loads as. This LibTorch has no float8 types, so
// F8_E4M3 / F8_E5M2 load as float32 (decoded exactly).
c10::ScalarType scalar_type_for(DType d);
// The safetensors dtype for a LibTorch dtype; throws yeto::Error (bad_input) for dtypes the
// format cannot hold (complex, quantized).
DType dtype_for(c10::ScalarType t, const std::string& tensor_name = "");

// Copies the tensor's bytes into an owned, contiguous CPU tensor of the matching dtype.
at::Tensor to_tensor(const SafetensorsFile& file, const TensorInfo& info);

// The tensor's bytes in the file's mapping as a CPU tensor, without a copy: the tensor keeps the
// mapping alive (however long the file object itself lives). The mapping is private, so writing
// to such a tensor copies the pages it touches and never changes the file. Undefined when the
// bytes cannot be viewed: float8 (no LibTorch dtype), or not aligned to the element size.
at::Tensor mapped_tensor(const SafetensorsFile& file, const TensorInfo& info);

// The tensor as `dtype` (floating tensors only; others keep theirs) on `device`, read once: a
// view of the mapping (mapped_tensor) when nothing needs converting, otherwise one converted
// copy made straight from the mapping, after which the file's pages of the tensor are released.
// `*mapped` (when given) says which of the two it is.
at::Tensor tensor_as(const SafetensorsFile& file, const TensorInfo& info, c10::ScalarType dtype,
                     const c10::Device& device, bool* mapped = nullptr);

// A float8_e4m3fn tensor's codes as they are stored: a uint8 CPU tensor of its shape viewing the
// file's mapping (no copy; the tensor keeps the mapping alive). Throws yeto::Error (bad_input)
// for another dtype.
at::Tensor fp8_codes(const SafetensorsFile& file, const TensorInfo& info);
// The per-row float32 scales [rows] of a scaled fp8 weight (io/fp8_scaled.hpp) from its scale
// tensor: one value ([] / [1]) repeated, or one per row ([rows] / [rows, 1]) converted exactly;
// ones when `scale` is null (codes stored without a scale).
at::Tensor fp8_row_scales(const SafetensorsFile& file, const TensorInfo* scale, std::int64_t rows);

// Every tensor of the file, by name (owned copies).
std::map<std::string, at::Tensor> load_safetensors(const std::filesystem::path& path);

// Writes the tensors (any device / layout; non-contiguous or device tensors are copied to a
// contiguous CPU tensor first) atomically, in the given order.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace yeto::io
