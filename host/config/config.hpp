// The resolved run configuration: schema defaults, then the TOML run file, then command-line
// overrides in order. Every value remembers where it came from, so `config --print` can show
// it and errors can point at it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/schema.hpp"

namespace yeto::config {

enum class Origin { default_value, file, flag };

struct Entry {
  const KeyDef* def = nullptr;
  Value value;
  Origin origin = Origin::default_value;
  std::string where;                // "run.toml:3:7", "--lora-r", "--set", "" for defaults
  std::filesystem::path base_dir;   // directory relative paths of this value resolve from
};

// One command-line assignment: `--set key=value` or a mapped long flag.
struct Override {
  std::string key;
  std::string value;
  std::string source;  // the flag as typed, for messages: "--lora-r", "--set"
};

class Config {
 public:
  // Defaults only.
  Config();

  // Loads `file` (if given) and applies `overrides`. Throws yeto::UsageError listing every
  // problem found (unknown/renamed keys, type and range errors), each with its location, or
  // yeto::Error (not_found) when the file does not exist.
  static Config resolve(const std::optional<std::filesystem::path>& file,
                        const std::vector<Override>& overrides);

  bool get_bool(const std::string& key) const;
  std::int64_t get_int(const std::string& key) const;
  double get_number(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;  // string, path, choice
  const std::vector<std::string>& get_list(const std::string& key) const;
  bool is_auto(const std::string& key) const;  // integer_or_auto holding "auto"
  // A path key resolved against its base directory; empty stays empty.
  std::filesystem::path get_path(const std::string& key) const;

  const Entry& entry(const std::string& key) const;
  const std::vector<Entry>& entries() const { return entries_; }
  const std::optional<std::filesystem::path>& file() const { return file_; }

  // TOML text of every value, one section per schema section; with origins as comments.
  std::string to_toml(bool with_origins) const;
  nlohmann::json to_json() const;  // {key: {value, origin, where}}
  // SHA-256 of the canonical TOML (values only): what provenance records.
  std::string hash() const;

 private:
  std::vector<Entry> entries_;
  std::optional<std::filesystem::path> file_;
};

std::string origin_name(Origin o);

}  // namespace yeto::config
