// Offline resolution of Hugging Face ids through the standard hub cache layout:
//   <cache>/models--org--name/refs/<branch-or-tag>   (a file holding a commit)
//   <cache>/models--org--name/snapshots/<commit>/    (the files of that commit)
// (datasets--org--name for datasets). A revision is a branch, a tag, a full or a short
// (>= 7 hex digits) commit, and always resolves to the immutable full commit. Nothing is
// downloaded: a missing repository or revision is an error that lists where it looked.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace yeto::io {

enum class RepoType { model, dataset };
std::string repo_type_name(RepoType t);  // "model", "dataset"

struct HubCache {
  std::filesystem::path dir;
  std::string source;  // how it was chosen: "model.hub_cache", "$HF_HUB_CACHE", "$HF_HOME/hub", "default"
};

// The hub cache: `configured` when non-empty, else $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub ($XDG_CACHE_HOME is honoured as HF does).
HubCache hub_cache(const std::filesystem::path& configured = {});

struct ResolvedRepo {
  std::string id;              // "org/name"; empty for a local directory
  RepoType type = RepoType::model;
  std::filesystem::path path;  // the snapshot directory or the local directory
  std::string revision;        // as asked
  std::string commit;          // full 40-hex commit; empty for a local directory
  bool local = false;
  std::string describe() const;  // "org/name@<commit> (main)" or the local path
};

// True for "org/name" (and legacy single-segment names) in the hub's allowed characters.
bool is_hub_id(const std::string& s);
// The cache folder name of an id: "models--org--name".
std::string hub_folder_name(const std::string& id, RepoType type);
bool is_full_commit(const std::string& s);

// A local directory (when `spec` names an existing directory, or starts with / . ~) or a hub
// id in the cache. Throws yeto::Error (not_found) listing the places it looked and what the
// cache does hold; bad_input for a corrupt ref or an ambiguous short commit.
ResolvedRepo resolve_repo(const std::string& spec, RepoType type, const std::string& revision,
                          const HubCache& cache);

}  // namespace yeto::io
