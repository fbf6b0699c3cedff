// Wall-clock time as the host records it. Torch-free.
#pragma once

#include <string>

namespace yeto {

// The current UTC time in ISO 8601 to the second: "2026-12-06T13:40:00Z".
std::string utc_timestamp();

}  // namespace yeto
