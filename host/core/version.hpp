// Build identity of this yeto-host, recorded in provenance and printed by `yeto-host version`.
#pragma once

#include <string>

namespace yeto {

struct BuildInfo {
  std::string version;        // project version, e.g. "0.1.0"
  std::string git_commit;     // commit the build was configured from, or "unknown"
  std::string build_type;     // Release, Debug, ...
  std::string compiler;       // "GNU 12.2.0"
  std::string torch_version;  // LibTorch the build was configured against
  bool cuda = false;          // built with CUDA support
};

const BuildInfo& build_info();

}  // namespace yeto
