// The embedded launcher (sync/launch.hpp) with the real `yeto-host syncer` and test learner
// islands (sync_learner_driver, synthetic objective) as its children, on 127.0.0.1.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "sync/launch.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

ys::IslandLaunch launch(const fs::path& run_dir, std::uint32_t islands, const std::vector<std::string>& sets) {
  ys::IslandLaunch L;
  L.run_dir = run_dir;
  L.islands = islands;
  L.syncer_argv = {YETO_HOST_BIN, "syncer", "--log-level", "warn"};
  for (const std::string s : {"sync.heartbeat_s=0.1", "sync.learner_timeout_s=0.8", "sync.grace_max_s=1.0",
                              "sync.round_deadline_s=2.0", "sync.reconnect_budget_s=15", "sync.final_timeout_s=5"})
    L.syncer_argv.insert(L.syncer_argv.end(), {"--set", s});
  for (const auto& s : sets) L.syncer_argv.insert(L.syncer_argv.end(), {"--set", s});
  L.learner_argv = [](const ys::IslandSlot& s) {
    return std::vector<std::string>{SYNC_LEARNER_DRIVER, "--syncer", s.syncer, "--secret", s.secret.string(),
                                    "--id", s.id, "--seed", std::to_string(s.index + 1), "--out",
                                    (s.dir / "final.bin").string(), "--events", (s.dir / "sync_events.jsonl").string(),
                                    "--heartbeat", "0.1", "--learner-timeout", "0.8", "--grace-max", "1.0",
                                    "--round-deadline", "2.0", "--reconnect-budget", "15", "--step-ms", "4"};
  };
  L.syncer_grace_s = 10;
  return L;
}

void expect_islands_match_final_cut(const fs::path& run, std::uint32_t n) {
  const std::string cut = yeto::test::read_text(run / "syncer" / "final_cut.bin");
  ASSERT_EQ(cut.size(), 650u * 4u);
  for (std::uint32_t i = 0; i < n; ++i)
    EXPECT_TRUE(yeto::test::read_text(run / ("island-" + std::to_string(i)) / "final.bin") == cut) << i;
}

TEST(SyncLaunch, RunsASyncerAndTwoIslandsToTheFinalCutAndSummarises) {
  yeto::test::TempDir dir;
  const fs::path run = dir / "run";
  const auto r = ys::run_islands(launch(run, 2, {"sync.quorum=2", "sync.budget_outer_steps=6"}));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.syncer_exit, 0);
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 0}));
  // A fresh run secret, private to the user.
  struct stat sb {};
  ASSERT_EQ(::stat((run / "run.secret").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_EQ(yeto::test::read_text(run / "run.secret").size(), 65u);
  expect_islands_match_final_cut(run, 2);
  std::set<std::string> merged;
  for (const auto& rec : ys::read_tape_records(run / "syncer" / "tape.jsonl"))
    if (rec["event"] == "merge")
      for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"}));

  const json s = ys::embedded_summary(run, 2);
  EXPECT_EQ(s["outer_steps_merged"], 6);
  EXPECT_GE(s["merges_with_every_island"].get<int>(), 1);
  EXPECT_EQ(s["final"]["acked"].size(), 2u);
  for (const auto& i : s["per_island"]) {
    EXPECT_GT(i["steps"].get<int>(), 0);
    EXPECT_EQ(i["numel"], 650);
    EXPECT_GT(i["bytes_sent"].get<double>(), 0);
    EXPECT_TRUE(i["final_digest_matches"].get<bool>());
  }
  // 4-bit pseudo-gradients every H = 10 steps against float32 all-reduce every step.
  EXPECT_GT(s["allreduce_over_sent"].get<double>(), 1.0);
  const std::string text = ys::format_summary(s);
  EXPECT_NE(text.find("outer steps merged: 6"), std::string::npos) << text;
  EXPECT_NE(text.find("island-1:"), std::string::npos) << text;
}

TEST(SyncLaunch, ASignalTakesTheFinalCutEarlyAndEveryIslandEndsOnIt) {
  yeto::test::TempDir dir;
  const fs::path run = dir / "run";
  ys::LaunchResult r;
  std::thread t([&] { r = ys::run_islands(launch(run, 2, {"sync.quorum=2"})); });
  // No budget: only the signal ends this run. Send it once merges are on the tape (the
  // launcher's handler is installed by then).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::size_t merges = 0;
  while (std::chrono::steady_clock::now() < end && merges < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    merges = 0;
    if (fs::exists(run / "syncer" / "tape.jsonl"))
      for (const auto& rec : ys::read_tape_records(run / "syncer" / "tape.jsonl"))
        if (rec["event"] == "merge") ++merges;
  }
  ASSERT_GE(merges, 3u);
  ::kill(::getpid(), SIGINT);
  t.join();
  EXPECT_EQ(r.signals, 1);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 0}));
  expect_islands_match_final_cut(run, 2);
  const json s = ys::embedded_summary(run, 2);
  EXPECT_EQ(s["final_cut"]["reason"], "signal");
}

}  // namespace
