// `yeto-host report RUN_DIR`: the run report, RUN_DIR/report/index.html with its PNG plots, read
// from what a run leaves behind — metrics.jsonl (per island for an embedded run), the syncer's
// tape, the islands' sync events, the validation renders' index, config.toml, summary.json and
// the syncer's final.json. Every input is optional: what is missing is left out of the page.
// Torch-free; the same run directory always gives the same files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::report {

// The records of a metrics.jsonl merged per step, in step order. A record whose step is not after
// the previous record's belongs to a restarted (resumed) run: it replaces every record from its
// step on, so a step that appears again is drawn once, with its latest values. Records of the
// same step one after another are merged (later fields win). Torn lines are skipped.
std::map<std::int64_t, nlohmann::json> read_metrics(const std::filesystem::path& metrics_jsonl);

struct ReportFiles {
  std::filesystem::path index;               // RUN_DIR/report/index.html
  std::vector<std::filesystem::path> images;  // the plots written beside it
};

// Writes RUN_DIR/report/ (created; files replaced atomically). Throws yeto::Error when RUN_DIR is
// not a directory or holds no metrics, tape or sync events at all.
ReportFiles write_report(const std::filesystem::path& run_dir);

// write_report at the end of a run: the index page, or nothing with `warning` saying why (a
// report that cannot be written never fails the run).
std::optional<std::filesystem::path> try_write_report(const std::filesystem::path& run_dir, std::string& warning);

}  // namespace yeto::report
