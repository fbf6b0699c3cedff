// An independent reader of our GLB files for tests: Python's struct and json modules walk the
// GLB layout (header, JSON chunk, BIN chunk, the mesh's POSITION and indices accessors).
#pragma once

#include <optional>
#include <string>

#include "support/process.hpp"

namespace yeto::test {

// Runs the reader on `path`. Exit 0 when the layout holds (and, with `bound`, every coordinate
// is within +-bound); `out` is then "<vertices> <triangles>\n".
ProcessResult python_glb_counts(const std::string& path, std::optional<double> bound = std::nullopt);

}  // namespace yeto::test
