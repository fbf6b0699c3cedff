// Typed reads of Diffusers / transformers config.json values with errors that name the file
// and the key. Header-only and torch-free; used by every model config parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace yeto::models::cfg {

[[noreturn]] inline void bad(const std::string& where, const std::string& key, const std::string& what) {
  throw Error(where + ": key '" + key + "' " + what, ExitCode::bad_input);
}

inline bool present(const nlohmann::json& j, const std::string& key) {
  return j.is_object() && j.contains(key) && !j.at(key).is_null();
}

inline std::int64_t get_int(const nlohmann::json& j, const std::string& key, std::int64_t def,
                            const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_number_integer()) bad(where, key, "must be an integer (got " + v.dump() + ")");
  return v.get<std::int64_t>();
}

inline double get_double(const nlohmann::json& j, const std::string& key, double def, const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_number()) bad(where, key, "must be a number (got " + v.dump() + ")");
  return v.get<double>();
}

inline std::optional<double> get_opt_double(const nlohmann::json& j, const std::string& key,
                                            const std::string& where) {
  if (!present(j, key)) return std::nullopt;
  return get_double(j, key, 0.0, where);
}

inline bool get_bool(const nlohmann::json& j, const std::string& key, bool def, const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_boolean()) bad(where, key, "must be true or false (got " + v.dump() + ")");
  return v.get<bool>();
}

inline std::string get_string(const nlohmann::json& j, const std::string& key, const std::string& def,
                              const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_string()) bad(where, key, "must be a string (got " + v.dump() + ")");
  return v.get<std::string>();
}

inline std::vector<std::int64_t> get_int_list(const nlohmann::json& j, const std::string& key,
                                              const std::vector<std::int64_t>& def, const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_array()) bad(where, key, "must be a list of integers (got " + v.dump() + ")");
  std::vector<std::int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer()) bad(where, key, "must be a list of integers (got " + v.dump() + ")");
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

inline std::vector<double> get_double_list(const nlohmann::json& j, const std::string& key,
                                           const std::string& where) {
  if (!present(j, key)) return {};
  const auto& v = j.at(key);
  if (!v.is_array()) bad(where, key, "must be a list of numbers (got " + v.dump() + ")");
  std::vector<double> out;
  for (const auto& e : v) {
    if (!e.is_number()) bad(where, key, "must be a list of numbers (got " + v.dump() + ")");
    out.push_back(e.get<double>());
  }
  return out;
}

inline std::vector<std::string> get_string_list(const nlohmann::json& j, const std::string& key,
                                                const std::vector<std::string>& def, const std::string& where) {
  if (!present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_array()) bad(where, key, "must be a list of strings (got " + v.dump() + ")");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) bad(where, key, "must be a list of strings (got " + v.dump() + ")");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace yeto::models::cfg
