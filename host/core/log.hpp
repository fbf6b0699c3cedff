// Process-wide logging through spdlog: a console sink (stderr, coloured on a terminal) and
// an optional rotating file sink, each with its own level.
#pragma once

#include <spdlog/spdlog.h>

#include <cstddef>
#include <filesystem>
#include <string>

namespace yeto::log {

struct Options {
  std::string console_level = "info";  // trace|debug|info|warn|error|critical|off
  std::string file_level = "debug";
  std::filesystem::path file;          // empty: no file sink
  std::size_t max_file_bytes = 16u << 20;
  std::size_t max_files = 3;
};

// Installs the default logger. Safe to call again (e.g. once the run config is known).
void setup(const Options& options);

// Parses a level name; throws yeto::UsageError naming `what` and the accepted names.
spdlog::level::level_enum parse_level(const std::string& name, const std::string& what);

}  // namespace yeto::log
