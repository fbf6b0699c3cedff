#include "schedulers/scheduler_config.hpp"

#include <cmath>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/python_json.hpp"
#include "core/strings.hpp"

namespace yeto::schedulers {
nlohmann::json read_scheduler_config(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path))
    throw Error(path.string() + ": scheduler config not found", ExitCode::not_found);
  return parse_python_json(read_file(path), path.string());
}

ConfigView::ConfigView(const nlohmann::json& config, std::string label) : config_(config), label_(std::move(label)) {}

const nlohmann::json* ConfigView::find(const std::string& key) const {
  if (!config_.is_object()) return nullptr;
  auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return nullptr;
  return &*it;
}

void ConfigView::fail(const std::string& key, const std::string& what) const {
  throw Error(label_ + ": `" + key + "` " + what, ExitCode::bad_input);
}

double ConfigView::number(const std::string& key, double fallback) const {
  auto v = opt_number(key);
  return v ? *v : fallback;
}

std::optional<double> ConfigView::opt_number(const std::string& key) const {
  const nlohmann::json* j = find(key);
  if (!j) return std::nullopt;
  if (!j->is_number()) fail(key, "must be a number, got " + j->dump());
  return j->get<double>();
}

std::int64_t ConfigView::integer(const std::string& key, std::int64_t fallback) const {
  const nlohmann::json* j = find(key);
  if (!j) return fallback;
  if (j->is_number_integer()) return j->get<std::int64_t>();
  if (j->is_number_float()) {
    const double d = j->get<double>();
    if (std::floor(d) == d) return static_cast<std::int64_t>(d);
  }
  fail(key, "must be an integer, got " + j->dump());
}

bool ConfigView::boolean(const std::string& key, bool fallback) const {
  const nlohmann::json* j = find(key);
  if (!j) return fallback;
  if (!j->is_boolean()) fail(key, "must be true or false, got " + j->dump());
  return j->get<bool>();
}

std::string ConfigView::string(const std::string& key, const std::string& fallback) const {
  auto v = opt_string(key);
  return v ? *v : fallback;
}

std::optional<std::string> ConfigView::opt_string(const std::string& key) const {
  const nlohmann::json* j = find(key);
  if (!j) return std::nullopt;
  if (!j->is_string()) fail(key, "must be a string, got " + j->dump());
  return j->get<std::string>();
}

std::optional<std::vector<double>> ConfigView::numbers(const std::string& key) const {
  const nlohmann::json* j = find(key);
  if (!j) return std::nullopt;
  if (!j->is_array()) fail(key, "must be a list of numbers");
  std::vector<double> out;
  for (const auto& x : *j) {
    if (!x.is_number()) fail(key, "must be a list of numbers");
    out.push_back(x.get<double>());
  }
  return out;
}

std::vector<std::int64_t> ConfigView::integers(const std::string& key) const {
  const nlohmann::json* j = find(key);
  if (!j) return {};
  if (!j->is_array()) fail(key, "must be a list of integers");
  std::vector<std::int64_t> out;
  for (const auto& x : *j) {
    if (!x.is_number_integer()) fail(key, "must be a list of integers");
    out.push_back(x.get<std::int64_t>());
  }
  return out;
}

void ConfigView::require_one_of(const std::string& key, const std::string& value,
                                const std::vector<std::string>& allowed) const {
  for (const auto& a : allowed)
    if (a == value) return;
  fail(key, "is '" + value + "'; supported: " + join(allowed, ", ") + did_you_mean(value, allowed));
}

}  // namespace yeto::schedulers
