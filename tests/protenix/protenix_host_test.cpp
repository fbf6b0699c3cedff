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
  const fs::path parity = fs::path(YETO_TEST_FIXTURES) / "parity";
  const std::vector<std::string> names = {"protenix-diffusion-module", "protenix-diffusion-module-multitrunk",
                                          "protenix-diffusion-loss", "protenix-edm-schedule"};
  std::vector<fs::path> dirs;
  for (const auto& n : names) dirs.push_back(parity / n);
  nlohmann::json cases;
  ASSERT_NO_FATAL_FAILURE(yeto::test::run_check_parity(dirs, &cases));
  ASSERT_EQ(cases.size(), names.size());
  for (const auto& c : cases) {
    const auto name = c.at("case").get<std::string>();
    EXPECT_TRUE(c.at("supported").get<bool>()) << c.dump(1);
    EXPECT_TRUE(c.at("pass").get<bool>()) << name;
    const auto case_json = nlohmann::json::parse(yeto::test::read_text(parity / name / "case.json"));
    std::set<std::string> compared;
    double worst = 0.0;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << name << ": " << cmp.dump();
      compared.insert(cmp.at("name").get<std::string>());
      const double atol = cmp.at("atol").get<double>(), err = cmp.at("max_abs").get<double>();
      if (atol > 0) worst = std::max(worst, err / atol);
    }
    for (const auto& [key, _] : case_json.at("compare").items())
      EXPECT_TRUE(compared.count(key)) << name << ": '" << key << "' was not compared";
    std::printf("  %s: %zu outputs compared, worst max_abs / atol %.3g\n", name.c_str(), compared.size(), worst);
  }
}
