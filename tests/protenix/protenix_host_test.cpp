// The protenix plugin through yeto-host: built, signed and verifiable, and the four protenix-*
// cases through check-parity (the DiffusionModule's forward, intermediates and gradients on one and
// two atom trunks, the diffusion loss with its gradients, the EDM schedule), each key compared.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/process.hpp"

namespace fs = std::filesystem;

TEST(ProtenixHost, PluginIsSignedAndEveryProtenixCasePasses) {
  nlohmann::json manifest;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("protenix", &manifest));
  EXPECT_EQ(manifest.at("aliases"), nlohmann::json::array({"protenix", "protenix-v2"}));
  yeto::test::expect_parity_cases(fs::path(YETO_TEST_FIXTURES) / "parity",
                                  {"protenix-diffusion-module", "protenix-diffusion-module-multitrunk",
                                   "protenix-diffusion-loss", "protenix-edm-schedule"});
}
