// The weights of one component folder: a single safetensors file or a sharded checkpoint
// (`*.safetensors.index.json`), in the default or a named variant (`fp16`, `bf16`). Shards
// are mapped only when a tensor in them is asked for, and tensors are read one at a time,
// so opening a 20 GB checkpoint costs a few headers, not 20 GB of memory. Torch-free.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace yeto::io {

class WeightSource {
 public:
  // `where` is a component folder, a .safetensors file or a .safetensors.index.json file.
  // Throws yeto::Error: not_found when there are no safetensors weights (the message lists the
  // file names it tried), bad_input for an invalid index.
  static WeightSource open(const std::filesystem::path& where, const std::string& variant = "");

  const std::filesystem::path& root() const;         // the folder (or the file's folder)
  const std::string& variant() const;
  const std::vector<std::filesystem::path>& files() const;  // every weight file, sorted
  std::filesystem::path index_file() const;           // empty when not sharded
  const std::vector<std::string>& names() const;     // every tensor name, sorted
  bool has(const std::string& name) const;
  // The tensor's header entry and the file holding it (mapped on first use). Throws
  // yeto::Error (not_found) for an unknown name; bad_input when an index points at a shard
  // that lacks the tensor.
  struct Located {
    SafetensorsFile file;
    const TensorInfo* info = nullptr;
  };
  Located locate(const std::string& name) const;
  // Opens every shard and checks the index against their contents in both directions
  // (and for names held by two shards). Throws yeto::Error (bad_input) on a mismatch.
  void validate() const;
  std::uint64_t total_bytes() const;  // tensor bytes over every file (maps every shard)

  struct State;  // implementation detail

 private:
  std::shared_ptr<State> s_;
};

// The weight-file names a component folder may hold, in the order they are tried.
std::vector<std::string> weight_file_candidates(const std::string& variant);

}  // namespace yeto::io
