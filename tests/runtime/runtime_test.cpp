#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdlib>
#include <iostream>

#include "runtime/torch_runtime.hpp"

// The BLAS kernel choice (runtime::select_blas_kernels): a float32 GEMM computed before the
// switch and the same GEMM after it both match a float64 reference (switching kernels in a
// running process leaves a working BLAS), the choice is made once, and on an OpenBLAS on an
// AVX-512 CPU the kernels in use are AVX-512 ones whatever the library picked by itself (0.3.21
// picks its SSE3 "Prescott" kernels on CPUs newer than itself).
// First in this file: configure_threads() makes the choice too.
TEST(TorchRuntime, BlasKernelsFitTheCpu) {
  const auto a = at::randn({67, 131}, at::kDouble);
  const auto b = at::randn({131, 45}, at::kDouble);
  const auto reference = at::mm(a, b);
  const auto before = at::mm(a.to(at::kFloat), b.to(at::kFloat));
  const auto chosen = yeto::runtime::select_blas_kernels();
  const auto after = at::mm(a.to(at::kFloat), b.to(at::kFloat));
  EXPECT_TRUE(at::allclose(before.to(at::kDouble), reference, 1e-4, 1e-4));
  EXPECT_TRUE(at::allclose(after.to(at::kDouble), reference, 1e-4, 1e-4));
  const auto again = yeto::runtime::select_blas_kernels();
  EXPECT_EQ(again.active, chosen.active);
  EXPECT_EQ(yeto::runtime::blas_kernels().active, chosen.active);
  if (chosen.config.empty()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  std::cout << "OpenBLAS picked " << chosen.detected << ", in use: " << chosen.active << "\n";
  EXPECT_FALSE(chosen.active.empty());
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && std::getenv("OPENBLAS_CORETYPE") == nullptr &&
      chosen.config.find("DYNAMIC_ARCH") != std::string::npos) {
    EXPECT_TRUE(chosen.active == "SkylakeX" || chosen.active == "Cooperlake" || chosen.active == "SapphireRapids")
        << chosen.active << " (the library picked " << chosen.detected << ")";
  }
#endif
}

TEST(TorchRuntime, ConfiguresRequestedThreads) {
  EXPECT_EQ(yeto::runtime::configure_threads(1), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(yeto::runtime::configure_threads(2), 2);
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(TorchRuntime, ZeroMeansEveryAvailableCpu) {
  const int cpus = yeto::runtime::available_cpus();
  ASSERT_GE(cpus, 1);
  EXPECT_EQ(yeto::runtime::configure_threads(0), cpus);
}

TEST(TorchRuntime, ReportsVersion) {
  const std::string v = yeto::runtime::torch_version();
  EXPECT_FALSE(v.empty());
  EXPECT_EQ(v.find('.') != std::string::npos, true) << v;
}

