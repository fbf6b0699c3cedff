#include "app/command.hpp"

#include <spdlog/spdlog.h>

#include <iostream>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"

namespace yeto::app {

void Registry::add(Command c) {
  if (find(c.name)) throw Error("internal: command '" + c.name + "' registered twice");
  commands_.push_back(std::move(c));
}

const Command* Registry::find(const std::string& name) const {
  for (const auto& c : commands_)
    if (c.name == name) return &c;
  return nullptr;
}

const std::vector<OptionSpec>& universal_options() {
  static const std::vector<OptionSpec> o = {
      {"help", "", "Show help for the command and exit.", false, 'h'},
      {"log-level", "LEVEL", "Console log level: trace, debug, info, warn, error, critical, off.", false, 0},
      {"verbose", "", "Shorthand for --log-level debug.", false, 'v'},
      {"quiet", "", "Shorthand for --log-level warn.", false, 'q'},
  };
  return o;
}

namespace {

const std::vector<OptionSpec>& run_config_options() {
  static const std::vector<OptionSpec> o = {
      {"config", "FILE", "Run configuration (TOML).", false, 'c'},
      {"set", "KEY=VALUE", "Override any configuration key, e.g. --set lora.r=8 (repeatable).", true, 0},
  };
  return o;
}

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name, char short_name) {
  for (const auto& s : specs)
    if ((!name.empty() && s.name == name) || (short_name && s.short_name == short_name)) return &s;
  return nullptr;
}

std::vector<std::string> known_option_names(const Command* cmd) {
  std::vector<std::string> names;
  for (const auto& s : universal_options()) names.push_back("--" + s.name);
  if (!cmd || cmd->run_config) {
    for (const auto& s : run_config_options()) names.push_back("--" + s.name);
    for (const auto& f : config::all_flags()) names.push_back(f);
  }
  if (cmd)
    for (const auto& s : cmd->options) names.push_back("--" + s.name);
  return names;
}

// Parses the options of one command (or the leading global ones when cmd is null and
// stop_at_positional is set). Returns the index of the first token not consumed.
std::size_t parse_options(const Registry& registry, const Command* cmd, const std::vector<std::string>& argv,
                          std::size_t i, bool stop_at_positional, ParsedArgs& out) {
  const std::string where = cmd ? "'" + cmd->name + "'" : "yeto-host";
  const bool takes_run_config = !cmd || cmd->run_config;
  bool only_positionals = false;
  while (i < argv.size()) {
    const std::string tok = argv[i];
    if (only_positionals || tok.empty() || tok[0] != '-' || tok == "-") {
      if (stop_at_positional) return i;
      out.positionals.push_back(tok);
      ++i;
      continue;
    }
    if (tok == "--") {
      only_positionals = true;
      ++i;
      continue;
    }
    std::string name;
    char short_name = 0;
    std::optional<std::string> inline_value;
    if (tok.rfind("--", 0) == 0) {
      name = tok.substr(2);
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
    } else {
      if (tok.size() != 2)
        throw UsageError(where + ": unknown option '" + tok + "' (short options take one letter; long ones start with --)");
      short_name = tok[1];
    }
    const std::string shown = short_name ? std::string("-") + short_name : "--" + name;
    auto take_value = [&](const std::string& metavar) -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argv.size()) throw UsageError(where + ": option " + shown + " needs a value (" + metavar + ")");
      return argv[++i];
    };

    // 1. The command's own options and the universal ones.
    const OptionSpec* spec = cmd ? find_spec(cmd->options, name, short_name) : nullptr;
    if (!spec) spec = find_spec(universal_options(), name, short_name);
    if (!spec && takes_run_config) spec = find_spec(run_config_options(), name, short_name);
    if (spec) {
      std::string value;
      if (!spec->metavar.empty()) value = take_value(spec->metavar);
      else if (inline_value) throw UsageError(where + ": option --" + spec->name + " takes no value");
      const std::string& n = spec->name;
      if (n == "help") out.help = true;
      else if (n == "log-level") out.overrides.push_back({"log.level", value, shown});
      else if (n == "verbose") out.overrides.push_back({"log.level", "debug", shown});
      else if (n == "quiet") out.overrides.push_back({"log.level", "warn", shown});
      else if (n == "config") {
        if (out.config_file) throw UsageError(where + ": --config given twice");
        out.config_file = value;
      } else if (n == "set") {
        const auto eq = value.find('=');
        if (eq == std::string::npos || eq == 0)
          throw UsageError(where + ": --set expects KEY=VALUE (e.g. --set lora.r=8), got '" + value + "'");
        out.overrides.push_back({trim(value.substr(0, eq)), value.substr(eq + 1), "--set " + trim(value.substr(0, eq))});
      } else {
        auto& slot = out.options[n];
        if (!slot.empty() && !spec->repeatable) throw UsageError(where + ": option --" + n + " given twice");
        slot.push_back(value);
      }
      ++i;
      continue;
    }

