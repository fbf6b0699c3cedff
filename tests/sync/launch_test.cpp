// The embedded launcher (sync/launch.hpp) with the real `yeto-host syncer` and test learner
// islands (sync_learner_driver, synthetic objective) as its children, on 127.0.0.1.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "support/temp_dir.hpp"
#include "core/error.hpp"
#include "sync/launch.hpp"
#include "sync/options.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using ExtraArgs = std::function<std::vector<std::string>(const ys::IslandSlot&)>;

ys::IslandLaunch launch(const fs::path& run_dir, std::uint32_t islands, const std::vector<std::string>& sets,
                        ExtraArgs extra = {}) {
  ys::IslandLaunch L;
  L.run_dir = run_dir;
  L.islands = islands;
  L.syncer_argv = {YETO_HOST_BIN, "syncer", "--log-level", "warn"};
  for (const std::string s : {"sync.heartbeat_s=0.1", "sync.learner_timeout_s=0.8", "sync.grace_max_s=1.0",
                              "sync.round_deadline_s=2.0", "sync.reconnect_budget_s=15", "sync.final_timeout_s=5"})
    L.syncer_argv.insert(L.syncer_argv.end(), {"--set", s});
  for (const auto& s : sets) L.syncer_argv.insert(L.syncer_argv.end(), {"--set", s});
  L.learner_argv = [extra](const ys::IslandSlot& s) {
    std::vector<std::string> a{SYNC_LEARNER_DRIVER, "--syncer", s.syncer, "--secret", s.secret.string(),
                                    "--id", s.id, "--seed", std::to_string(s.index + 1), "--out",
                                    (s.dir / "final.bin").string(), "--events", (s.dir / "sync_events.jsonl").string(),
                                    "--heartbeat", "0.1", "--learner-timeout", "0.8", "--grace-max", "1.0",
                                    "--round-deadline", "2.0", "--reconnect-budget", "15", "--step-ms", "4"};
    if (extra)
      for (auto& x : extra(s)) a.push_back(std::move(x));
    return a;
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
  // Per-merge participation: every merge counted once by the islands it held, and those that
  // held every live island (both were live throughout) at least those that held both.
  std::uint64_t by_islands = 0;
  for (const auto& [n, m] : s["merges_by_islands"].items()) by_islands += m.get<std::uint64_t>();
  EXPECT_EQ(by_islands, 6u);
  EXPECT_EQ(s["merges_by_islands"].value("2", 0), s["merges_with_every_island"].get<int>());
  EXPECT_GE(s["merges_with_every_live_island"].get<int>(), s["merges_with_every_island"].get<int>());
  EXPECT_DOUBLE_EQ(s["participation"].get<double>(), s["merges_with_every_live_island"].get<double>() / 6.0);
  EXPECT_NE(ys::format_summary(s).find(" with every live island ("), std::string::npos) << ys::format_summary(s);
  EXPECT_EQ(s["final"]["acked"].size(), 2u);
  for (const auto& i : s["per_island"]) {
    EXPECT_GT(i["steps"].get<int>(), 0);
    EXPECT_EQ(i["numel"], 650);
    EXPECT_GT(i["bytes_sent"].get<double>(), 0);
    EXPECT_TRUE(i["final_digest_matches"].get<bool>());
    EXPECT_GT(i.value("last_merge_time", 0.0), 0.0) << i.dump();  // both islands' pushes were merged
  }
  // 4-bit pseudo-gradients every H = 10 steps against float32 all-reduce every step, both
  // directions counted on both sides.
  double sent = 0, received = 0, allreduce = 0;
  for (const auto& i : s["per_island"]) {
    EXPECT_GT(i["bytes_received"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(i["bytes_total"].get<double>(), i["bytes_sent"].get<double>() + i["bytes_received"].get<double>());
    // 2 islands: each rank sends 2(2-1)/2 x 4 x numel bytes per step and receives as many.
    EXPECT_DOUBLE_EQ(i["allreduce_equivalent_bytes"].get<double>(), i["steps"].get<double>() * 2.0 * 4.0 * 650.0);
    sent += i["bytes_sent"].get<double>();
    received += i["bytes_received"].get<double>();
    allreduce += i["allreduce_equivalent_bytes"].get<double>();
  }
  EXPECT_DOUBLE_EQ(s["bytes_sent_total"].get<double>(), sent);
  EXPECT_DOUBLE_EQ(s["bytes_received_total"].get<double>(), received);
  EXPECT_DOUBLE_EQ(s["bytes_total"].get<double>(), sent + received);
  EXPECT_DOUBLE_EQ(s["allreduce_equivalent_bytes_total"].get<double>(), allreduce);
  EXPECT_DOUBLE_EQ(s["allreduce_over_total"].get<double>(), allreduce / (sent + received));
  EXPECT_GT(s["allreduce_over_total"].get<double>(), 1.0);
  const std::string text = ys::format_summary(s);
  EXPECT_NE(text.find("traffic of the islands, sent + received:"), std::string::npos) << text;
  EXPECT_NE(text.find("for a float32 ring all-reduce, sent + received ("), std::string::npos) << text;
  EXPECT_NE(text.find("x less)"), std::string::npos) << text;
  EXPECT_NE(text.find("both ways); a data-parallel ring all-reduce would have sent and received"), std::string::npos)
      << text;
  EXPECT_NE(text.find("outer steps merged: 6"), std::string::npos) << text;
  EXPECT_NE(text.find("island-1:"), std::string::npos) << text;

  // Launched again into the finished run: nothing starts (no syncer restart on the final cut,
  // which would leave the islands without a state), the tape and the cut are untouched.
  const std::string tape = yeto::test::read_text(run / "syncer" / "tape.jsonl");
  const std::string cut = yeto::test::read_text(run / "syncer" / "final_cut.bin");
  const auto t0 = std::chrono::steady_clock::now();
  const auto again = ys::run_islands(launch(run, 2, {"sync.quorum=2", "sync.budget_outer_steps=6"}));
  EXPECT_EQ(again.exit_code(), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(yeto::test::read_text(run / "syncer" / "tape.jsonl"), tape);
  EXPECT_EQ(yeto::test::read_text(run / "syncer" / "final_cut.bin"), cut);
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

std::vector<json> tape_of(const fs::path& run) {
  const fs::path t = run / "syncer" / "tape.jsonl";
  return fs::exists(t) ? ys::read_tape_records(t) : std::vector<json>{};
}

bool names(const json& rec, const std::string& id) {
  if (!rec.contains("learners")) return false;
  for (const auto& l : rec["learners"])
    if (l == id) return true;
  return false;
}

// Learners whose acknowledgement of the final cut the syncer found correct.
std::set<std::string> final_acks(const fs::path& run) {
  std::set<std::string> ok;
  for (const auto& rec : tape_of(run))
    if (rec["event"] == "final_ack" && rec.value("ok", false))
      for (const auto& l : rec["learners"]) ok.insert(l.get<std::string>());
  return ok;
}

// Each island trains 400 steps of its own (then says `done`) and checkpoints its step and
// tensors in its run dir; island-1 is killed with SIGKILL late in its budget. The launcher
// restarts it; it resumes from its checkpoint, rejoins the syncer (which holds the
// learners-done cut for it), trains the rest of its steps and ends on the final cut with
// island-0.
TEST(SyncLaunch, AnIslandKilledLateIsRestartedRejoinsAndEndsOnTheFinalCut) {
  yeto::test::TempDir dir;
  const fs::path run = dir / "run";
  ys::LaunchResult r;
  std::thread t([&] {
    r = ys::run_islands(launch(run, 2, {"sync.quorum=2"}, [](const ys::IslandSlot& s) {
      return std::vector<std::string>{"--budget-steps", "400", "--state", (s.dir / "state.bin").string(),
                                      "--pid-file", (s.dir / "pid").string()};
    }));
  });
  // Late: once most of island-1's pushes have been merged (about 80 in its 400 steps).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::size_t merged = 0;
  while (std::chrono::steady_clock::now() < end && merged < 50) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    merged = 0;
    for (const auto& rec : tape_of(run))
      if (rec["event"] == "merge" && names(rec, "island-1")) ++merged;
  }
  if (merged >= 50) ::kill(std::stoi(yeto::test::read_text(run / "island-1" / "pid")), SIGKILL);
  t.join();
  ASSERT_GE(merged, 50u);

  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.syncer_exit, 0);
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 0}));
  // It came back as the same learner and resumed from its own checkpoint.
  bool rejoined = false;
  for (const auto& rec : tape_of(run)) rejoined = rejoined || (rec["event"] == "rejoin" && names(rec, "island-1"));
  EXPECT_TRUE(rejoined);
  EXPECT_NE(yeto::test::read_text(run / "island-1" / "learner.log").find("resumed at step"), std::string::npos);
  // Every island ends on the final cut, taken when both had trained their steps.
  EXPECT_EQ(final_acks(run), (std::set<std::string>{"island-0", "island-1"}));
  const json fin = json::parse(yeto::test::read_text(run / "syncer" / "final.json"));
  EXPECT_EQ(fin["reason"], "learners_done");
  EXPECT_TRUE(fin["missing"].empty()) << fin.dump();
  expect_islands_match_final_cut(run, 2);

  const json s = ys::embedded_summary(run, 2);
  EXPECT_EQ(s["islands_restarted"], 1) << s.dump(2);
  EXPECT_EQ(s["islands_lost"], 0) << s.dump(2);
  EXPECT_TRUE(s["islands_missing"].empty()) << s.dump(2);
  EXPECT_EQ(s["per_island"][0]["restarts"], 0);
  EXPECT_EQ(s["per_island"][1]["restarts"], 1);
  for (const auto& i : s["per_island"]) {
    EXPECT_EQ(i["acknowledged_final_cut"], true) << i.dump();
    EXPECT_EQ(i["lost"], false) << i.dump();
  }
  const std::string text = ys::format_summary(s);
  EXPECT_NE(text.find("island-1: restarted 1 time"), std::string::npos) << text;
  EXPECT_NE(text.find("islands lost 0, restarted 1, missing 0"), std::string::npos) << text;
}

