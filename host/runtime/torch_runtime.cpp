#include "runtime/torch_runtime.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
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

namespace {

using CoreNameFn = char* (*)();
using VoidFn = void (*)();

template <typename F>
F blas_symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

std::string call_text(const char* symbol) {
  const auto f = blas_symbol<CoreNameFn>(symbol);
  const char* s = f ? f() : nullptr;
  return s ? std::string(s) : std::string();
}

// OpenBLAS's x86-64 Intel kernel families, oldest first. A name not listed (AMD Zen, ARM, ...)
// is never replaced: only OpenBLAS's generic fall-backs for an unknown Intel model are.
int core_rank(const std::string& name) {
  static const char* const order[] = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Core2", "Penryn",
                                      "Dunnington", "Nehalem", "Atom", "Sandybridge", "Haswell", "SkylakeX",
                                      "Cooperlake", "SapphireRapids"};
  for (int i = 0; i < static_cast<int>(std::size(order)); ++i)
    if (name == order[i]) return i;
  return -1;
}

// The best kernel family OpenBLAS 0.3.x has for this CPU's instruction set.
std::string wanted_core() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return {};
}

std::mutex blas_mutex;
BlasKernels blas_state;
bool blas_selected = false;

BlasKernels read_blas() {
  BlasKernels k;
  k.config = call_text("openblas_get_config");
  k.detected = k.active = call_text("openblas_get_corename");
  return k;
}

}  // namespace

BlasKernels select_blas_kernels() {
  std::lock_guard<std::mutex> lock(blas_mutex);
  if (blas_selected) return blas_state;
  blas_selected = true;
  blas_state = read_blas();
  if (blas_state.config.empty() || std::getenv("OPENBLAS_CORETYPE") != nullptr) return blas_state;
  const auto quit = blas_symbol<VoidFn>("gotoblas_dynamic_quit");
  const auto init = blas_symbol<VoidFn>("gotoblas_dynamic_init");
  if (!quit || !init) return blas_state;  // not a DYNAMIC_ARCH build: its kernels are fixed
  const std::string want = wanted_core();
  const int have_rank = core_rank(blas_state.detected);
  if (want.empty() || have_rank < 0 || have_rank >= core_rank(want)) return blas_state;
  // OpenBLAS reads OPENBLAS_CORETYPE in gotoblas_dynamic_init(); set it only for that call so
  // child processes make their own choice.
  setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  blas_state.active = call_text("openblas_get_corename");
  blas_state.changed = blas_state.active != blas_state.detected;
  return blas_state;
}

BlasKernels blas_kernels() {
  std::lock_guard<std::mutex> lock(blas_mutex);
  if (blas_selected) return blas_state;
  return read_blas();
}

int configure_threads(int requested) {
  const auto blas = select_blas_kernels();
  if (blas.changed)
    spdlog::debug("BLAS kernels: {} (OpenBLAS picked {} for this CPU; {})", blas.active, blas.detected, blas.config);
  const int n = requested > 0 ? requested : available_cpus();
  if (at::get_num_threads() != n) at::set_num_threads(n);
  const int actual = at::get_num_threads();
  spdlog::debug("LibTorch intra-op threads: {} (requested {}, {} CPUs available)", actual, requested,
                available_cpus());
  return actual;
}

std::string torch_version() { return TORCH_VERSION; }

}  // namespace yeto::runtime
