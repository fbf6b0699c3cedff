// The provenance record of a run or an artifact: which model and data commits were used, the
// SHA-256 of every weight file and plugin loaded, the config hash and the host build. Written
// with yeto::atomic_write; docs/PROVENANCE.md describes the format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hub.hpp"

namespace yeto::config {
class Config;
}

namespace yeto::io {

struct ProvenanceFile {
  std::string path;  // relative to its repository (or absolute for a loose file)
  std::string sha256;
  std::uint64_t bytes = 0;
};

struct ProvenanceSource {
  std::string role;      // "model", "data", "validation_data", "adapter", ...
  std::string spec;      // as the user named it (alias, id or path)
  std::string id;        // hub id, empty for a local directory
  std::string revision;  // as asked
  std::string commit;    // resolved commit, empty for a local directory
  std::string path;      // where it was read from
  std::vector<ProvenanceFile> files;
};

struct ProvenancePlugin {
  std::string name;
  std::string version;
  std::string path;
  std::string sha256;
};

class Provenance {
 public:
  Provenance();  // records the host build (build_info()) and the creation time

  void set_config(const config::Config& cfg);  // config hash (Config::hash())
  void set_config_hash(const std::string& sha256) { config_hash_ = sha256; }
  // Records a resolved repository; `files` (relative to repo.path) are hashed. With no files
  // given, every weight file (*.safetensors, *.bin, *.pt, *.pth, *.ckpt) under repo.path is.
  ProvenanceSource& add_source(const std::string& role, const std::string& spec, const ResolvedRepo& repo,
                               const std::vector<std::filesystem::path>& files = {});
  void add_file(const std::string& role, const std::filesystem::path& file);
  void add_plugin(const std::string& name, const std::string& version, const std::filesystem::path& so_path);
  void set(const std::string& key, nlohmann::json value) { extra_[key] = std::move(value); }

  const std::vector<ProvenanceSource>& sources() const { return sources_; }
  const std::vector<ProvenancePlugin>& plugins() const { return plugins_; }
  const std::string& config_hash() const { return config_hash_; }

  nlohmann::json to_json() const;
  static Provenance from_json(const nlohmann::json& j);  // throws yeto::Error (bad_input)
  void write(const std::filesystem::path& path) const;   // atomic
  static Provenance read(const std::filesystem::path& path);

 private:
  nlohmann::json host_;
  std::string created_;
  std::string config_hash_;
  std::vector<ProvenanceSource> sources_;
  std::vector<ProvenancePlugin> plugins_;
  nlohmann::json extra_ = nlohmann::json::object();
};

// SHA-256 of a file, memoised per process by (path, size, modification time): hashing a
// 20 GB checkpoint once per run is enough.
std::string cached_sha256(const std::filesystem::path& path);
// Weight files under a directory (recursively, sorted, relative paths).
std::vector<std::filesystem::path> weight_files_under(const std::filesystem::path& dir);

}  // namespace yeto::io