// island-1 kills itself 30 steps after every start: the launcher restarts it three times
// (sync.island_restarts), then gives it up. The syncer waits sync.join_timeout_s for it after
// it was lost, then takes the cut with island-0 and names island-1 missing; the run fails.
TEST(SyncLaunch, AnIslandThatKeepsCrashingIsGivenUpAndReportedLost) {
  yeto::test::TempDir dir;
  const fs::path run = dir / "run";
  auto L = launch(run, 2, {"sync.quorum=2", "sync.join_timeout_s=3"}, [](const ys::IslandSlot& s) {
    if (s.index == 1) return std::vector<std::string>{"--crash-after-steps", "30"};
    return std::vector<std::string>{"--budget-steps", "300"};
  });
  L.island_restarts = 3;
  L.restart_backoff_s = 0.25;  // 0.25, 0.5, 1 s: the restarts come before the syncer gives up
  const auto r = ys::run_islands(L);
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 128 + SIGKILL}));
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_EQ(r.syncer_exit, 0);
  std::size_t starts = 0;
  bool awaited = false, lost = false;
  for (const auto& rec : tape_of(run)) {
    if ((rec["event"] == "join" || rec["event"] == "rejoin") && names(rec, "island-1")) ++starts;
    awaited = awaited || (rec["event"] == "awaiting_learner" && names(rec, "island-1"));
    lost = lost || (rec["event"] == "learner_lost" && names(rec, "island-1"));
  }
  EXPECT_EQ(starts, 4u);  // the first start and three restarts
  EXPECT_TRUE(awaited);
  EXPECT_TRUE(lost);
  EXPECT_EQ(final_acks(run), (std::set<std::string>{"island-0"}));
  const json fin = json::parse(yeto::test::read_text(run / "syncer" / "final.json"));
  EXPECT_EQ(fin["missing"], json::array({"island-1"})) << fin.dump();

  const json s = ys::embedded_summary(run, 2);
  EXPECT_EQ(s["islands_lost"], 1) << s.dump(2);
  EXPECT_EQ(s["islands_restarted"], 1) << s.dump(2);
  EXPECT_EQ(s["islands_missing"], json::array({"island-1"})) << s.dump(2);
  EXPECT_EQ(s["per_island"][1]["restarts"], 3);
  EXPECT_EQ(s["per_island"][1]["lost"], true);
  EXPECT_EQ(s["per_island"][1]["acknowledged_final_cut"], false);
  EXPECT_EQ(s["per_island"][0]["acknowledged_final_cut"], true);
  const std::string text = ys::format_summary(s);
  EXPECT_NE(text.find("island-1: restarted 3 times, lost"), std::string::npos) << text;
  EXPECT_NE(text.find("does not hold the final cut"), std::string::npos) << text;
  EXPECT_NE(text.find("islands lost 1, restarted 1, missing 1"), std::string::npos) << text;
}

