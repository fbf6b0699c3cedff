// safetensors files: a memory-mapped reader whose header is validated as untrusted input
// before any tensor is touched, and a streaming writer. No LibTorch here (see tensors.hpp).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data area; offsets are relative to the start of the data area and must cover it
// contiguously without gaps or overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::io {

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

std::size_t dtype_size(DType d);
std::string dtype_name(DType d);  // the safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::optional<DType> parse_dtype(std::string_view name);
const std::vector<DType>& all_dtypes();

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // from the start of the data area
  std::uint64_t nbytes = 0;
  std::uint64_t numel() const;
};

// Limits applied to untrusted headers.
struct SafetensorsLimits {
  std::uint64_t max_header_bytes = 100u << 20;  // the reference implementation's cap
  std::size_t max_rank = 64;
};

// "[2, 3, 4]"
std::string shape_str(const std::vector<std::int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps the file and validates its header. Throws yeto::Error (ExitCode::bad_input) naming the
  // file and, where it applies, the tensor; ExitCode::not_found when the file does not exist.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Validates an in-memory image of a file (used by tests and for buffers received otherwise).
  // `label` names it in errors. The bytes are copied.
  static SafetensorsFile from_bytes(std::string_view bytes, const std::string& label,
                                    const SafetensorsLimits& limits = {});

  const std::vector<TensorInfo>& tensors() const;  // in file (offset) order
  const TensorInfo* find(std::string_view name) const;
  // Start of the tensor's bytes inside the mapping (valid while any copy of this object lives).
  const std::byte* data(const TensorInfo& t) const;
  std::span<const std::byte> bytes(const TensorInfo& t) const;
  // Copies the tensor's bytes to `dst` (t.nbytes of room). For a mapped file this reads with
  // pread(2) rather than through the mapping: no page faults, near plain-read throughput.
  void copy_to(const TensorInfo& t, void* dst) const;
  const std::map<std::string, std::string>& metadata() const;
  const std::filesystem::path& path() const;
  std::uint64_t file_size() const;
  std::uint64_t header_size() const;  // N, without the 8-byte length prefix
  std::uint64_t data_size() const;    // bytes of the data area
  // Tells the kernel the tensor's pages may be dropped (they are re-read on next access), so
  // loading a large checkpoint tensor by tensor keeps resident memory bounded. Only for a tensor
  // no live tensor views (mapped_tensor): pages written through a view would be dropped.
  void release(const TensorInfo& t) const;

 private:
  struct State;
  std::shared_ptr<const State> s_;
};

// Parses and validates a header (the JSON text, without the length prefix) against a data
// area of `data_size` bytes. Exposed for the fuzz test; open() uses it.
struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
};
ParsedHeader parse_safetensors_header(std::string_view json, std::uint64_t data_size,
                                      const std::string& label, const SafetensorsLimits& limits = {});

// One tensor to write: its bytes are borrowed for the duration of the call.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes a safetensors file atomically (yeto::AtomicFile): header keys sorted by name, data in
// entry order, header padded with spaces to a multiple of 8. Throws yeto::Error (bad_input) on
// duplicate names, the reserved name "__metadata__" or a byte size that does not match
// shape x dtype.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

// The header-plus-data bytes write_safetensors would write (for tests and in-memory use).
std::string serialize_safetensors(const std::vector<SafetensorsEntry>& entries,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace yeto::io
