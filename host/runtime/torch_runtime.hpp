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

// The GEMM kernels of the BLAS LibTorch's float32 matmuls run on. OpenBLAS built with
// DYNAMIC_ARCH (Debian's) picks them from the CPU's model number at load time, and a CPU newer
// than the library falls back to its oldest x86-64 kernels: OpenBLAS 0.3.21 does not know Sapphire
// or Emerald Rapids and runs them on "Prescott" (SSE3) kernels, ~2.5x slower than the AVX-512
// ones the CPU has. select_blas_kernels() re-runs OpenBLAS's own selection with
// OPENBLAS_CORETYPE set from the CPU's instruction set (AVX-512 with BF16: Cooperlake, AVX-512:
// SkylakeX, AVX2+FMA: Haswell) when the library's choice is an older generic one. It leaves the
// library alone when OPENBLAS_CORETYPE is already set (the user's choice), when the BLAS is not a
// DYNAMIC_ARCH OpenBLAS, and when the library's pick is already as good. Call it before any
// tensor work (yeto-host does so first thing; configure_threads() calls it too); it is idempotent.
struct BlasKernels {
  std::string config;    // openblas_get_config(), empty when the BLAS is not OpenBLAS
  std::string detected;  // the kernels OpenBLAS picked by itself
  std::string active;    // the kernels in use now
  bool changed = false;  // select_blas_kernels() replaced `detected` by `active`
};
BlasKernels select_blas_kernels();

// The kernels in use now, as select_blas_kernels() left them (without changing anything).
BlasKernels blas_kernels();

// The LibTorch version this process runs with, e.g. "1.13.1" (from <torch/version.h>).
std::string torch_version();

}  // namespace yeto::runtime
