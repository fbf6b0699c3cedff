// Subcommands of yeto-host and the parsed command line they receive.
//
// Each command file of host/app registers its commands into a Registry (see registry.cpp). A command
// declares its own options; commands that take a run configuration also accept --config,
// --set KEY=VALUE and every long flag the schema maps onto a key.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace yeto::app {

struct OptionSpec {
  std::string name;         // long name without dashes: "json"
  std::string metavar;      // empty: a switch that takes no value
  std::string help;
  bool repeatable = false;
  char short_name = 0;
};

class CommandContext;

struct Command {
  std::string name;
  std::string summary;      // one line for the command list
  std::string description;  // paragraphs for `CMD --help`
  std::string positionals;  // usage text of positional arguments, e.g. "PATH..."
  int min_positionals = 0;
  int max_positionals = 0;  // -1: unlimited
  bool run_config = false;  // accepts --config / --set / mapped flags
  std::vector<OptionSpec> options;
  std::function<int(CommandContext&)> run;
};

struct ParsedArgs {
  std::string command;
  bool help = false;
  std::vector<std::string> positionals;
  std::map<std::string, std::vector<std::string>> options;  // own options; switches hold ""
  std::optional<std::filesystem::path> config_file;
  std::vector<config::Override> overrides;
};

class Registry {
 public:
  void add(Command c);
  const Command* find(const std::string& name) const;
  const std::vector<Command>& commands() const { return commands_; }

 private:
  std::vector<Command> commands_;
};

// What a running command sees: its arguments and, resolved on first use, the run config.
class CommandContext {
 public:
  CommandContext(const Command& command, ParsedArgs args);

  const Command& command() const { return command_; }
  const ParsedArgs& args() const { return args_; }
  const std::vector<std::string>& positionals() const { return args_.positionals; }
  bool has(const std::string& option) const;
  std::string value(const std::string& option, const std::string& fallback = "") const;
  std::vector<std::string> values(const std::string& option) const;
  // Resolves defaults < file < flags once, and sets up logging from it.
  const config::Config& config();

 private:
  const Command& command_;
  ParsedArgs args_;
  std::optional<config::Config> config_;
};

// Universal options every command takes.
const std::vector<OptionSpec>& universal_options();

// Parses argv into a command and its arguments. Throws yeto::UsageError with a suggestion.
ParsedArgs parse_command_line(const Registry& registry, const std::vector<std::string>& argv);

std::string program_help(const Registry& registry);
std::string command_help(const Command& command);

// Runs the whole program: parse, dispatch, report errors. Returns the exit code.
int run_main(const Registry& registry, const std::vector<std::string>& argv);

}  // namespace yeto::app
