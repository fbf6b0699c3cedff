// Resolving the paths a manifest names. Relative paths resolve from the manifest's directory;
// a path that ends up outside that directory (through "..", an absolute path or a symlink) is
// refused unless data.allow_path_escape is set, so a manifest cannot read arbitrary files.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace yeto::data {

struct PathPolicy {
  std::filesystem::path root;  // the manifest's directory
  bool allow_escape = false;
};

// The resolved path, or an error message (without the row prefix) saying what to do.
struct ResolvedPath {
  std::filesystem::path path;
  std::string error;
  bool ok() const { return error.empty(); }
};
ResolvedPath resolve_manifest_path(const PathPolicy& policy, const std::string& text);

// True when `path` (after resolving symlinks of its existing prefix) lies under `root`.
bool is_within(const std::filesystem::path& root, const std::filesystem::path& path);

// Files of a directory in natural order ("f2.png" before "f10.png"), regular files only.
std::vector<std::filesystem::path> list_files_naturally(const std::filesystem::path& dir);
bool natural_less(const std::string& a, const std::string& b);

// Lowercase extension with the dot: ".png".
std::string lower_extension(const std::filesystem::path& p);
bool is_image_extension(const std::string& ext);
bool is_video_extension(const std::string& ext);
bool is_tensor_extension(const std::string& ext);

}  // namespace yeto::data
