// Where the rows come from: a JSON/JSONL manifest file, a directory holding one, or an
// org/name dataset id resolved offline from the Hugging Face hub cache at a pinned revision.
// Parquet and Arrow sources are refused with a message saying how to convert them.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "data/options.hpp"

namespace yeto::data {

enum class SourceKind { file, directory, hub };

struct ResolvedSource {
  SourceKind kind = SourceKind::file;
  std::filesystem::path manifest;  // the JSON/JSONL file rows are read from
  bool jsonl = false;
  std::string hub_id;              // hub: org/name
  std::string hub_commit;          // hub: the immutable commit the revision resolved to
  std::filesystem::path root() const { return manifest.parent_path(); }
};

// Resolves a dataset id at a revision to its snapshot directory (and commit). host/io owns
// the hub cache; it installs its resolver with set_hub_dataset_resolver(). Until then, and
// in torch-free tools, the built-in resolver reads the standard cache layout
// (datasets--org--name/refs/<revision> -> snapshots/<commit>/).
struct HubSnapshot {
  std::filesystem::path dir;
  std::string commit;
};
using HubDatasetResolver =
    std::function<HubSnapshot(const std::string& id, const std::string& revision, const std::filesystem::path& hub_cache)>;
void set_hub_dataset_resolver(HubDatasetResolver resolver);
HubSnapshot resolve_hub_dataset_builtin(const std::string& id, const std::string& revision,
                                        const std::filesystem::path& hub_cache);

// The hub cache directory: `configured` if set, else $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub.
std::filesystem::path default_hub_cache(const std::filesystem::path& configured);

// True for "org/name" (one slash, hub-legal characters, not an existing path).
bool looks_like_hub_id(const std::string& s);

// Throws yeto::Error (not_found / bad_input / usage) naming what was looked for and what to do.
ResolvedSource resolve_source(const DataOptions& options);

// The manifest file names a dataset directory may hold, in the order they are preferred.
const std::vector<std::string>& manifest_names();

}  // namespace yeto::data