    // 2. Long flags mapped onto run-config keys. Boolean keys are switches:
    //    --bucket-by-shape, --bucket-by-shape=false, --no-bucket-by-shape.
    if (takes_run_config && !name.empty()) {
      const config::KeyDef* def = config::find_flag(name);
      bool negated = false;
      if (!def && name.rfind("no-", 0) == 0) {
        def = config::find_flag(name.substr(3));
        negated = def && def->type == config::Type::boolean;
        if (!negated) def = nullptr;
      }
      if (def) {
        std::string value;
        if (def->type == config::Type::boolean) {
          if (negated && inline_value) throw UsageError(where + ": " + shown + " takes no value");
          value = negated ? "false" : inline_value.value_or("true");
        } else {
          value = take_value("a value for " + def->key);
        }
        out.overrides.push_back({def->key, value, shown});
        ++i;
        continue;
      }
    }

    std::string msg = where + ": unknown option '" + shown + "'";
    const std::string near = closest_match(shown, known_option_names(cmd));
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    else if (!takes_run_config && config::find_flag(name))
      msg += " (" + where + " takes no run configuration)";
    msg += " (see 'yeto-host " + (cmd ? cmd->name + " " : std::string()) + "--help')";
    (void)registry;
    throw UsageError(msg);
  }
  return i;
}

std::string wrap(const std::string& text, std::size_t indent, std::size_t width = 100) {
  std::ostringstream out;
  std::size_t col = indent;
  bool first = true;
  for (const auto& word : split(text, ' ')) {
    if (word.empty()) continue;
    if (!first && col + 1 + word.size() > width) {
      out << "\n" << std::string(indent, ' ');
      col = indent;
    } else if (!first) {
      out << ' ';
      ++col;
    }
    out << word;
    col += word.size();
    first = false;
  }
  return out.str();
}

void print_options(std::ostringstream& out, const std::vector<OptionSpec>& specs) {
  for (const auto& s : specs) {
    std::string left = "  ";
    left += s.short_name ? std::string("-") + s.short_name + ", " : "    ";
    left += "--" + s.name;
    if (!s.metavar.empty()) left += " " + s.metavar;
    if (left.size() < 34) left += std::string(34 - left.size(), ' ');
    else left += "\n" + std::string(34, ' ');
    out << left << wrap(s.help, 34) << "\n";
  }
}

std::string flag_table() {
  std::ostringstream out;
  for (const auto& sec : config::sections()) {
    bool any = false;
    for (const auto& d : config::schema()) {
      if (d.section() != sec.name || d.flag.empty()) continue;
      if (!any) out << "\n  [" << sec.name << "]\n";
      any = true;
      std::string left = "  --" + d.flag;
      if (d.type != config::Type::boolean) left += " VALUE";
      if (left.size() < 34) left += std::string(34 - left.size(), ' ');
      else left += "\n" + std::string(34, ' ');
      out << left << wrap(d.doc + " Key " + d.key + " (" + config::describe_type(d) + ", default " +
                              config::default_text(d) + ").",
                          34)
          << "\n";
    }
  }
  return out.str();
}

}  // namespace

ParsedArgs parse_command_line(const Registry& registry, const std::vector<std::string>& argv) {
  ParsedArgs out;
  // Leading options, before any command name, may be universal or run-config ones.
  std::size_t i = parse_options(registry, nullptr, argv, 0, /*stop_at_positional=*/true, out);
  if (i < argv.size()) {
    const std::string name = argv[i];
    const Command* cmd = registry.find(name);
    if (!cmd) {
      std::vector<std::string> names;
      for (const auto& c : registry.commands()) names.push_back(c.name);
      std::string msg = "unknown command '" + name + "'";
      const std::string near = closest_match(name, names);
      msg += near.empty() ? " (commands: " + join(names, ", ") + ")" : "; did you mean '" + near + "'?";
      throw UsageError(msg);
    }
    out.command = name;
    if (!cmd->run_config && (out.config_file || !out.overrides.empty())) {
      for (const auto& o : out.overrides)
        if (o.key != "log.level")
          throw UsageError("'" + name + "' takes no run configuration, but " + o.source + " was given");
      if (out.config_file) throw UsageError("'" + name + "' takes no run configuration, but --config was given");
    }
    parse_options(registry, cmd, argv, i + 1, false, out);
    if (!out.help) {
      const int n = static_cast<int>(out.positionals.size());
      if (n < cmd->min_positionals)
        throw UsageError("'" + name + "' needs " + cmd->positionals + " (see 'yeto-host " + name + " --help')");
      if (cmd->max_positionals >= 0 && n > cmd->max_positionals)
        throw UsageError("'" + name + "': unexpected argument '" + out.positionals[cmd->max_positionals] +
                         "' (see 'yeto-host " + name + " --help')");
    }
  } else if (out.config_file) {
    out.command = "train";  // `yeto-host --config run.toml` runs the run the file describes
  }
  return out;
}

