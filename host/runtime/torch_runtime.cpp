#include "runtime/torch_runtime.hpp"

#include <sched.h>

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <thread>

namespace yeto::runtime {

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

int configure_threads(int requested) {
  const int n = requested > 0 ? requested : available_cpus();
  if (at::get_num_threads() != n) at::set_num_threads(n);
  const int actual = at::get_num_threads();
  spdlog::debug("LibTorch intra-op threads: {} (requested {}, {} CPUs available)", actual, requested,
                available_cpus());
  return actual;
}

std::string torch_version() { return TORCH_VERSION; }

}  // namespace yeto::runtime
