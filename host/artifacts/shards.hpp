// Sharded safetensors output: shard-size parsing, the shard plan, a streaming safetensors
// writer (header first, then tensor bytes one tensor at a time, so no shard is ever held in
// memory) and the `*.safetensors.index.json` Diffusers / transformers read. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"

namespace yeto {
class AtomicFile;
}

namespace yeto::artifacts {

// "2GB" (10^9), "500MB", "10KB", "2GiB" (2^30), "1.5GB", "4096" (bytes), as huggingface_hub
// reads max_shard_size. Throws yeto::UsageError naming `what` for anything else, zero or an
// overflowing value.
std::uint64_t parse_size(const std::string& text, const std::string& what = "--max-shard-size");

// Splits tensors (sizes in bytes, in write order) into shards whose tensor bytes stay within
// `cap`: a tensor that would overflow the current shard starts a new one, and a tensor larger
// than the cap gets a shard of its own (huggingface_hub's rule). Returns the indices per shard.
std::vector<std::vector<std::size_t>> plan_shards(const std::vector<std::uint64_t>& sizes, std::uint64_t cap);

// "<stem>-00001-of-00003.safetensors" (1-based), or "<stem>.safetensors" when n == 1.
std::string shard_file_name(const std::string& stem, std::size_t index, std::size_t count);

struct TensorHeader {
  std::string name;
  io::DType dtype = io::DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t nbytes() const;
};

// Writes a safetensors file whose tensors are known up front: the header goes out first, then
// write() takes each tensor's bytes in the given order. commit() checks every tensor was
// written; an uncommitted writer leaves the target untouched (yeto::AtomicFile).
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::filesystem::path& path, std::vector<TensorHeader> tensors,
                          const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsStreamWriter();
  // The next tensor's bytes; throws yeto::Error naming the tensor when the size is wrong.
  void write(const std::string& name, const void* data, std::size_t size);
  void commit();

 private:
  std::vector<TensorHeader> tensors_;
  std::size_t next_ = 0;
  std::unique_ptr<AtomicFile> file_;
};

// {"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}.
nlohmann::json shard_index(std::uint64_t total_size, const std::map<std::string, std::string>& weight_map);

}  // namespace yeto::artifacts