// island-1 acknowledges the final cut, then exits 3: the run is over (or its island holds the
// cut), so it is not restarted; it is not lost (it holds the cut), but the run fails.
TEST(SyncLaunch, AnIslandThatFailsAfterTheFinalCutIsNotRestarted) {
  yeto::test::TempDir dir;
  const fs::path run = dir / "run";
  auto L = launch(run, 2, {"sync.quorum=2"}, [](const ys::IslandSlot& s) {
    std::vector<std::string> a = {"--budget-steps", "100"};
    if (s.index == 1) a.insert(a.end(), {"--exit-after-final", "3"});
    return a;
  });
  L.restart_backoff_s = 0.1;
  const auto r = ys::run_islands(L);
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 3}));
  EXPECT_EQ(r.exit_code(), 3);
  EXPECT_EQ(r.island_restarts, (std::vector<std::uint32_t>{0, 0}));
  EXPECT_EQ(final_acks(run), (std::set<std::string>{"island-0", "island-1"}));
  expect_islands_match_final_cut(run, 2);
  const json s = ys::embedded_summary(run, 2);
  EXPECT_EQ(s["islands_lost"], 0) << s.dump(2);
  EXPECT_EQ(s["islands_restarted"], 0) << s.dump(2);
  EXPECT_EQ(s["per_island"][1]["holds_final_cut"], true);
}

}  // namespace

