// Process-wide LibTorch settings. LibTorch starts with a single intra-op thread on many
// machines (it reads OMP_NUM_THREADS or the OpenMP default), so every command that computes
// calls configure_threads() once, before any tensor work.
#pragma once

#include <string>

namespace yeto::runtime {

// CPUs this process may run on (affinity mask, so container/cgroup pinning is respected).
int available_cpus();

// Sets LibTorch's intra-op thread count: `requested` > 0 as given, 0 = available_cpus().
// Returns the count LibTorch reports afterwards.
int configure_threads(int requested);

// The LibTorch version this process runs with, e.g. "1.13.1" (from <torch/version.h>).
std::string torch_version();

}  // namespace yeto::runtime
