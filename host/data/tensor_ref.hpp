// Cached tensors named by a manifest: parsing the manifest value, probing a file's dtype and
// shape from its header (safetensors, npy) without reading the data, and reading the raw
// bytes (torch-free). `.pt`/`.pth` files need LibTorch's unpickler: their shape is unknown
// here and yeto_data_torch loads them. host/io owns the full readers; it can install its
// prober with set_tensor_prober() so both agree.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/paths.hpp"
#include "data/row.hpp"

namespace yeto::data {

// Throws yeto::Error (bad_input) with the field name on a malformed value.
TensorRef parse_tensor_ref(const nlohmann::json& value, const std::string& field, const PathPolicy& policy);

struct TensorInfo {
  std::string dtype;  // numpy-style names: float32, float16, bfloat16, int64, uint8, bool, ...
  std::vector<std::int64_t> shape;
  bool known = false;  // false: the format needs LibTorch to read (pt/pth)
};

// Reads only the header. Throws yeto::Error (bad_input) naming the file and what is wrong.
TensorInfo probe_tensor(const TensorRef& ref);
using TensorProber = std::function<TensorInfo(const TensorRef&)>;
void set_tensor_prober(TensorProber prober);  // empty: back to the built-in one

struct RawTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;  // little-endian, row-major (C order)
};
// Inline tensors, .npy and .safetensors; throws for .pt/.pth (use yeto_data_torch).
RawTensor read_tensor_raw(const TensorRef& ref);

std::size_t dtype_size(const std::string& dtype);  // 0 when unknown
std::string safetensors_dtype_name(const std::string& dtype);  // "float32" -> "F32"; "" when unknown
std::int64_t element_count(const std::vector<std::int64_t>& shape);
std::string shape_str(const std::vector<std::int64_t>& shape);  // "[2, 77, 768]"

}  // namespace yeto::data
