// The cache dataset contract, yeto_diffusion_cache.json, written by `yeto-host cache` next to
// its shards. It records what the cached tensors were made with -- model id and commit, a
// content hash per model component (VAE, text encoders), the preprocessing settings and the
// per-row tensor dtypes/shapes -- so a run that trains on the cache can refuse one made for a
// different model, encoder or shape profile with a message naming every difference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/options.hpp"

namespace yeto::data {

inline constexpr const char* kCacheContractFile = "yeto_diffusion_cache.json";
inline constexpr const char* kCacheFormat = "yeto-diffusion-cache";
inline constexpr int kCacheVersion = 1;

struct TensorSpec {
  std::string dtype;
  std::vector<std::int64_t> shape;  // per row, without a batch dimension
};

// What a cache is (or must be) made for. Empty fields are "unknown" and not compared.
struct CacheProfile {
  std::string model_id;
  std::string model_commit;
  std::map<std::string, std::string> components;  // component name -> sha256 of its weights
  std::optional<std::int64_t> height, width, num_frames;
  std::optional<std::string> resize_mode;
  std::optional<double> fps;
  std::map<std::string, TensorSpec> tensors;  // "latents", "prompt_embeds", ...
};

// The preprocessing part of a profile, from the data options.
CacheProfile preprocessing_profile(const DataOptions& options);

nlohmann::json contract_to_json(const CacheProfile& profile, std::int64_t rows);
CacheProfile contract_from_json(const nlohmann::json& contract, const std::filesystem::path& file);

// Every difference between what the cache holds and what the run expects, one line each
// ("preprocessing.height: cache 512, run 768"); empty when they agree.
std::vector<std::string> contract_mismatches(const CacheProfile& cache, const CacheProfile& expected);

// Reads and checks `dir/yeto_diffusion_cache.json`; throws yeto::Error (bad_input) listing
// every mismatch and what to do. Returns the cache's profile.
CacheProfile validate_cache_contract(const std::filesystem::path& dir, const CacheProfile& expected);

}  // namespace yeto::data
