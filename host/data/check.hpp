// `yeto-host data check`: validates a dataset without training. Reads the manifest, decodes
// every row exactly as training would (or, with --quick, checks headers and budgets only),
// and reports rows, media kinds, decoded shapes per bucket, cached-tensor shapes and every
// bad row with its row number and reason.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/decode.hpp"
#include "data/options.hpp"

namespace yeto::data {

struct CheckOptions {
  DecodeDepth depth = DecodeDepth::full;
  std::string model_id;  // when set, compared with a cache dataset's contract
};

struct CheckReport {
  std::string source;           // what data.path resolved to
  std::string manifest;
  std::int64_t rows = 0;        // rows in the manifest
  std::int64_t usable = 0;
  std::map<std::string, std::int64_t> kinds;        // "image" -> count
  std::map<ShapeKey, std::int64_t> buckets;         // decoded shape -> count
  std::map<std::string, std::map<std::string, std::int64_t>> tensors;  // name -> "float32[77, 768]" -> count
  std::vector<std::string> bad_rows;                // "<manifest> line N: reason", in row order
  std::vector<std::string> warnings;
  std::string cache_contract;   // "", "ok" or the mismatch message
  BadRowPolicy policy = BadRowPolicy::error;

  // Non-zero when a row is unusable under on_bad_row = error, when nothing is usable, or when
  // a cache contract does not match.
  int exit_code() const;
  std::string text() const;
  nlohmann::json json() const;
};

// Throws yeto::Error only when the source itself cannot be read.
CheckReport check_dataset(const DataOptions& options, const CheckOptions& check = {});

}  // namespace yeto::data
