#include "data/check.hpp"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/cache_contract.hpp"
#include "data/loader.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"

namespace yeto::data {
namespace fs = std::filesystem;

int CheckReport::exit_code() const {
  if (!cache_contract.empty() && cache_contract != "ok") return static_cast<int>(ExitCode::bad_input);
  if (usable == 0) return static_cast<int>(ExitCode::bad_input);
  if (!bad_rows.empty() && policy == BadRowPolicy::error) return static_cast<int>(ExitCode::bad_input);
  return 0;
}

std::string CheckReport::text() const {
  std::ostringstream o;
  o << "dataset: " << source << "\n";
  o << "manifest: " << manifest << "\n";
  o << "rows: " << rows << " (" << usable << " usable, " << bad_rows.size() << " bad)\n";
  o << "media:";
  for (const auto& [k, n] : kinds) o << " " << k << "=" << n;
  o << "\n";
  o << "buckets (frames x height x width):\n";
  for (const auto& [k, n] : buckets) o << "  " << k.str() << ": " << n << " rows\n";
  if (!tensors.empty()) {
    o << "cached tensors:\n";
    for (const auto& [name, shapes] : tensors)
      for (const auto& [s, n] : shapes) o << "  " << name << " " << s << ": " << n << " rows\n";
  }
  if (!cache_contract.empty()) o << "cache contract: " << cache_contract << "\n";
  for (const auto& w : warnings) o << "warning: " << w << "\n";
  if (!bad_rows.empty()) {
    o << "bad rows (" << bad_rows.size() << "):\n";
    for (const auto& b : bad_rows) o << "  " << b << "\n";
  }
  if (exit_code() == 0) {
    o << (bad_rows.empty() ? "ok: every row is usable\n"
                           : "ok: " + std::to_string(bad_rows.size()) + " bad rows will be skipped (data.on_bad_row = \"skip\")\n");
  } else if (usable == 0) {
    o << "error: no usable rows\n";
  } else if (!bad_rows.empty() && policy == BadRowPolicy::error) {
    o << "error: " << bad_rows.size()
      << " rows are unusable; fix them, or set data.on_bad_row = \"skip\" to train without them\n";
  } else {
    o << "error: the cache dataset does not match this run\n";
  }
  return o.str();
}

nlohmann::json CheckReport::json() const {
  nlohmann::json j;
  j["source"] = source;
  j["manifest"] = manifest;
  j["rows"] = rows;
  j["usable"] = usable;
  j["kinds"] = kinds;
  nlohmann::json b = nlohmann::json::array();
  for (const auto& [k, n] : buckets)
    b.push_back({{"latent", k.latent}, {"frames", k.frames}, {"height", k.height}, {"width", k.width}, {"rows", n}});
  j["buckets"] = b;
  j["tensors"] = tensors;
  j["bad_rows"] = bad_rows;
  j["warnings"] = warnings;
  j["cache_contract"] = cache_contract;
  j["on_bad_row"] = policy == BadRowPolicy::skip ? "skip" : "error";
  j["ok"] = exit_code() == 0;
  return j;
}

CheckReport check_dataset(const DataOptions& o, const CheckOptions& c) {
  CheckReport r;
  r.policy = o.on_bad_row;
  const ResolvedSource src = resolve_source(o);
  r.source = src.kind == SourceKind::hub ? src.hub_id + "@" + src.hub_commit : o.source;
  r.manifest = src.manifest.string();
  const Manifest m = read_manifest(src, o);
  r.rows = m.total_rows;

  // Manifest-level errors and decode errors are merged in row order.
  std::vector<std::pair<std::int64_t, std::string>> bad;
  for (const auto& e : m.errors) bad.emplace_back(e.number, e.str());

  BatchPlan plan;
  for (std::size_t i = 0; i < m.rows.size(); ++i) plan.push_back({i});
  Loader loader(plan, [&](std::size_t i) { return decode_row(m.rows[i], i, o, c.depth); },
                {o.workers, std::max(o.prefetch, 2 * std::max(1, o.workers)), BadRowPolicy::skip, true});
  std::vector<bool> seen(m.rows.size(), false);
  std::map<std::size_t, std::string> reasons;
  while (auto batch = loader.next()) {
    for (const auto& s : batch->skipped) reasons[s.row] = s.reason;
    for (const auto& s : batch->samples) {
      seen[s.row] = true;
      ++r.usable;
      ++r.kinds[media_kind_name(s.kind)];
      ShapeKey k = s.shape;
      ++r.buckets[k];
      for (const auto& [name, info] : s.tensor_info) ++r.tensors[name][info.dtype + shape_str(info.shape)];
      for (const auto& [name, ref] : s.deferred)
        if (!s.tensor_info.count(name)) ++r.tensors[name]["(.pt: shape known when loaded)"];
    }
  }
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    if (seen[i]) continue;
    auto it = reasons.find(i);
    bad.emplace_back(m.rows[i].number, it != reasons.end() ? it->second : row_message(m.rows[i], "could not be decoded"));
  }
  std::sort(bad.begin(), bad.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [n, msg] : bad) r.bad_rows.push_back(std::move(msg));

  if (!o.bucket_by_shape && r.buckets.size() > 1 && o.micro_batch_size > 1)
    r.warnings.push_back("rows have " + std::to_string(r.buckets.size()) +
                         " different shapes and data.bucket_by_shape is off: micro batches would mix shapes; set data.bucket_by_shape = true");

  std::error_code ec;
  if (fs::is_regular_file(src.root() / kCacheContractFile, ec)) {
    CacheProfile expected = preprocessing_profile(o);
    expected.model_id = c.model_id;
    try {
      validate_cache_contract(src.root(), expected);
      r.cache_contract = "ok";
    } catch (const Error& e) {
      r.cache_contract = e.what();
    }
  }
  return r;
}

}  // namespace yeto::data
