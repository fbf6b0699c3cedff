// UniPC's two flow-sigma timestep rules (Diffusers v0.33.1 - v0.36.0 and v0.37.0 and later):
// the rule names and the Diffusers-version mapping, the 4-step Wan 2.2 tables checked by hand
// against case.json / README of tests/fixtures/repos/wan22-tiny-reference, and both recorded
// WanPipeline runs replayed through the scheduler from their recorded noise predictions.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include "core/error.hpp"
#include "io/tensors.hpp"
#include "schedulers/multistep.hpp"
#include "schedulers/scheduler.hpp"

namespace fs = std::filesystem;
using namespace yeto;
using namespace yeto::schedulers;

namespace {

const fs::path kRepos = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "repos";

std::shared_ptr<Scheduler> wan22_scheduler(TimestepRule rule) {
  auto s = load_scheduler(kRepos / "wan22-tiny" / "scheduler");
  set_timestep_rule(*s, rule);
  return s;
}

std::vector<std::int64_t> ints(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// Runs the recorded noise predictions of `file` through a fresh scheduler under `rule` and
// returns the largest difference from the recorded latents entering steps 1.. and the final ones.
double replay_max_abs(const std::string& file, TimestepRule rule) {
  const auto rec = io::load_safetensors(kRepos / "wan22-tiny-reference" / file);
  auto s = wan22_scheduler(rule);
  s->set_timesteps(4);
  EXPECT_TRUE(at::equal(s->timesteps(), rec.at("timesteps").to(at::kLong))) << file;
  at::Tensor latents = rec.at("step.0.latents");
  double worst = 0.0;
  for (std::int64_t i = 0; i < 4; ++i) {
    const std::string p = "step." + std::to_string(i) + ".";
    latents = s->step(rec.at(p + "noise_pred"), s->timesteps()[i], latents);
    const std::string next = i < 3 ? "step." + std::to_string(i + 1) + ".latents" : "final_latents";
    const double d = (latents - rec.at(next)).abs().max().item<double>();
    EXPECT_LT(d, 1e-5) << file << " " << next;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace

TEST(UniPCTimestepRules, NamesAndDiffusersVersions) {
  EXPECT_EQ(timestep_rule_from_name("diffusers-0.33", "k"), TimestepRule::diffusers_0_33);
  EXPECT_EQ(timestep_rule_from_name("diffusers-0.37", "k"), TimestepRule::diffusers_0_37);
  EXPECT_EQ(timestep_rule_name(TimestepRule::diffusers_0_37), "diffusers-0.37");
  EXPECT_EQ(timestep_rule_name(TimestepRule::diffusers_0_33), "diffusers-0.33");
  try {
    timestep_rule_from_name("0.37", "model.scheduler_timesteps");
    ADD_FAILURE() << "no error for an unknown rule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.scheduler_timesteps"), std::string::npos) << e.what();
  }
  for (const char* v : {"0.33.1", "0.35.0", "0.36.0", "0.36.1.dev0"})
    EXPECT_EQ(timestep_rule_for_diffusers(v, "case.json"), TimestepRule::diffusers_0_33) << v;
  for (const char* v : {"0.37.0", "0.40.0", "0.37", "1.0.0"})
    EXPECT_EQ(timestep_rule_for_diffusers(v, "case.json"), TimestepRule::diffusers_0_37) << v;
  for (const char* v : {"", "v0.40.0", "0", "0.x", "latest"})
    EXPECT_THROW(timestep_rule_for_diffusers(v, "case.json"), Error) << v;
}

TEST(UniPCTimestepRules, DefaultIsTheV033TableAndTheRuleIsKept) {
  auto s = load_scheduler(kRepos / "wan22-tiny" / "scheduler");
  auto* unipc = dynamic_cast<UniPCMultistepScheduler*>(s.get());
  ASSERT_NE(unipc, nullptr);
  EXPECT_EQ(unipc->timestep_rule(), TimestepRule::diffusers_0_33);
  s->set_timesteps(4);
  EXPECT_EQ(ints(s->timesteps()), (std::vector<std::int64_t>{999, 899, 749, 499}));
  set_timestep_rule(*s, TimestepRule::diffusers_0_37);
  EXPECT_EQ(unipc->timestep_rule(), TimestepRule::diffusers_0_37);
  s->set_timesteps(4);
  EXPECT_EQ(ints(s->timesteps()), (std::vector<std::int64_t>{999, 900, 750, 500}));
  s->set_timesteps(4);  // the rule stays for later schedules
  EXPECT_EQ(ints(s->timesteps()), (std::vector<std::int64_t>{999, 900, 750, 500}));
}

TEST(UniPCTimestepRules, V037FlowTableMatchesThePrimaryRecording) {
  // s = linspace(1, 1/1000, 5)[:-1] = 1, 0.75025, 0.5005, 0.25075; s' = 3 s / (1 + 2 s) =
  // 1 (-> 1 - 1e-6), 2.25075 / 2.5005, 1.5015 / 2.001, 0.75225 / 1.5015; then 0.
  auto s = wan22_scheduler(TimestepRule::diffusers_0_37);
  s->set_timesteps(4);
  const std::vector<double> hand = {1.0 - 1e-6, 2.25075 / 2.5005, 1.5015 / 2.001, 0.75225 / 1.5015, 0.0};
  const at::Tensor sig = s->sigmas();
  ASSERT_EQ(sig.scalar_type(), at::kFloat);
  ASSERT_EQ(sig.numel(), 5);
  for (std::int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(sig[i].item<float>(), static_cast<float>(hand[static_cast<std::size_t>(i)])) << "sigma " << i;
  EXPECT_EQ(ints(s->timesteps()), (std::vector<std::int64_t>{999, 900, 750, 500}));

  const auto primary = io::load_safetensors(kRepos / "wan22-tiny-reference" / "expected.safetensors");
  EXPECT_TRUE(at::equal(s->timesteps(), primary.at("timesteps").to(at::kLong)));
  EXPECT_TRUE(at::equal(sig, primary.at("sigmas").to(at::kFloat)))
      << "max diff " << (sig - primary.at("sigmas")).abs().max().item<double>();

  // The older rule reproduces the v0.36.0 recording's table, and not the primary's.
  auto old = wan22_scheduler(TimestepRule::diffusers_0_33);
  old->set_timesteps(4);
  const auto v036 = io::load_safetensors(kRepos / "wan22-tiny-reference" / "expected-diffusers-v0.36.0.safetensors");
  EXPECT_TRUE(at::equal(old->timesteps(), v036.at("timesteps").to(at::kLong)));
  EXPECT_TRUE(at::equal(old->sigmas(), v036.at("sigmas").to(at::kFloat)));
  EXPECT_FALSE(at::equal(old->timesteps(), primary.at("timesteps").to(at::kLong)));
}

TEST(UniPCTimestepRules, FinalSigmaMinAndLongerSchedules) {
  // final_sigmas_type sigma_min ends on the last flow sigma under the new rule as well.
  nlohmann::json cfg = {{"prediction_type", "flow_prediction"}, {"use_flow_sigmas", true}, {"flow_shift", 3.0},
                        {"final_sigmas_type", "sigma_min"}};
  UniPCMultistepScheduler s(cfg);
  s.set_timestep_rule(TimestepRule::diffusers_0_37);
  s.set_timesteps(4);
  EXPECT_EQ(s.sigmas()[4].item<float>(), s.sigmas()[3].item<float>());
  // flow_shift 1, 10 steps: s' = s = 1 - 0.0999 k, timesteps floor(1000 s') with s'[0] = 1 - 1e-6.
  UniPCMultistepScheduler plain(nlohmann::json{{"prediction_type", "flow_prediction"}, {"use_flow_sigmas", true}});
  plain.set_timestep_rule(TimestepRule::diffusers_0_37);
  plain.set_timesteps(10);
  const auto ts = ints(plain.timesteps());
  ASSERT_EQ(ts.size(), 10u);
  EXPECT_EQ(ts.front(), 999);
  for (std::size_t k = 1; k < ts.size(); ++k)
    EXPECT_NEAR(static_cast<double>(ts[k]), std::floor(1000.0 * (1.0 - 0.0999 * static_cast<double>(k))), 1.0) << k;
  EXPECT_EQ(ts[1], 900);  // 1000 * 0.9001
}

TEST(UniPCTimestepRules, VpSigmasAndOtherSchedulersAreUnaffected) {
  auto vp = load_scheduler(fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity" / "scheduler-unipc-default");
  vp->set_timesteps(7);
  const at::Tensor before_t = vp->timesteps().clone(), before_s = vp->sigmas().clone();
  set_timestep_rule(*vp, TimestepRule::diffusers_0_37);
  vp->set_timesteps(7);
  EXPECT_TRUE(at::equal(before_t, vp->timesteps()));
  EXPECT_TRUE(at::equal(before_s, vp->sigmas()));
  auto dpm = make_scheduler("DPMSolverMultistepScheduler", nlohmann::json::object());
  set_timestep_rule(*dpm, TimestepRule::diffusers_0_37);  // no rule to change: a no-op
  dpm->set_timesteps(5);
  EXPECT_EQ(dpm->timesteps().numel(), 5);
}

TEST(UniPCTimestepRules, BothRecordedWan22RunsReplayThroughTheirRule) {
  const double v040 = replay_max_abs("expected.safetensors", TimestepRule::diffusers_0_37);
  const double v036 = replay_max_abs("expected-diffusers-v0.36.0.safetensors", TimestepRule::diffusers_0_33);
  std::printf("  UniPC replay max |diff|: Diffusers v0.40.0 rule %.3g, v0.36.0 rule %.3g\n", v040, v036);
}
