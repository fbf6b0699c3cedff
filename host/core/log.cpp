#include "core/log.hpp"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <vector>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::log {

spdlog::level::level_enum parse_level(const std::string& name, const std::string& what) {
  static const std::vector<std::string> names = {"trace", "debug", "info", "warn",
                                                 "error", "critical", "off"};
  for (std::size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<spdlog::level::level_enum>(i);
  if (name == "warning") return spdlog::level::warn;
  throw UsageError(what + ": unknown log level '" + name + "' (accepted: " + join(names, ", ") +
                   ")" + did_you_mean(name, names));
}

void setup(const Options& options) {
  const auto console_level = parse_level(options.console_level, "console log level");
  const auto file_level = parse_level(options.file_level, "file log level");

  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(console_level);
  console->set_pattern("%^[%H:%M:%S.%e] [%l]%$ %v");
  sinks.push_back(console);

  auto level = console_level;
  if (!options.file.empty()) {
    std::error_code ec;
    if (options.file.has_parent_path())
      std::filesystem::create_directories(options.file.parent_path(), ec);
    try {
      auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          options.file.string(), options.max_file_bytes, options.max_files);
      file->set_level(file_level);
      file->set_pattern("[%Y-%m-%dT%H:%M:%S.%f%z] [%P:%t] [%l] %v");
      sinks.push_back(file);
      level = std::min(level, file_level);
    } catch (const spdlog::spdlog_ex& e) {
      throw Error("cannot open log file '" + options.file.string() + "': " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("yeto", sinks.begin(), sinks.end());
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace yeto::log
