// NumPy .npy arrays (format versions 1-3): numeric and bool dtypes, either byte order (big-endian
// data is swapped to little-endian on read), C or Fortran order. Object, string and structured
// dtypes are refused: they would need the pickle module. Torch-free (tensor_files.hpp converts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"

namespace yeto::io {

struct NpyArray {
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  bool fortran_order = false;     // data is column-major
  std::vector<std::byte> data;    // little-endian, in the file's order
  std::uint64_t numel() const;
};

// Throws yeto::Error: not_found for a missing file, bad_input (naming the file) for anything
// malformed or unsupported.
NpyArray read_npy(const std::filesystem::path& path);
NpyArray parse_npy(std::string_view bytes, const std::string& label);

}  // namespace yeto::io
