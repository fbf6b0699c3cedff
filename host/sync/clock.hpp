// Monotonic time for the syncer and its client: timeouts, liveness and backoff are measured
// on the steady clock in seconds (as the [sync] timeout keys are given).
#pragma once

#include <chrono>

namespace yeto::sync {

inline double steady_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace yeto::sync
