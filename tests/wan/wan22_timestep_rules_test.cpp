// Wan 2.2 and the two UniPC flow-sigma timestep rules through yeto-host: check-parity reproduces
// both recordings of wan22-tiny-reference (the primary, Diffusers v0.40.0, with the v0.37 rule;
// the v0.36.0 alternative with the v0.33 rule), and `sample` follows model.scheduler_timesteps.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepos = fs::path(YETO_TEST_FIXTURES) / "repos";

nlohmann::json read_case(const fs::path& dir) {
  std::ifstream in(dir / "case.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(Wan22TimestepRules, CheckParityReproducesBothRecordings) {
  const fs::path dir = kRepos / "wan22-tiny-reference";
  nlohmann::json cases;
  ASSERT_NO_FATAL_FAILURE(yeto::test::run_check_parity({dir}, &cases));
  ASSERT_EQ(cases.size(), 1u);
  const auto& c = cases[0];
  EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
  const auto info = read_case(dir);
  const auto& alt = info.at("alternative_recordings").at("v0.36.0");
  ASSERT_EQ(c.at("comparisons").size(), info.at("compare").size() + alt.at("compare").size());

  // Each recording: every comparison passes, its timesteps are its own release's table.
  std::map<std::string, std::size_t> count;
  std::map<std::string, double> worst;  // max_abs / atol
  for (const auto& cmp : c.at("comparisons")) {
    EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
    const std::string note = cmp.at("note").get<std::string>();
    const std::string which = note.rfind("recording primary (expected.safetensors, Diffusers 0.40.0)", 0) == 0 ? "primary"
                              : note.rfind("recording v0.36.0 (expected-diffusers-v0.36.0.safetensors, Diffusers 0.36.0)",
                                           0) == 0
                                  ? "v0.36.0"
                                  : "";
    ASSERT_FALSE(which.empty()) << "note names no recording: " << cmp.dump();
    ++count[which];
    if (cmp.at("atol").get<double>() > 0)
      worst[which] = std::max(worst[which], cmp.at("max_abs").get<double>() / cmp.at("atol").get<double>());
    if (cmp.at("name") == "timesteps" || cmp.at("name") == "step.1.timestep" || cmp.at("name") == "step.2.denoiser") {
      EXPECT_EQ(cmp.at("max_abs").get<double>(), 0.0) << cmp.dump();
    }
  }
  EXPECT_EQ(count["primary"], info.at("compare").size());
  EXPECT_EQ(count["v0.36.0"], alt.at("compare").size());
  std::printf("  wan22-tiny-reference: primary (v0.40.0) %zu comparisons, worst %.3g of atol; "
              "v0.36.0 %zu comparisons, worst %.3g of atol\n",
              count["primary"], worst["primary"], count["v0.36.0"], worst["v0.36.0"]);
}

TEST(Wan22TimestepRules, SampleFollowsTheConfiguredRule) {
  yeto::test::TempDir tmp;
  auto sample = [&](const std::string& out, const std::vector<std::string>& extra, int expect_rc = 0) {
    std::vector<std::string> args = {"sample", "--model", (kRepos / "wan22-tiny").string(), "--diffusion-adapter", "wan",
                                     "--prompt", "a boat", "--seed", "5", "--steps", "4", "--guidance", "4.0",
                                     "--height", "32", "--width", "32", "--num-frames", "1",
                                     "--max-sequence-length", "16", "--output", (tmp / out).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = yeto::test::run_host(args);
    EXPECT_EQ(r.exit_code, expect_rc) << r.all();
    return r;
  };
  sample("default.png", {});
  sample("v033.png", {"--set", "model.scheduler_timesteps=diffusers-0.33"});
  sample("v037.png", {"--set", "model.scheduler_timesteps=diffusers-0.37"});
  const auto base = yeto::test::read_text(tmp / "default.png");
  EXPECT_EQ(yeto::test::read_text(tmp / "v033.png"), base);  // the default is the v0.33 rule
  EXPECT_NE(yeto::test::read_text(tmp / "v037.png"), base);  // 999, 900, 750, 500: another image

  const auto bad = sample("bad.png", {"--set", "model.scheduler_timesteps=0.37"}, 2);
  EXPECT_NE(bad.all().find("model.scheduler_timesteps"), std::string::npos) << bad.all();
  EXPECT_FALSE(fs::exists(tmp / "bad.png"));
}
