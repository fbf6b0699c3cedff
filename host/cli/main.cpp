// yeto-host: the Yeto plugin host. See `yeto-host --help`.
#include <string>
#include <vector>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return yeto::cli::run_main(yeto::cli::build_registry(), args);
}
