// Commands whose machinery is not in this build yet. Each resolves its run configuration
// (so a bad config fails the same way it will later), then says what is missing and exits
// with ExitCode::not_available. An area that implements one removes it from this list and
// registers the real command.
#include "cli/commands.hpp"

namespace yeto::cli {
namespace {

[[maybe_unused]] void planned(Registry& r, const std::string& name, const std::string& summary, const std::string& what,
             bool run_config, const std::string& positionals = "", int max_positionals = 0) {
  Command c;
  c.name = name;
  c.summary = summary;
  c.description = "Not in this build yet: " + what + ".";
  c.run_config = run_config;
  c.positionals = positionals;
  c.max_positionals = max_positionals;
  c.run = not_available(what);
  r.add(std::move(c));
}

}  // namespace

void register_planned_commands([[maybe_unused]] Registry& r) {
}

}  // namespace yeto::cli
