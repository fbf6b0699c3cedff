#include "data/source.hpp"

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "data/paths.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
namespace {

std::mutex& resolver_mutex() {
  static std::mutex m;
  return m;
}
HubDatasetResolver& resolver_slot() {
  static HubDatasetResolver r = resolve_hub_dataset_builtin;
  return r;
}

std::string conversion_advice(const fs::path& p) {
  return "Parquet/Arrow datasets are not supported yet (" + p.string() +
         "). Convert to JSON Lines, one row per line, e.g. with Python: "
         "`import pandas as pd; pd.read_parquet('train.parquet').to_json('train.jsonl', orient='records', lines=True)` "
         "(for Arrow: `datasets.load_from_disk(dir).to_json('train.jsonl')`). Image bytes become "
         "{\"bytes\": \"<base64>\"} objects, which the image column accepts; or write the media to files "
         "and put their relative paths in the image/video column.";
}

bool is_columnar(const fs::path& p) {
  const std::string e = lower_extension(p);
  return e == ".parquet" || e == ".arrow" || e == ".feather";
}

ResolvedSource from_file(const fs::path& file, const DataOptions& o) {
  if (is_columnar(file) || o.format == "parquet" || o.format == "arrow") throw Error(conversion_advice(file), ExitCode::bad_input);
  const std::string e = lower_extension(file);
  ResolvedSource s;
  s.manifest = fs::absolute(file).lexically_normal();
  if (o.format == "jsonl") s.jsonl = true;
  else if (o.format == "json") s.jsonl = false;
  else if (e == ".jsonl" || e == ".ndjson") s.jsonl = true;
  else if (e == ".json") s.jsonl = false;
  else
    throw UsageError(o.source_key + " " + file.string() +
                     ": cannot tell the manifest format from the extension; name it .json or .jsonl, or set data.format = \"json\" or \"jsonl\"");
  return s;
}

ResolvedSource from_directory(const fs::path& dir, const DataOptions& o) {
  for (const auto& name : manifest_names()) {
    const fs::path p = dir / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) {
      ResolvedSource s = from_file(p, o);
      s.kind = SourceKind::directory;
      return s;
    }
  }
  // A directory of Parquet/Arrow shards (the usual hub layout) gets the conversion advice.
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 3) it.disable_recursion_pending();
    if (it->is_regular_file(ec) && is_columnar(it->path())) throw Error(conversion_advice(it->path()), ExitCode::bad_input);
  }
  throw Error("dataset directory " + dir.string() + " holds no manifest; expected one of " + join(manifest_names(), ", ") +
                  " (a JSON array of rows or JSON Lines, one row per line)",
              ExitCode::not_found);
}

}  // namespace

const std::vector<std::string>& manifest_names() {
  static const std::vector<std::string> names = {"metadata.jsonl", "manifest.jsonl", "train.jsonl", "data.jsonl",
                                                 "metadata.json",  "manifest.json",  "train.json",  "data.json"};
  return names;
}

void set_hub_dataset_resolver(HubDatasetResolver resolver) {
  std::lock_guard<std::mutex> lock(resolver_mutex());
  resolver_slot() = resolver ? std::move(resolver) : HubDatasetResolver(resolve_hub_dataset_builtin);
}

fs::path default_hub_cache(const fs::path& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("HF_HUB_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("HF_HOME"); v && *v) return fs::path(v) / "hub";
  if (const char* v = std::getenv("HOME"); v && *v) return fs::path(v) / ".cache" / "huggingface" / "hub";
  return ".cache/huggingface/hub";
}

bool looks_like_hub_id(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= s.size() || s.find('/', slash + 1) != std::string::npos) return false;
  if (s.front() == '.' || s.find("..") != std::string::npos) return false;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '/')) return false;
  }
  return true;
}

HubSnapshot resolve_hub_dataset_builtin(const std::string& id, const std::string& revision, const fs::path& hub_cache) {
  const fs::path cache = default_hub_cache(hub_cache);
  // "datasets--org--name": the slash becomes a double dash.
  const std::string folder = "datasets--" + id.substr(0, id.find('/')) + "--" + id.substr(id.find('/') + 1);
  const fs::path repo = cache / folder;
  std::error_code ec;
  if (!fs::is_directory(repo, ec))
    throw Error("dataset " + id + " is not in the hub cache: looked for " + repo.string() +
                    ". Nothing is downloaded at run time: fetch it first (e.g. `huggingface-cli download --repo-type dataset " +
                    id + " --revision " + revision + "`), or point model.hub_cache / HF_HUB_CACHE at the cache that has it",
                ExitCode::not_found);
  std::string commit;
  const fs::path ref = repo / "refs" / revision;
  if (fs::is_regular_file(ref, ec)) {
    commit = trim(read_file(ref));
  } else if (fs::is_directory(repo / "snapshots" / revision, ec)) {
    commit = revision;  // already a commit
  } else {
    throw Error("dataset " + id + ": revision '" + revision + "' is not in the hub cache (no " + ref.string() + " and no snapshots/" +
                    revision + "); set data.revision to a branch, tag or commit that was downloaded",
                ExitCode::not_found);
  }
  const fs::path snap = repo / "snapshots" / commit;
  if (commit.empty() || !fs::is_directory(snap, ec))
    throw Error("dataset " + id + ": revision '" + revision + "' points at commit '" + commit + "' but " + snap.string() +
                    " does not exist; the cache is incomplete, download the dataset again",
                ExitCode::not_found);
  return {snap, commit};
}

ResolvedSource resolve_source(const DataOptions& o) {
  if (o.source.empty())
    throw UsageError("no training data: set data.path (or --data) to a JSON/JSONL manifest, a directory holding one, or an org/name dataset id");
  fs::path p(o.source);
  if (p.is_relative()) p = o.source_base / p;
  p = p.lexically_normal();
  std::error_code ec;
  const bool exists = fs::exists(p, ec);
  if (o.format == "hub" || (!exists && looks_like_hub_id(o.source))) {
    HubDatasetResolver resolver;
    {
      std::lock_guard<std::mutex> lock(resolver_mutex());
      resolver = resolver_slot();
    }
    const HubSnapshot snap = resolver(o.source, o.revision, o.hub_cache);
    ResolvedSource s = from_directory(snap.dir, o);
    s.kind = SourceKind::hub;
    s.hub_id = o.source;
    s.hub_commit = snap.commit;
    return s;
  }
  if (!exists) throw Error(o.source_key + " " + p.string() + " does not exist", ExitCode::not_found);
  if (fs::is_directory(p, ec)) return from_directory(p, o);
  return from_file(p, o);
}

}  // namespace yeto::data
