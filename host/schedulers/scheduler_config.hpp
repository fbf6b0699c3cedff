// Reading a Diffusers scheduler_config.json. Torch-free.
//
// Diffusers writes these files with Python's json module, which spells non-finite floats as
// bare `Infinity`, `-Infinity` and `NaN` (e.g. DPMSolverMultistepScheduler's
// "lambda_min_clipped": -Infinity). Those are not JSON; yeto::parse_python_json() accepts them.
// Like Diffusers' from_config, a scheduler reads the keys it knows and ignores the others
// (a PixArt repository's DPMSolverMultistepScheduler config loads into DDPMScheduler).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::schedulers {

// Reads and parses a scheduler_config.json (ExitCode::not_found when missing).
nlohmann::json read_scheduler_config(const std::filesystem::path& path);

// Typed access to a parsed config with Diffusers' defaults. A key that is present with the
// wrong type is an error naming the key; null counts as absent (Diffusers' None).
class ConfigView {
 public:
  ConfigView(const nlohmann::json& config, std::string label);

  double number(const std::string& key, double fallback) const;
  std::optional<double> opt_number(const std::string& key) const;
  std::int64_t integer(const std::string& key, std::int64_t fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::optional<std::string> opt_string(const std::string& key) const;
  std::optional<std::vector<double>> numbers(const std::string& key) const;
  std::vector<std::int64_t> integers(const std::string& key) const;  // [] when absent
  // Throws when `value` is not one of `allowed`, naming the key and the allowed values.
  void require_one_of(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json* find(const std::string& key) const;
  const nlohmann::json& config_;
  std::string label_;
};

}  // namespace yeto::schedulers