// `train --islands`: the syncer shares the machine with the learners, so its bulk lanes keep
// their priority unless the config or an override says otherwise.
TEST(SyncLaunch, TheEmbeddedSyncerKeepsItsBulkLanesAtTheLearnersPriorityUnlessConfigured) {
  namespace yc = yeto::config;
  yeto::test::TempDir dir;
  ys::EmbeddedRun e;
  e.host_bin = "/bin/yeto-host";
  e.islands = 3;
  auto count = [](const std::vector<std::string>& a, const std::string& s) { return std::count(a.begin(), a.end(), s); };

  e.sets = {"sync.inner_steps=8"};
  auto a = ys::embedded_syncer_argv(yc::Config::resolve(std::nullopt, {{"sync.inner_steps", "8", "--set"}}), e);
  EXPECT_EQ(a.at(0), "/bin/yeto-host");
  EXPECT_EQ(a.at(1), "syncer");
  EXPECT_EQ(count(a, "sync.inner_steps=8"), 1);
  EXPECT_EQ(count(a, "sync.islands=3"), 1);
  EXPECT_EQ(count(a, "sync.bulk_nice=0"), 1);

  e.sets = {"sync.bulk_nice=7"};
  a = ys::embedded_syncer_argv(yc::Config::resolve(std::nullopt, {{"sync.bulk_nice", "7", "--set"}}), e);
  EXPECT_EQ(count(a, "sync.bulk_nice=0"), 0);
  EXPECT_EQ(count(a, "sync.bulk_nice=7"), 1);

  const fs::path file = dir.write("run.toml", "[sync]\nbulk_nice = 12\n");
  e.sets = {};
  e.config_file = file;
  a = ys::embedded_syncer_argv(yc::Config::resolve(file, {}), e);
  EXPECT_EQ(count(a, "sync.bulk_nice=0"), 0);
  EXPECT_EQ(count(a, file.string()), 1);
}

