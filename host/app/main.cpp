// yeto-host: the Yeto plugin host. See `yeto-host --help`.
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "io/component_registry.hpp"
#include "runtime/torch_runtime.hpp"

int main(int argc, char** argv) {
  // Before any tensor work: the BLAS GEMM kernels this CPU supports (runtime/torch_runtime.hpp).
  (void)yeto::runtime::select_blas_kernels();
  const std::vector<std::string> args(argv + 1, argv + argc);
  yeto::app::register_builtin_components(yeto::io::ComponentRegistry::global());
  return yeto::app::run_main(yeto::app::build_registry(), args);
}
