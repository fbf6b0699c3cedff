#include "io/hub.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::io {
namespace fs = std::filesystem;

namespace {

bool is_hex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool id_segment_ok(const std::string& s) {
  if (s.empty() || s.size() > 96 || s == "." || s == ".." || s.find("--") != std::string::npos) return false;
  if (s.front() == '-' || s.front() == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::vector<std::string> list_dir(const fs::path& p, bool dirs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (dirs ? e.is_directory(ec) : e.is_regular_file(ec)) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Refs may have slashes (refs/pr/1); they never climb out of refs/.
bool ref_name_ok(const std::string& r) {
  if (r.empty() || r.front() == '/') return false;
  for (const auto& part : split(r, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

std::vector<std::string> list_refs(const fs::path& refs) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(refs, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) out.push_back(fs::relative(it->path(), refs, ec).string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string short_list(const std::vector<std::string>& v) {
  if (v.empty()) return "none";
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(v.size(), 8)));
  return join(head, ", ") + (v.size() > 8 ? ", ... (" + std::to_string(v.size()) + " in all)" : "");
}

}  // namespace

std::string repo_type_name(RepoType t) { return t == RepoType::model ? "model" : "dataset"; }

HubCache hub_cache(const fs::path& configured) {
  if (!configured.empty()) return {configured, "model.hub_cache"};
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return {c, "$HF_HUB_CACHE"};
  if (const char* c = std::getenv("HUGGINGFACE_HUB_CACHE"); c && *c) return {c, "$HUGGINGFACE_HUB_CACHE"};
  if (const char* h = std::getenv("HF_HOME"); h && *h) return {fs::path(h) / "hub", "$HF_HOME/hub"};
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return {fs::path(x) / "huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub"};
  const char* home = std::getenv("HOME");
  return {fs::path(home && *home ? home : "/") / ".cache/huggingface/hub", "default (~/.cache/huggingface/hub)"};
}

bool is_hub_id(const std::string& s) {
  const auto parts = split(s, '/');
  if (parts.size() == 1) return id_segment_ok(parts[0]);
  return parts.size() == 2 && id_segment_ok(parts[0]) && id_segment_ok(parts[1]);
}

std::string hub_folder_name(const std::string& id, RepoType type) {
  std::string name = (type == RepoType::model ? "models--" : "datasets--");
  for (char c : id) {
    if (c == '/') name += "--";
    else name += c;
  }
  return name;
}

bool is_full_commit(const std::string& s) { return s.size() == 40 && is_hex(s); }

std::string ResolvedRepo::describe() const {
  if (local) return path.string();
  return id + "@" + commit + (revision != commit ? " (" + revision + ")" : "");
}

ResolvedRepo resolve_repo(const std::string& spec, RepoType type, const std::string& revision_in,
                          const HubCache& cache) {
  const std::string kind = repo_type_name(type);
  std::error_code ec;
  ResolvedRepo r;
  r.type = type;
  r.revision = revision_in.empty() ? "main" : revision_in;
  const bool pathlike = !spec.empty() && (spec[0] == '/' || spec[0] == '.' || spec[0] == '~');
  if (spec.empty()) throw UsageError("no " + kind + " given");
  if (pathlike || fs::is_directory(spec, ec) || !is_hub_id(spec)) {
    fs::path p = spec;
    if (spec[0] == '~') {
      const char* home = std::getenv("HOME");
      p = fs::path(home ? home : "") / spec.substr(spec.size() > 1 && spec[1] == '/' ? 2 : 1);
    }
    if (!fs::is_directory(p, ec))
      throw Error(kind + " '" + spec + "' not found: it is not a directory" +
                      (is_hub_id(spec) ? std::string() : ", nor an org/name id"),
                  ExitCode::not_found);
    r.path = fs::absolute(p, ec).lexically_normal();
    r.local = true;
    r.revision.clear();
    return r;
  }
  r.id = spec;
  const fs::path repo = cache.dir / hub_folder_name(spec, type);
  const std::string where = " (hub cache " + cache.dir.string() + ", from " + cache.source + ")";
  if (!fs::is_directory(repo, ec))
    throw Error(kind + " '" + spec + "' is not in the hub cache: looked for " + repo.string() + where +
                    "; Yeto never downloads: fetch it first (e.g. `huggingface-cli download " +
                    (type == RepoType::dataset ? "--repo-type dataset " : "") + spec + "`) or pass a local directory",
                ExitCode::not_found);
  const fs::path refs = repo / "refs", snaps = repo / "snapshots";
  const std::vector<std::string> snapshots = list_dir(snaps, true);
  const std::string& rev = r.revision;
  auto found = [&](const std::string& commit) {
    r.commit = commit;
    r.path = snaps / commit;
    return r;
  };
  if (is_full_commit(rev)) {
    if (fs::is_directory(snaps / rev, ec)) return found(rev);
    throw Error(kind + " '" + spec + "': commit " + rev + " has no snapshot: looked for " + (snaps / rev).string() +
                    where + "; snapshots present: " + short_list(snapshots),
                ExitCode::not_found);
  }
  if (ref_name_ok(rev) && fs::is_regular_file(refs / rev, ec)) {
    const std::string commit = trim(read_file(refs / rev));
    if (!is_full_commit(commit))
      throw Error(kind + " '" + spec + "': " + (refs / rev).string() + " does not hold a commit id (it holds '" +
                      commit.substr(0, 60) + "')",
                  ExitCode::bad_input);
    if (!fs::is_directory(snaps / commit, ec))
      throw Error(kind + " '" + spec + "': dangling ref: " + (refs / rev).string() + " points at commit " + commit +
                      " but " + (snaps / commit).string() + " does not exist" + where +
                      "; fetch that revision again, or pass --revision with one of the snapshots present: " +
                      short_list(snapshots),
                  ExitCode::not_found);
    return found(commit);
  }
  if (rev.size() >= 7 && rev.size() < 40 && is_hex(rev)) {
    std::vector<std::string> matches;
    for (const auto& s : snapshots)
      if (starts_with(s, rev) && is_full_commit(s)) matches.push_back(s);
    if (matches.size() == 1) return found(matches.front());
    if (matches.size() > 1)
      throw Error(kind + " '" + spec + "': short commit " + rev + " is ambiguous: it matches " + join(matches, ", "),
                  ExitCode::bad_input);
  }
  throw Error(kind + " '" + spec + "': revision '" + rev + "' is not in the hub cache: looked for " +
                  (refs / rev).string() + " and for a snapshot " + (snaps / (rev + "*")).string() + where +
                  "; refs present: " + short_list(list_refs(refs)) + "; snapshots present: " + short_list(snapshots),
              ExitCode::not_found);
}

}  // namespace yeto::io
