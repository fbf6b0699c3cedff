// Where the io suites find their committed fixtures (tests/fixtures/...).
#pragma once

#include <filesystem>

namespace yeto::test {

// YETO_TEST_FIXTURES is expanded relative to the directory that calls yeto_test(), so the io
// suites build the path from the source root instead.
inline std::filesystem::path io_fixtures() { return std::filesystem::path(YETO_SOURCE_DIR) / "tests/fixtures"; }

}  // namespace yeto::test