std::string program_help(const Registry& registry) {
  std::ostringstream out;
  out << "yeto-host: fine-tunes diffusion models with LoRA across scattered, preemptible GPU islands.\n\n"
      << "Usage:\n"
      << "  yeto-host --config run.toml [FLAGS]      run the run the file describes (train)\n"
      << "  yeto-host COMMAND [OPTIONS]              run one command\n"
      << "  yeto-host COMMAND --help                 help for one command\n\n"
      << "Commands:\n";
  for (const auto& c : registry.commands()) {
    std::string left = "  " + c.name;
    if (left.size() < 18) left += std::string(18 - left.size(), ' ');
    out << left << wrap(c.summary, 18) << "\n";
  }
  out << "\nOptions of every command:\n";
  print_options(out, universal_options());
  out << "\nRun-configuration options (commands that take a run config):\n";
  print_options(out, run_config_options());
  out << "\nLong flags, each setting one configuration key (later flags win over the file):"
      << flag_table()
      << "\nEvery other key is set with --set KEY=VALUE; `yeto-host config --keys` lists them all.\n"
      << "Exit codes: 0 ok, 1 failure, 2 usage or configuration error, 3 not in this build,\n"
      << "20-29 plugin refused, 30 bad input, 31 not found, 40 parity failure.\n";
  return out.str();
}

std::string command_help(const Command& c) {
  std::ostringstream out;
  out << "Usage: yeto-host " << c.name;
  if (c.run_config) out << " [--config FILE] [FLAGS]";
  if (!c.options.empty()) out << " [OPTIONS]";
  if (!c.positionals.empty()) out << " " << c.positionals;
  out << "\n\n" << wrap(c.summary, 0) << "\n";
  if (!c.description.empty()) {
    for (const auto& para : split(c.description, '\n')) out << "\n" << wrap(para, 0);
    out << "\n";
  }
  if (!c.options.empty()) {
    out << "\nOptions:\n";
    print_options(out, c.options);
  }
  if (c.run_config) {
    out << "\nRun configuration:\n";
    print_options(out, run_config_options());
    out << "  (and every long flag listed by 'yeto-host --help', each setting one key)\n";
  }
  out << "\nCommon options:\n";
  print_options(out, universal_options());
  return out.str();
}

CommandContext::CommandContext(const Command& command, ParsedArgs args)
    : command_(command), args_(std::move(args)) {}

bool CommandContext::has(const std::string& option) const { return args_.options.count(option) > 0; }

std::string CommandContext::value(const std::string& option, const std::string& fallback) const {
  auto it = args_.options.find(option);
  return it == args_.options.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> CommandContext::values(const std::string& option) const {
  auto it = args_.options.find(option);
  return it == args_.options.end() ? std::vector<std::string>{} : it->second;
}

const config::Config& CommandContext::config() {
  if (!config_) {
    config_ = config::Config::resolve(args_.config_file, args_.overrides);
    log::Options lo;
    lo.console_level = config_->get_string("log.level");
    lo.file_level = config_->get_string("log.file_level");
    lo.file = config_->get_path("log.file");
    lo.max_file_bytes = static_cast<std::size_t>(config_->get_int("log.max_file_mb")) << 20;
    lo.max_files = static_cast<std::size_t>(config_->get_int("log.max_files"));
    log::setup(lo);
    spdlog::debug("run configuration resolved{} (sha256:{})",
                  config_->file() ? " from " + config_->file()->string() : std::string(), config_->hash());
  }
  return *config_;
}

int run_main(const Registry& registry, const std::vector<std::string>& argv) {
  try {
    log::setup(log::Options{});
    std::vector<std::string> args_in = argv;
    if (!args_in.empty() && args_in[0] == "--version") args_in[0] = "version";
    ParsedArgs args = parse_command_line(registry, args_in);
    if (args.command.empty()) {
      if (args.help) {
        std::cout << program_help(registry);
        return 0;
      }
      std::cerr << program_help(registry) << "\nerror: no command given\n";
      return static_cast<int>(ExitCode::usage);
    }
    const Command* cmd = registry.find(args.command);
    if (args.help) {
      std::cout << command_help(*cmd);
      return 0;
    }
    CommandContext ctx(*cmd, std::move(args));
    return cmd->run(ctx);
  } catch (const UsageError& e) {
    std::cerr << "yeto-host: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    spdlog::default_logger()->flush();
    return e.exit_code();
  } catch (const std::exception& e) {
    spdlog::critical("unexpected error: {}", e.what());
    spdlog::default_logger()->flush();
    return static_cast<int>(ExitCode::failure);
  }
}

}  // namespace yeto::app
