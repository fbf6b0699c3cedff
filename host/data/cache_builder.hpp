// The bookkeeping of `yeto-host cache`: which rows of a dataset need (re)encoding into the
// cache dataset, and writing what an encoder produces as safetensors shards plus an index, so
// a re-run skips every row whose fingerprint is unchanged and an interrupted run resumes.
//
// Layout of a cache directory:
//   yeto_diffusion_cache.json   the contract (cache_contract.hpp), rewritten at the end of a run
//   index.jsonl                 one line per encoded row, appended and fsynced after its shard:
//                               {"key", "fingerprint", "shard", "row", "prompt", "tensors": {name: {dtype, shape}}}
//                               (later lines win; a torn last line is ignored)
//   shards/shard-NNNNN.safetensors  tensors named "<key>/<tensor>", written atomically
//   manifest.jsonl              a JSONL manifest of the cache (latents + embeddings by
//                               "shards/...#key/name"), so the directory is itself a data source
//   file_hashes.json            source-file content hashes keyed by path, size and mtime, so
//                               unchanged files are not re-read
//
// A row's key identifies it (its media reference and prompt); its fingerprint is the SHA-256
// of the content of every source file it reads, its inline bytes and prompt, the model id and
// commit, every component hash and the preprocessing settings. Touching a file without
// changing it re-hashes it and still skips; changing its content, a component or a setting
// recomputes exactly the rows it affects.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/cache_contract.hpp"
#include "data/decode.hpp"
#include "data/manifest.hpp"

namespace yeto::data {

// One tensor an encoder produced for one row.
struct NamedTensor {
  std::string name;
  std::string dtype;  // numpy-style: float32, bfloat16, int64, ...
  std::vector<std::int64_t> shape;
  std::string bytes;  // little-endian, row-major
};

// What the cache command plugs real encoders into (VAE for media, text encoders for
// prompts). One call per batch of samples; returns, per sample, the tensors to cache
// ("latents", "prompt_embeds", "prompt_attention_mask", "pooled_prompt_embeds", ...).
class CacheEncoder {
 public:
  virtual ~CacheEncoder() = default;
  virtual std::string model_id() const = 0;
  virtual std::string model_commit() const = 0;
  virtual std::map<std::string, std::string> component_hashes() const = 0;
  virtual std::vector<std::vector<NamedTensor>> encode(const std::vector<Sample>& batch) = 0;
};

// Content hashes of source files, reusing a stored hash while size and mtime are unchanged.
class FileHasher {
 public:
  explicit FileHasher(std::filesystem::path store);  // file_hashes.json; may not exist yet
  std::string hash(const std::filesystem::path& file);
  void save() const;
  std::size_t files_hashed() const { return hashed_; }  // actually read this run

 private:
  struct Entry {
    std::uintmax_t size = 0;
    std::int64_t mtime_ns = 0;
    std::string sha256;
  };
  std::filesystem::path store_;
  std::map<std::string, Entry> entries_;
  std::size_t hashed_ = 0;
};

std::string row_key(const Row& row);
// settings: the model/components/preprocessing part shared by every row.
std::string row_fingerprint(const Row& row, const std::string& settings, FileHasher& hasher);
std::string settings_fingerprint(const CacheProfile& profile);

struct IndexEntry {
  std::string key;
  std::string fingerprint;
  std::string shard;  // relative to the cache directory
  std::int64_t row = 0;
  std::string prompt;
  bool has_prompt = false;
  std::map<std::string, TensorSpec> tensors;
};
// Latest entry per key; ignores lines that do not parse (a torn tail after a crash).
std::map<std::string, IndexEntry> read_cache_index(const std::filesystem::path& dir);

struct CacheRunOptions {
  std::filesystem::path out_dir;
  DataOptions data;
  std::int64_t rows_per_shard = 64;
  std::int64_t batch_size = 4;  // samples per encode() call
  std::int64_t max_rows = 0;    // > 0: encode at most this many rows this run (the rest stays for a later run)
};

// Reported once before the first shard (starting) and after every shard.
struct CacheProgress {
  bool starting = false;
  std::int64_t done = 0;     // rows computed so far this run
  std::int64_t total = 0;    // rows to compute this run
  std::int64_t skipped = 0;  // rows already valid in the cache
  double rows_per_second = 0.0;
  double eta_seconds = 0.0;
};

struct CacheRunStats {
  std::int64_t computed = 0;
  std::int64_t skipped = 0;
  std::int64_t failed = 0;
  std::int64_t remaining = 0;  // rows still to encode (left out by max_rows)
  std::int64_t rows = 0;       // rows the cache now holds (valid for this dataset and model)
  std::vector<std::string> computed_keys;  // in the order they were encoded
  std::vector<std::string> errors;         // "<row location>: reason"
};

// Encodes every row of `manifest` that is missing or stale in the cache. Bad rows follow
// data.on_bad_row (error: throw; skip: count and continue). Writes the contract and the cache
// manifest at the end.
CacheRunStats build_cache(const Manifest& manifest, CacheEncoder& encoder, const CacheRunOptions& options,
                          const std::function<void(const CacheProgress&)>& progress = {});

}  // namespace yeto::data
