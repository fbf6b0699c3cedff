#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include "runtime/torch_runtime.hpp"

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
