// Reading a manifest into rows. Every problem with one row becomes a RowError naming the
// manifest file, the row number (the 1-based line for JSONL) and what to do; the remaining
// rows are still read, so `data check` can list every bad row at once. Only an unreadable
// file (or, for a JSON array, a syntax error that makes the whole file unparsable) throws.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/options.hpp"
#include "data/row.hpp"
#include "data/source.hpp"

namespace yeto::data {

struct RowError {
  std::filesystem::path manifest;
  std::int64_t number = 0;
  bool jsonl = false;
  std::string message;
  std::string str() const;  // "/d/train.jsonl line 7: <message>"
};

struct Manifest {
  ResolvedSource source;
  std::vector<Row> rows;          // usable as far as the manifest alone can tell
  std::vector<RowError> errors;   // rows that are not
  std::int64_t total_rows = 0;    // rows seen (good + bad); blank JSONL lines are not rows
};

Manifest read_manifest(const ResolvedSource& source, const DataOptions& options);

// Parses one row object (exposed for tests). Throws yeto::Error with the message of the
// RowError (without the location prefix) when the row is unusable.
Row parse_row(const nlohmann::json& value, const DataOptions& options, const std::filesystem::path& manifest);

}  // namespace yeto::data
