// yeto-host: the Yeto plugin host. See `yeto-host --help`.
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "io/component_registry.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  yeto::app::register_builtin_components(yeto::io::ComponentRegistry::global());
  return yeto::app::run_main(yeto::app::build_registry(), args);
}
