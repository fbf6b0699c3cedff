// The hunyuan3d plugin through yeto-host: built, signed and verifiable, and the hy3dshape-recorded
// cases through check-parity: the DiT (eval and train-mode forward, loss, every parameter's
// gradient including the MoE gates' auxiliary-loss part, the aux losses, the flow-matching
// objective), the sampler (tables, the guided loop, the pipeline loop) and the ShapeVAE decode to
// an occupancy grid.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/process.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";

// check-parity over `names`: each case supported, passing, and comparing every key of its compare
// table except the recorded inputs to the loss (loss_target).
void expect_cases_pass(const std::vector<std::string>& names) {
  std::vector<fs::path> dirs;
  for (const auto& n : names) dirs.push_back(kParity / n);
  nlohmann::json cases;
  ASSERT_NO_FATAL_FAILURE(yeto::test::run_check_parity(dirs, &cases));
  ASSERT_EQ(cases.size(), names.size());
  for (const auto& c : cases) {
    const auto name = c.at("case").get<std::string>();
    EXPECT_TRUE(c.at("supported").get<bool>()) << c.dump(1);
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    const auto case_json = nlohmann::json::parse(yeto::test::read_text(kParity / name / "case.json"));
    std::set<std::string> compared;
    double worst = 0.0;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
      compared.insert(cmp.at("name").get<std::string>());
      const double atol = cmp.at("atol").get<double>(), err = cmp.at("max_abs").get<double>();
      if (atol > 0) worst = std::max(worst, err / atol);
    }
    for (const auto& [key, _] : case_json.at("compare").items()) {
      if (key == "loss_target") continue;
      EXPECT_TRUE(compared.count(key)) << name << ": '" << key << "' was not compared";
    }
    std::printf("  %s: %zu outputs compared, worst max_abs / atol %.3g\n", name.c_str(), compared.size(), worst);
  }
}

}  // namespace

TEST(Hunyuan3DHost, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json manifest;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("hunyuan3d", &manifest));
  EXPECT_EQ(manifest.at("families"), nlohmann::json::array({"hunyuan3d"})) << manifest.dump();
  EXPECT_EQ(manifest.at("aliases"), nlohmann::json::array({"hunyuan3d-21"})) << manifest.dump();
}

TEST(Hunyuan3DHost, CheckParityPassesEveryHunyuan3DCase) {
  // The sampler case: hy3dshape's scheduler tables, the pipeline's schedules (the dt = 0 last
  // step), the guided Euler loop and the whole pipeline loop with the tiny DiT. The ShapeVAE
  // case: latents / scale_factor, the decoder transformer and the occupancy logits on the
  // VanillaVolumeDecoder grid (loaded from a state dict that also holds the unused encoder).
  expect_cases_pass({"hunyuan3d-dit", "hunyuan3d-sampler", "hunyuan3d-shapevae-decode"});
}