// sync.grace_fraction defaults to 1.5 with carry (a round may wait past the pushing island's
// period: a carrying island trains on and its next push waits for the merge) and to 0.6
// without; with carry off a value of 1 or more is refused naming both keys.
TEST(SyncOptions, GraceFractionFollowsCarry) {
  namespace yc = yeto::config;
  using O = std::vector<yc::Override>;
  auto fraction = [](const O& sets) { return ys::timeouts_from_config(yc::Config::resolve(std::nullopt, sets)).grace_fraction; };
  EXPECT_EQ(fraction({}), ys::kGraceFraction);
  EXPECT_EQ(ys::kGraceFraction, 1.5);
  EXPECT_EQ(fraction({{"sync.carry", "false", "--set"}}), ys::kGraceFractionNoCarry);
  // The resolved configuration (what `yeto-host config` prints and the run records) holds the
  // value that applies, still marked as the default.
  const auto no_carry = yc::Config::resolve(std::nullopt, {{"sync.carry", "false", "--set"}});
  EXPECT_EQ(no_carry.get_number("sync.grace_fraction"), ys::kGraceFractionNoCarry);
  EXPECT_EQ(no_carry.entry("sync.grace_fraction").origin, yc::Origin::default_value);
  EXPECT_EQ(yc::Config::resolve(std::nullopt, {}).get_number("sync.grace_fraction"), ys::kGraceFraction);
  EXPECT_EQ(fraction({{"sync.carry", "false", "--set"}, {"sync.grace_fraction", "0.8", "--set"}}), 0.8);
  EXPECT_EQ(fraction({{"sync.grace_fraction", "3", "--set"}}), 3.0);
  try {
    fraction({{"sync.carry", "false", "--set"}, {"sync.grace_fraction", "1.2", "--set"}});
    FAIL() << "a fraction of 1.2 without carry was accepted";
  } catch (const yeto::UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sync.grace_fraction = 1.2"), std::string::npos) << m;
    EXPECT_NE(m.find("needs sync.carry = true"), std::string::npos) << m;
  }
  EXPECT_THROW(fraction({{"sync.grace_fraction", "4.5", "--set"}}), yeto::UsageError);  // the schema's range
}

namespace {
// A value the schema refuses for `key`, with a message that names the key.
void expect_refused(const char* key, const char* value) {
  try {
    yeto::config::Config::resolve(std::nullopt, {{key, value, "--set"}});
    ADD_FAILURE() << key << " = " << value << " was accepted";
  } catch (const yeto::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}
}  // namespace

// sync.merge: the weighted mean by default, radial-directional averaging on request; any other
// value is refused by the schema, naming the key.
TEST(SyncOptions, MergeRuleIsTheMeanUnlessRdaIsAskedFor) {
  namespace yc = yeto::config;
  EXPECT_EQ(ys::syncer_options_from_config(yc::Config::resolve(std::nullopt, {})).merge, ys::MergeRule::mean);
  EXPECT_EQ(ys::syncer_options_from_config(yc::Config::resolve(std::nullopt, {{"sync.merge", "rda", "--set"}})).merge,
            ys::MergeRule::rda);
  expect_refused("sync.merge", "median");
}

TEST(SyncOptions, PartialMergesWeighTheirShareUnlessFullIsAskedFor) {
  namespace yc = yeto::config;
  EXPECT_EQ(ys::syncer_options_from_config(yc::Config::resolve(std::nullopt, {})).partial_merge, ys::PartialMerge::share);
  EXPECT_EQ(ys::syncer_options_from_config(yc::Config::resolve(std::nullopt, {{"sync.partial_merge", "full", "--set"}}))
                .partial_merge,
            ys::PartialMerge::full);
  expect_refused("sync.partial_merge", "half");
}

// The links' codes: q4 both ways unless sync.uplink / sync.downlink say q2 (or f32 down).
TEST(SyncOptions, LinksAreQ4UnlessQ2IsAskedFor) {
  namespace yc = yeto::config;
  const auto none = yc::Config::resolve(std::nullopt, {});
  EXPECT_EQ(ys::client_options_from_config(none).uplink, ys::Uplink::q4);
  EXPECT_EQ(ys::syncer_options_from_config(none).downlink, ys::Downlink::q4);
  const auto q2 = yc::Config::resolve(std::nullopt, {{"sync.uplink", "q2", "--set"}, {"sync.downlink", "q2", "--set"}});
  EXPECT_EQ(ys::client_options_from_config(q2).uplink, ys::Uplink::q2);
  EXPECT_EQ(ys::syncer_options_from_config(q2).downlink, ys::Downlink::q2);
  EXPECT_STREQ(ys::downlink_name(ys::Downlink::q2), "q2");
  EXPECT_STREQ(ys::uplink_name(ys::Uplink::q2), "q2");
  expect_refused("sync.uplink", "f32");
  expect_refused("sync.uplink", "q8");
  expect_refused("sync.downlink", "q1");
}
