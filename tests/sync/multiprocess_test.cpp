// Multi-process tests on 127.0.0.1: the real `yeto-host syncer` and test learner islands
// (sync_learner_driver, synthetic quadratic objective) as separate processes, killed with
// SIGKILL where a test says so. Every wait is bounded; ports are ephemeral.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "sync_procs.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/layout.hpp"
#include "sync/protocol.hpp"
#include "sync/state.hpp"
#include "sync/tape.hpp"

extern char** environ;

using namespace yeto::sync_test;


// (a) + (e): three learners, quorum three: every outer step merges all three; the terminal
// handshake leaves every learner bit-identical to the final cut.
TEST(SyncMultiProcess, ThreeLearnersEveryOuterStepMergesAll) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=3", "sync.budget_outer_steps=16"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2), c = run.start_learner("isle-c", 3);
  EXPECT_EQ(syncer->wait(25), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  EXPECT_EQ(c->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  const std::size_t merges = expect_continuous(tape);
  EXPECT_EQ(merges, 16u);
  for (const auto& r : tape)
    if (r["event"] == "merge") {
      EXPECT_EQ(learners_of(r), (std::set<std::string>{"isle-a", "isle-b", "isle-c"})) << r.dump();
      EXPECT_EQ(r["reason"], "all_live") << r.dump();
      for (const auto& k : {"event", "time", "fragment", "version", "learners"}) EXPECT_TRUE(r.contains(k)) << k;
    }
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b", "isle-c"});
  expect_downlink(run, {"isle-a", "isle-b", "isle-c"}, "q4");
}

// sync.carry: learners keep the steps they trained between a push and its merge. Each fragment
// has one push outstanding at a time (the next waits for the merge that holds it, which the
// syncer names in a `merged` note before the update); every note names a merge of the tape that
// holds that learner; and the final cut still leaves every learner bit-identical to it.
TEST(SyncMultiProcess, CarryingLearnersKeepOnePushOutstandingAndEndOnTheFinalCut) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=16", "sync.carry=true"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  const std::vector<std::string> carry = {"--carry", "1", "--step-ms", "8"};
  auto a = run.start_learner("isle-a", 1, "", carry), b = run.start_learner("isle-b", 2, "", carry);
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 16u);
  std::map<std::pair<std::int64_t, std::uint64_t>, std::set<std::string>> merged_by;  // (fragment, version) -> learners
  for (const auto& r : tape)
    if (r["event"] == "merge") merged_by[{r["fragment"].get<std::int64_t>(), r["version"].get<std::uint64_t>()}] = learners_of(r);
  for (const std::string id : {"isle-a", "isle-b"}) {
    std::ifstream ev(run.dir / (id + ".events.jsonl"));
    std::map<std::int64_t, bool> outstanding;
    std::size_t included = 0, notes = 0;
    for (std::string line; std::getline(ev, line);) {
      const json j = json::parse(line);
      const std::string e = j["event"];
      if (e == "push") {
        const auto p = j["fragment"].get<std::int64_t>();
        EXPECT_FALSE(outstanding[p]) << id << ": a second push of fragment " << p << " while one was outstanding";
        outstanding[p] = true;
      } else if (e == "applied" && j.contains("carry")) {
        const std::string c = j["carry"];
        if (c == "included" || c == "lost" || c == "refused") outstanding[j["fragment"].get<std::int64_t>()] = false;
        if (c == "included") ++included;
      } else if (e == "push_dropped") {
        outstanding[j["fragment"].get<std::int64_t>()] = false;
      } else if (e == "merged") {
        ++notes;
        const auto key = std::make_pair(j["fragment"].get<std::int64_t>(), j["version"].get<std::uint64_t>());
        ASSERT_TRUE(merged_by.count(key)) << id << ": a note for a merge the tape lacks: " << line;
        EXPECT_TRUE(merged_by[key].count(id)) << id << ": a note for a merge without it: " << line;
      }
    }
    EXPECT_GE(included, 4u) << id << " carried from a merged push only " << included << " times";
    EXPECT_GE(notes, included) << id;
  }
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
  expect_downlink(run, {"isle-a", "isle-b"}, "q4");
}

// Islands of unequal speed with carry and the default sync.grace_fraction (1.5): a round waits
// for the slower island past the faster one's period, the faster island's next push waits for
// that merge (it trains on meanwhile), so the rounds keep holding both instead of drifting apart
// and merging each alone; at the end each island pushes what it trained since its last push
// (SyncClient::push_remaining), so every step it trained went to the syncer, and its last H
// steps go in that one push (no short push of the rest after a full one).
void unequal_islands_stay_merged_together(const char* slow_ms) {
  SCOPED_TRACE(std::string("steps of 6 and ") + slow_ms + " ms");
  RunDir run;
  run.syncer_sets = {"sync.carry=true", "sync.islands=2"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  constexpr int kSteps = 200;
  const std::vector<std::string> common = {"--carry", "1", "--budget-steps", std::to_string(kSteps)};
  auto with = [&](const char* ms) {
    auto v = common;
    v.insert(v.end(), {"--step-ms", ms});
    return v;
  };
  auto fast = run.start_learner("isle-fast", 1, "", with("6")), slow = run.start_learner("isle-slow", 2, "", with(slow_ms));
  EXPECT_EQ(fast->wait(60), 0) << run.logs();
  EXPECT_EQ(slow->wait(60), 0) << run.logs();
  EXPECT_EQ(syncer->wait(20), 0) << run.logs();
  std::size_t both = 0, while_both = 0;
  for (const auto& r : run.tape())
    if (r["event"] == "merge" && r["active"] == 2) {
      ++while_both;
      if (learners_of(r).size() == 2) ++both;
    }
  EXPECT_GE(while_both, 8u) << run.logs();
  EXPECT_GE(both * 10, while_both * 8) << both << " of " << while_both << " merges while both trained held both";
  std::cout << both << " of " << while_both << " merges while both islands trained held both\n";
  std::map<std::string, std::size_t> deferred;
  for (const std::string id : {"isle-fast", "isle-slow"}) {
    std::ifstream ev(run.dir / (id + ".events.jsonl"));
    std::map<std::int64_t, std::uint64_t> pushed_steps, last_push;  // fragment -> inner steps its pushes covered
    for (std::string line; std::getline(ev, line);) {
      const json j = json::parse(line);
      if (j["event"] == "push") {
        const auto p = j["fragment"].get<std::int64_t>();
        const auto n = j["inner_steps"].get<std::uint64_t>();
        // A push that waited for a merge moves the fragment's schedule along: each push after the
        // first covers at least H (10) steps, none the rest of a period cut short by a late one.
        if (pushed_steps.count(p)) {
          EXPECT_GE(n, 10u) << id << ": fragment " << p << " pushed after " << n << " steps";
        }
        pushed_steps[p] += n;
        last_push[p] = n;
      }
      if (j["event"] == "push_deferred") ++deferred[id];
    }
    ASSERT_EQ(pushed_steps.size(), 2u) << id;
    for (const auto& [p, n] : pushed_steps) {
      EXPECT_EQ(n, static_cast<std::uint64_t>(kSteps)) << id << ": steps of fragment " << p << " trained but never pushed";
      // The last H steps go with the push before them, not in a short push of their own.
      EXPECT_GE(last_push[p], 10u) << id << ": fragment " << p << "'s last push covers " << last_push[p] << " steps";
    }
  }
  EXPECT_GE(deferred["isle-fast"], 1u) << "the faster island never waited for a merge";
  expect_bit_identical_to_final_cut(run, {"isle-fast", "isle-slow"});
}

// 6 and 9 ms: the faster island waits for a merge in every round. 6 and 7 ms: the phase drifts
// until it does now and then, and its next push then covers H steps again.
TEST(SyncMultiProcess, IslandsOfUnequalSpeedStayMergedTogether) {
  unequal_islands_stay_merged_together("9");
  unequal_islands_stay_merged_together("7");
}

// Two carrying islands at equal speed and a third 4x slower: the rounds the slow one opens or
// joins hold the fast islands' pushes back (up to 1.5 of their period), so their pushes go late
// now and then; the push after a late one then goes H steps after it, not at the rest of the
// original period (a short push that the syncer's prediction of that island would miss: rounds
// split). Each fast island's pushes after its first cover at least H steps, and at least 80 %
// of the rounds with a fast island's push hold both.
TEST(SyncMultiProcess, ASlowIslandDoesNotSplitTheFastOnesRounds) {
  RunDir run;
  run.syncer_sets = {"sync.carry=true", "sync.islands=3"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto with = [](const char* steps, const char* ms) {
    return std::vector<std::string>{"--carry", "1", "--budget-steps", steps, "--step-ms", ms, "--fragments", "1"};
  };
  auto a = run.start_learner("fast-a", 1, "", with("300", "6")), b = run.start_learner("fast-b", 2, "", with("300", "6"));
  auto slow = run.start_learner("slow", 3, "", with("75", "24"));
  EXPECT_EQ(a->wait(60), 0) << run.logs();
  EXPECT_EQ(b->wait(60), 0) << run.logs();
  EXPECT_EQ(slow->wait(60), 0) << run.logs();
  EXPECT_EQ(syncer->wait(20), 0) << run.logs();
  std::size_t with_fast = 0, both_fast = 0;
  for (const auto& r : run.tape())
    if (r["event"] == "merge") {
      const auto who = learners_of(r);
      if (who.count("fast-a") || who.count("fast-b")) ++with_fast;
      if (who.count("fast-a") && who.count("fast-b")) ++both_fast;
    }
  std::cout << both_fast << " of " << with_fast << " rounds with a fast island hold both\n";
  EXPECT_GE(with_fast, 15u);
  EXPECT_GE(both_fast * 10, with_fast * 8) << both_fast << " of " << with_fast;
  for (const std::string id : {"fast-a", "fast-b"}) {
    std::size_t pushes = 0;
    for (const auto& e : learner_events(run, id))
      if (e["event"] == "push" && pushes++ > 0) {
        EXPECT_GE(e["inner_steps"].get<std::uint64_t>(), 10u) << id << ": a push after " << e["inner_steps"] << " steps";
      }
  }
}

// Error feedback on the uplink, with carry: what a push's 4-bit quantisation drops stays in the
// island's weights (its reference is the state the syncer takes the push for) and goes with its
// next pushes. The drift objective moves each q4 block's first value 40 times as fast as the
// rest, so every push alone rounds the rest to zero; they still reach the global state, at
// their true rate: after 200 steps of 0.01 / 40 each the final cut holds 0.05 for them (not 0),
// within what the last push may keep back (half a q4 step of it: its block maximum / 14).
TEST(SyncMultiProcess, CarryFeedsBackWhatQuantisationDropped) {
  RunDir run;
  run.syncer_sets = {"sync.carry=true", "sync.islands=1", "sync.outer_lr=1", "sync.outer_momentum=0"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  constexpr int kSteps = 200;
  constexpr double kRate = 0.01;
  auto isle = run.start_learner("isle", 1, "",
                                {"--carry", "1", "--budget-steps", std::to_string(kSteps), "--tensors", "w:640",
                                 "--fragments", "1", "--block", "32", "--objective", "drift", "--lr",
                                 std::to_string(kRate), "--step-ms", "1"});
  EXPECT_EQ(isle->wait(60), 0) << run.logs();
  EXPECT_EQ(syncer->wait(20), 0) << run.logs();
  const std::string cut = run.final_cut();
  ASSERT_EQ(cut.size(), 640 * 4u);
  std::vector<float> w(640);
  std::memcpy(w.data(), cut.data(), cut.size());
  std::uint64_t pushes = 0, last_steps = 0;
  for (const auto& e : learner_events(run, "isle"))
    if (e["event"] == "push") {
      ++pushes;
      last_steps = e["inner_steps"].get<std::uint64_t>();
    }
  ASSERT_GE(pushes, 10u);
  // Kept back by the last push: at most half a q4 step of its block, whose maximum (the fast
  // value's last_steps of drift plus what it kept back before) is below (last_steps + 1) · rate.
  const double slack = (static_cast<double>(last_steps) + 1) * kRate / 14;
  double slow_sum = 0;
  for (std::size_t k = 0; k < w.size(); ++k) {
    const double want = kSteps * (k % 32 == 0 ? kRate : kRate / 40);
    EXPECT_NEAR(w[k], want, slack) << "value " << k << " of the final cut";
    if (k % 32 != 0) slow_sum += w[k];
  }
  const double slow_mean = slow_sum / (640 - 20);
  std::cout << "slow values in the final cut: mean " << slow_mean << " (true drift " << kSteps * kRate / 40 << ")\n";
  EXPECT_TRUE(yeto::test::read_text(run.dir / "isle.final.bin") == cut) << "the island differs from the final cut";
}

// A carried push lost with a killed syncer is over (`push_dropped`); its progress stayed in the
// weights and goes with the next push of that fragment, which covers the lost push's steps and
// samples too (the syncer weights pushes by samples). So across two syncer kills each fragment's
// pushes that were not dropped cover exactly the island's 600 steps (with push_remaining at the
// end), and the islands end bit-identical to the final cut.
TEST(SyncMultiProcess, CarryingLearnersPushEveryStepAcrossSyncerKills) {
  RunDir run;
  run.syncer_sets = {"sync.carry=true", "sync.islands=2", "sync.checkpoint_every=1"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  constexpr int kSteps = 600;
  const std::vector<std::string> args = {"--carry", "1", "--budget-steps", std::to_string(kSteps), "--step-ms", "6"};
  auto a = run.start_learner("isle-a", 1, "", args), b = run.start_learner("isle-b", 2, "", args);
  ASSERT_TRUE(run.kill_and_restart_syncer(syncer, 6, 20)) << run.logs();
  // The islands train on while the syncer is away and may reach their budget before a second
  // kill's merges come (a busy machine restarts the syncer slowly): then the run has ended.
  const auto second = run.kill_and_restart_syncer(syncer, 12, 20);
  if (!second) {
    ASSERT_FALSE(a->running() && b->running()) << "the second kill's merges never came\n" << run.logs();
    std::cout << "the islands finished before a second kill\n";
  }
  EXPECT_EQ(a->wait(60), 0) << run.logs();
  EXPECT_EQ(b->wait(60), 0) << run.logs();
  EXPECT_EQ(syncer->wait(20), 0) << run.logs();
  std::size_t dropped = 0;
  for (const std::string id : {"isle-a", "isle-b"}) {
    std::map<std::int64_t, std::vector<std::uint64_t>> steps;  // fragment -> inner steps of its pushes
    std::map<std::int64_t, bool> unsent;  // its last push never reached the wire (not in `steps`)
    for (const auto& e : learner_events(run, id)) {
      const std::string ev = e["event"];
      if (!e.contains("fragment")) continue;
      const auto p = e["fragment"].get<std::int64_t>();
      if (ev == "push") {
        steps[p].push_back(e["inner_steps"].get<std::uint64_t>());
        unsent[p] = false;
      }
      if (ev == "push_unsent") unsent[p] = true;
      if (ev == "push_dropped") {
        ++dropped;
        if (unsent[p]) {
          unsent[p] = false;
          continue;
        }
        ASSERT_FALSE(steps[p].empty()) << id << ": a push dropped before any was sent";
        steps[p].pop_back();  // its steps go with the next push
      }
    }
    ASSERT_EQ(steps.size(), 2u) << id;
    for (const auto& [p, v] : steps) {
      std::uint64_t n = 0;
      for (auto x : v) n += x;
      EXPECT_EQ(n, static_cast<std::uint64_t>(kSteps)) << id << ": fragment " << p << "'s pushes cover " << n << " steps";
    }
  }
  std::cout << dropped << " pushes dropped with the killed syncers\n";
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// The exact downlink (sync.downlink = f32) stays available: every merge sends the float32
// fragment, no learner gets an update, and all end bit-identical to the final cut.
TEST(SyncMultiProcess, TheExactFloat32DownlinkStillWorks) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=12", "sync.downlink=f32"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  EXPECT_EQ(syncer->wait(25), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  EXPECT_EQ(expect_continuous(run.tape()), 12u);
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
  EXPECT_EQ(expect_downlink(run, {"isle-a", "isle-b"}, "f32"), 0u);
}

// (b): SIGKILL one learner mid-run: after its timeout the quorum adapts and merges go on with
// two; the restarted learner rejoins from the current global state and is merged again.
TEST(SyncMultiProcess, KilledLearnerQuorumAdaptsAndRejoinCatchesUp) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=3", "sync.budget_outer_steps=44"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2), c = run.start_learner("isle-c", 3);
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    return std::count_if(t.begin(), t.end(), [](const json& r) { return r["event"] == "merge"; }) >= 6;
  }, 15)) << run.logs();
  c->kill9();
  // Quorum adapts: the learner times out and rounds merge with the two that are left.
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    bool timed_out = false;
    for (const auto& r : t) {
      if (r["event"] == "timeout" && learners_of(r).count("isle-c")) timed_out = true;
      if (timed_out && r["event"] == "merge" && learners_of(r) == std::set<std::string>{"isle-a", "isle-b"})
        return true;
    }
    return false;
  }, 10)) << run.logs();
  c = run.start_learner("isle-c", 3, ".second");
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  EXPECT_EQ(c->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 44u);
  // The rejoin, the global versions at that moment, and merges with all three afterwards.
  std::map<std::int64_t, std::uint64_t> at_rejoin, v;
  bool rejoined = false, merged_after = false;
  for (const auto& r : tape) {
    if (r["event"] == "merge") v[r["fragment"].get<std::int64_t>()] = r["version"].get<std::uint64_t>();
    if (r["event"] == "rejoin" && learners_of(r).count("isle-c") && !rejoined) {
      rejoined = true;
      at_rejoin = v;
    }
    if (rejoined && r["event"] == "merge" && learners_of(r).count("isle-c")) merged_after = true;
  }
  EXPECT_TRUE(rejoined);
  EXPECT_TRUE(merged_after) << "the restarted learner was never merged again";
  // Its first applied state per fragment is the syncer's current global version, overwritten (alpha 1).
  std::map<std::int64_t, json> first_applied;
  std::ifstream ev(run.dir / "isle-c.second.events.jsonl");
  for (std::string line; std::getline(ev, line);) {
    const json j = json::parse(line);
    if (j["event"] == "applied" && !first_applied.count(j["fragment"].get<std::int64_t>()))
      first_applied[j["fragment"].get<std::int64_t>()] = j;
  }
  ASSERT_EQ(first_applied.size(), 2u);
  for (const auto& [p, j] : first_applied) {
    EXPECT_EQ(j["version"].get<std::uint64_t>(), at_rejoin[p]) << j.dump();
    EXPECT_EQ(j["alpha"].get<double>(), 1.0);
    EXPECT_GT(j["version"].get<std::uint64_t>(), 0u);
  }
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b", "isle-c"});
  expect_downlink(run, {"isle-a", "isle-b", "isle-c.second"}, "q4");
}

// (c): SIGKILL the syncer (twice): it restarts from its checkpoint on the same port, learners
// reconnect, and the tape's merge versions stay continuous (nothing lost, nothing twice). Each
// merge's checkpoint is written off the I/O thread (a data file, then the manifest naming it),
// so a kill can land between the two: the restarted syncer removes the data file no manifest
// names, and at the end the state directory holds exactly the data files its checkpoint names.
void killed_syncer_restarts_from_checkpoint(const std::vector<std::string>& extra_sets,
                                            const std::vector<std::string>& learner_args = {}) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=40", "sync.checkpoint_every=1"};
  run.syncer_sets.insert(run.syncer_sets.end(), extra_sets.begin(), extra_sets.end());
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1, "", learner_args), b = run.start_learner("isle-b", 2, "", learner_args);
  std::size_t before = 0;
  for (const std::size_t at : {10u, 20u}) {
    const auto merged = run.kill_and_restart_syncer(syncer, at, 15);
    ASSERT_TRUE(merged) << run.logs();
    before = *merged;
  }
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  std::map<std::int64_t, std::uint64_t> last;
  EXPECT_EQ(expect_continuous(tape, &last), 40u);
  EXPECT_GE(before, 20u);
  bool restart = false, reconnected = false;
  for (const auto& r : tape) {
    if (r["event"] == "restart") restart = true;
    if (restart && (r["event"] == "rejoin")) reconnected = true;
  }
  EXPECT_TRUE(restart);
  EXPECT_TRUE(reconnected);
  const json m = run.final_marker();
  EXPECT_EQ(m["versions"][0].get<std::uint64_t>(), last[0]);
  EXPECT_EQ(m["versions"][1].get<std::uint64_t>(), last[1]);
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
  // The restarted syncer sent full fragments on reconnection and updates after that; no learner
  // applied an update on a state it did not hold, nor a version twice.
  expect_downlink(run, {"isle-a", "isle-b"}, "q4");
  // The checkpoint names the final versions and their data files are the only ones left.
  const auto st = ys::load_checkpoint(run.state / "checkpoint.bin");
  ASSERT_EQ(st.fragments.size(), 2u);
  std::set<std::string> named, present;
  for (std::uint32_t p = 0; p < 2; ++p) {
    EXPECT_EQ(st.fragments[p].version, last[p]);
    named.insert(ys::fragment_data_name(p, st.fragments[p].version).filename().string());
  }
  for (const auto& e : fs::directory_iterator(run.state / "fragments")) present.insert(e.path().filename().string());
  EXPECT_EQ(present, named);
}

TEST(SyncMultiProcess, KilledSyncerRestartsFromCheckpoint) { killed_syncer_restarts_from_checkpoint({}); }

// The same with learners that carry their progress across merges (sync.carry): pushes sent on a
// connection the kill ended are taken as merged, the notes of the restarted syncer name its own
// merges, and the run still ends continuous and bit-identical to the final cut.
TEST(SyncMultiProcess, KilledSyncerRestartsFromCheckpointWithCarryingLearners) {
  killed_syncer_restarts_from_checkpoint({"sync.carry=true"}, {"--carry", "1"});
}

// The same with every merge, seal and open on the syncer's worker pool (sync.offload_kb = 0):
// merges landing out of order across fragments, frames sealed off the I/O thread, and the kill
// -9 coming while work is in flight lose nothing and apply nothing twice.
TEST(SyncMultiProcess, KilledSyncerRestartsFromCheckpointWithEverythingOnTheWorkerPool) {
  killed_syncer_restarts_from_checkpoint({"sync.offload_kb=0"});
}

// A learner whose run secret differs is told so at once: it stops with an authentication
// failure instead of retrying for sync.reconnect_budget_s and reporting "no syncer".
TEST(SyncMultiProcess, AWrongSecretIsReportedAsAnAuthenticationFailureAtOnce) {
  RunDir run;
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  const fs::path wrong = run.dir.write("wrong.secret", "another-run-secret-fedcba9876543210\n");
  const auto start = Clock::now();
  std::vector<std::string> a = {SYNC_LEARNER_DRIVER, "--syncer", "127.0.0.1:" + std::to_string(run.port), "--secret",
                                wrong.string(), "--id", "eve", "--seed", "1", "--tensors", kTensors, "--heartbeat",
                                "0.1", "--learner-timeout", "0.8", "--grace-max", "1.0", "--round-deadline", "2.0",
                                "--reconnect-budget", "15", "--step-ms", "4"};
  Proc eve(a, run.dir / "eve.log");
  EXPECT_EQ(eve.wait(10), 4) << yeto::test::read_text(run.dir / "eve.log");  // no global state
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0) << "retried instead of stopping";
  const std::string log = yeto::test::read_text(run.dir / "eve.log");
  EXPECT_NE(log.find("authentication failed: the syncer at 127.0.0.1:" + std::to_string(run.port) +
                     " holds another run secret than this learner"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("not retrying"), std::string::npos) << log;
  EXPECT_EQ(log.find("giving up"), std::string::npos) << log;
  bool taped = false;
  for (const auto& r : run.tape())
    if (r["event"] == "reject" && r["reason"] == "authentication failed (wrong run secret)") taped = true;
  EXPECT_TRUE(taped);
  EXPECT_TRUE(syncer->running());
}

// ---------------------------------------------------------------- one syncer per state

TEST(SyncMultiProcess, ASecondSyncerOnTheSameStateIsRefusedAndChangesNothing) {
  RunDir run;
  auto first = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  // The port file is written before the start-up records (limits, listen): wait for them, so
  // the snapshot is of a syncer that has settled.
  ASSERT_TRUE(run.wait_tape(
      [](const std::vector<json>& t) {
        return std::any_of(t.begin(), t.end(), [](const json& r) { return r["event"] == "listen"; });
      },
      15))
      << run.logs();
  const auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(run.state))
      files[e.path().filename().string()] = yeto::test::read_text(e.path());
    return files;
  };
  const auto before = snapshot();
  const std::string holder =
      "pid " + std::to_string(first->pid()) + ", listening on 127.0.0.1:" + std::to_string(run.port);
  ASSERT_TRUE(before.count("syncer.lock")) << run.logs();
  EXPECT_EQ(before.at("syncer.lock"), holder + "\n");
  // On another port and on the same one: refused naming the holder, and no file of the live
  // state changes (tape, checkpoint, port, lock).
  for (const std::uint16_t listen : {std::uint16_t{0}, run.port}) {
    auto argv = run.syncer_argv(listen);
    const auto r = yeto::test::run_host(std::vector<std::string>(argv.begin() + 1, argv.end()));
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_NE(r.all().find("belongs to a running syncer (" + holder), std::string::npos) << r.all();
    EXPECT_EQ(snapshot(), before);
  }
  EXPECT_TRUE(first->running());
  // kill -9 drops the lock with the process: the next syncer takes the state over.
  first->kill9();
  auto second = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  EXPECT_EQ(yeto::test::read_text(run.state / "syncer.lock"),
            "pid " + std::to_string(second->pid()) + ", listening on 127.0.0.1:" + std::to_string(run.port) + "\n");
}

// ---------------------------------------------------------------- (d) hostile peers


TEST(SyncMultiProcess, HostilePeersAreRejectedAndOthersKeepTraining) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=36"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    return std::count_if(t.begin(), t.end(), [](const json& r) { return r["event"] == "merge"; }) >= 4;
  }, 15)) << run.logs();
  const std::uint64_t run_id = ys::run_id_from_name("yeto");
  const std::size_t merges_before = run.merges();

  {  // garbage bytes
    const int fd = dial(run.port);
    ASSERT_GE(fd, 0);
    send_all(fd, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  {  // a truncated frame, then the peer goes away
    const int fd = dial(run.port);
    const std::string f = ys::encode_frame(ys::MsgType::hello, run_id, std::string(100, 'h'));
    send_all(fd, f.substr(0, 40));
    ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  {  // an oversized length
    const int fd = dial(run.port);
    std::string f = ys::encode_frame(ys::MsgType::push, run_id, "x");
    const std::uint32_t huge = 0x7FFFFFFFu;
    std::memcpy(f.data() + 16, &huge, 4);
    send_all(fd, f.substr(0, ys::kHeaderBytes));
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  {  // another run
    const int fd = dial(run.port);
    send_all(fd, ys::encode_frame(ys::MsgType::hello, ys::run_id_from_name("other-run"), "x"));
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  const auto layout = ys::build_layout({{"w1", 300}, {"w2", 200}, {"w3", 100}, {"w4", 50}}, 2,
                                       ys::FragmentPattern::binpack);
  std::uint64_t base0 = 0;  // fragment 0's version at mallory's welcome: its pushes are never too stale
  auto handshake = [&](const std::string& secret, const std::string& id, int& fd, std::optional<ys::Session>& s) {
    fd = dial(run.port);
    ys::FrameDecoder d(run_id, 1 << 20);
    auto ch = read_frame(fd, d);
    if (!ch) return false;
    const auto c = ys::Challenge::decode(ch->payload);
    ys::Hello h;
    h.learner_id = id;
    h.client_nonce = ys::random_nonce();
    h.layout_fp = layout.fingerprint();
    send_all(fd, h.seal(ys::run_key_from_secret(secret), run_id, c.server_nonce));
    auto w = read_frame(fd, d);
    if (!w || w->type != ys::MsgType::welcome) return false;
    base0 = ys::Welcome::decode(w->payload).versions.at(0);
    s.emplace(ys::session_key(ys::run_key_from_secret(secret), c.server_nonce, h.client_nonce), 'L', 'S');
    return true;
  };
  {  // a wrong secret
    int fd = -1;
    std::optional<ys::Session> s;
    EXPECT_FALSE(handshake("a-wrong-secret-0000000000", "mallory", fd, s));
    ::close(fd);
  }
  {  // an authenticated peer sending bad deltas: rejected one by one, the connection stays
    int fd = -1;
    std::optional<ys::Session> s;
    ASSERT_TRUE(handshake(kSecret, "mallory", fd, s));
    const std::uint64_t n0 = layout.fragments[0].numel;
    std::vector<float> nan(n0, 0.01f);
    nan[3] = NAN;
    send_all(fd, s->seal(ys::MsgType::push, run_id, ys::Push::from_delta_f32(0, base0, 8, 10, nan).encode()));
    std::vector<float> inf(n0, 0.01f);
    inf[7] = INFINITY;
    send_all(fd, s->seal(ys::MsgType::push, run_id, ys::Push::from_delta_f32(0, base0, 8, 10, inf).encode()));
    auto q4 = ys::Push::from_delta_q4(0, base0, 8, 10, std::vector<float>(n0, 0.01f), 32);
    const float bad_scale = NAN;
    std::memcpy(q4.body.data(), &bad_scale, 4);
    send_all(fd, s->seal(ys::MsgType::push, run_id, q4.encode()));
    send_all(fd, s->seal(ys::MsgType::push, run_id,
                         ys::Push::from_delta_f32(0, base0, 8, 10, std::vector<float>(n0 + 1, 0.0f)).encode()));
    send_all(fd, s->seal(ys::MsgType::push, run_id,
                         ys::Push::from_delta_f32(7, 0, 8, 10, std::vector<float>(4, 0.0f)).encode()));
    send_all(fd, s->seal(ys::MsgType::leave, run_id, ""));
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 36u);
  EXPECT_GT(run.merges(), merges_before);
  std::vector<std::string> reasons;
  for (const auto& r : tape)
    if (r["event"] == "reject") reasons.push_back(r["reason"].get<std::string>());
  auto has = [&](const std::string& what) {
    return std::any_of(reasons.begin(), reasons.end(), [&](const std::string& r) { return r.find(what) != std::string::npos; });
  };
  std::string all;
  for (const auto& r : reasons) all += r + "\n";
  EXPECT_TRUE(has("bad magic")) << all;
  EXPECT_TRUE(has("truncated")) << all;
  EXPECT_TRUE(has("exceeds the cap")) << all;
  EXPECT_TRUE(has("another run")) << all;
  EXPECT_TRUE(has("authentication failed")) << all;
  EXPECT_TRUE(has("NaN or Inf")) << all;
  EXPECT_TRUE(has("invalid delta: push: q4: block scale")) << all;
  EXPECT_TRUE(has("wrong shape")) << all;
  EXPECT_TRUE(has("does not exist")) << all;
  // Mallory's pushes never reached a merge.
  for (const auto& r : tape)
    if (r["event"] == "merge") {
      EXPECT_FALSE(learners_of(r).count("mallory")) << r.dump();
    }
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// The command line: inconsistent timeouts and a missing secret are usage errors that name
// the problem; the syncer never starts serving.
TEST(SyncerCommand, ValidatesConfigurationAtStartUp) {
  yeto::test::TempDir dir;
  const auto secret = dir.write("run.secret", kSecret);
  auto r = yeto::test::run_host({"syncer", "--listen", "127.0.0.1:0", "--run-secret-file", secret.string(),
                                 "--state-dir", (dir / "s").string(), "--set", "sync.grace_max_s=500"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("sync.grace_max_s = 500 must be shorter than sync.round_deadline_s"), std::string::npos)
      << r.all();
  r = yeto::test::run_host({"syncer", "--listen", "127.0.0.1:0", "--state-dir", (dir / "s").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--run-secret-file"), std::string::npos) << r.all();
  r = yeto::test::run_host({"syncer", "--listen", "127.0.0.1:0", "--run-secret-file", (dir / "nope").string(),
                            "--state-dir", (dir / "s").string()});
  EXPECT_EQ(r.exit_code, 31) << r.all();
  const auto short_secret = dir.write("short.secret", "abc");
  r = yeto::test::run_host({"syncer", "--listen", "127.0.0.1:0", "--run-secret-file", short_secret.string(),
                            "--state-dir", (dir / "s").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("shorter than 16 bytes"), std::string::npos) << r.all();
  r = yeto::test::run_host({"syncer", "--listen", "nonsense", "--run-secret-file", secret.string(), "--state-dir",
                            (dir / "s").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
}

// ---------------------------------------------------------------- an on-path attacker

namespace {

// A capturing TCP proxy on 127.0.0.1, run by a thread of the test: every connection it
// accepts is forwarded to the syncer, and every byte of both directions is recorded. An
// optional `mangle` sees each complete learner→syncer frame (connection number and frame
// number, both from 0; the hello is frame 0) and returns the bytes to forward in its place,
// so the test can replay, hold back or reorder sealed frames. `blackout(conn, frame, ms)`
// drops everything the syncer sends on connection `conn` from the learner's frame `frame` on,
// then cuts that connection `ms` later: the learner misses what was sent meanwhile.
class CapturingProxy {
 public:
  void blackout(int conn, int frame, int ms) {
    blackout_conn_ = conn;
    blackout_frame_ = frame;
    blackout_ms_ = ms;
  }
  using Mangle = std::function<std::string(int conn, int frame, const std::string& bytes)>;
  CapturingProxy(std::uint16_t target, std::uint64_t run_id, Mangle mangle = {})
      : target_(target), run_id_(run_id), mangle_(std::move(mangle)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(listen_fd_, 8) != 0) return;
    socklen_t len = sizeof sa;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~CapturingProxy() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : pumps_) t.join();
    ::close(listen_fd_);
  }
  std::uint16_t port() const { return port_; }
  int connections() const { return conns_; }
  std::string to_syncer() const {
    std::lock_guard lk(mu_);
    return to_syncer_;
  }
  std::string to_learner() const {
    std::lock_guard lk(mu_);
    return to_learner_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int learner = accept(listen_fd_, nullptr, nullptr);
      if (learner < 0) continue;
      const int syncer = dial(target_);
      if (syncer < 0) {
        ::close(learner);
        continue;
      }
      pumps_.emplace_back([this, learner, syncer, n = conns_++] { pump(n, learner, syncer); });
    }
  }
  // Forwards both directions until either side closes, then closes both.
  void pump(int conn, int learner, int syncer) {
    ys::FrameDecoder dec(run_id_, std::size_t{1} << 30);
    int frame = 0;
    char buf[1 << 16];
    bool open = true;
    std::optional<Clock::time_point> dark_since;
    while (open && !stop_) {
      if (!dark_since && conn == blackout_conn_ && frame >= blackout_frame_) dark_since = Clock::now();
      if (dark_since && Clock::now() - *dark_since > std::chrono::milliseconds(blackout_ms_)) break;
      pollfd p[2] = {{learner, POLLIN, 0}, {syncer, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = ::recv(learner, buf, sizeof buf, 0);
        if (n <= 0) break;
        std::string out;
        try {
          dec.feed(buf, static_cast<std::size_t>(n));
          while (auto f = dec.next()) {
            std::string bytes = f->header + f->payload;
            std::lock_guard lk(mu_);
            out += mangle_ ? mangle_(conn, frame, bytes) : bytes;
            ++frame;
          }
        } catch (const ys::ProtocolError&) {  // not a frame stream: pass the rest through as is
          out.append(buf, static_cast<std::size_t>(n));
        }
        {
          std::lock_guard lk(mu_);
          to_syncer_ += out;
        }
        send_all(syncer, out);
      }
      if (p[1].revents) {
        const ssize_t n = ::recv(syncer, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (dark_since) continue;  // lost on the way
        {
          std::lock_guard lk(mu_);
          to_learner_.append(buf, static_cast<std::size_t>(n));
        }
        send_all(learner, std::string(buf, static_cast<std::size_t>(n)));
      }
    }
    ::shutdown(learner, SHUT_RDWR);
    ::shutdown(syncer, SHUT_RDWR);
    ::close(learner);
    ::close(syncer);
  }

  std::uint16_t target_;
  std::uint64_t run_id_;
  Mangle mangle_;
  std::atomic<int> blackout_conn_{-1}, blackout_frame_{0}, blackout_ms_{0};
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> conns_{0};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
  mutable std::mutex mu_;
  std::string to_syncer_, to_learner_;
};

}  // namespace

// Confidentiality against a capturing proxy: a whole small run goes through it, and neither
// direction carries any 256-byte piece of the final cut's tensors nor the learner's id in clear.
TEST(SyncMultiProcess, ACapturingProxySeesNoTensorBytesNorTheLearnerId) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=12"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  const std::string id = "isle-confidential-7f3a";
  std::string to_syncer, to_learner;
  {
    CapturingProxy proxy(run.port, ys::run_id_from_name("yeto"));
    ASSERT_NE(proxy.port(), 0);
    const std::uint16_t syncer_port = run.port;
    run.port = proxy.port();  // the learner dials the proxy
    auto a = run.start_learner(id, 1);
    run.port = syncer_port;
    EXPECT_EQ(syncer->wait(25), 0) << run.logs();
    EXPECT_EQ(a->wait(10), 0) << run.logs();
    to_syncer = proxy.to_syncer();
    to_learner = proxy.to_learner();
  }
  EXPECT_EQ(expect_continuous(run.tape()), 12u);
  expect_bit_identical_to_final_cut(run, {id});
  const std::string cut = run.final_cut();
  ASSERT_GE(cut.size(), 256u * 8);
  EXPECT_GT(to_learner.size(), cut.size()) << "the final cut did not go through the proxy";
  for (std::size_t off = 0; off + 256 <= cut.size(); off += 256) {
    const std::string chunk = cut.substr(off, 256);
    EXPECT_EQ(to_learner.find(chunk), std::string::npos) << "final cut bytes " << off << ".. readable syncer→learner";
    EXPECT_EQ(to_syncer.find(chunk), std::string::npos) << "final cut bytes " << off << ".. readable learner→syncer";
  }
  EXPECT_EQ(to_syncer.find(id), std::string::npos) << "the learner id crossed the wire in clear";
  EXPECT_EQ(to_learner.find(id), std::string::npos) << "the learner id crossed the wire in clear";
}

// An on-path attacker that replays a captured sealed learner→syncer frame (first connection)
// and swaps two of them (second connection): the syncer refuses each at once as failing
// authentication, the learner reconnects, and the merges stay continuous to the final cut.
TEST(SyncMultiProcess, ReplayedAndReorderedSealedFramesAreRefused) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=16"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  const std::string id = "isle-r";
  std::string held;  // frame 2 of the second connection, sent after frame 3
  int replayed = 0, swapped = 0;
  auto mangle = [&](int conn, int frame, const std::string& bytes) -> std::string {
    if (conn == 0 && frame == 3) {
      ++replayed;
      return bytes + bytes;
    }
    if (conn == 1 && frame == 2) {
      held = bytes;
      return {};
    }
    if (conn == 1 && frame == 3) {
      ++swapped;
      return bytes + held;
    }
    return bytes;
  };
  {
    CapturingProxy proxy(run.port, ys::run_id_from_name("yeto"), mangle);
    ASSERT_NE(proxy.port(), 0);
    const std::uint16_t syncer_port = run.port;
    run.port = proxy.port();
    auto a = run.start_learner(id, 1);
    run.port = syncer_port;
    EXPECT_EQ(syncer->wait(30), 0) << run.logs();
    EXPECT_EQ(a->wait(10), 0) << run.logs();
    EXPECT_GE(proxy.connections(), 3) << run.logs();
  }
  EXPECT_EQ(replayed, 1);
  EXPECT_EQ(swapped, 1);
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 16u);
  std::size_t refused = 0;
  std::string all;
  for (const auto& r : tape)
    if (r["event"] == "reject") {
      const std::string why = r["reason"].get<std::string>();
      all += why + "\n";
      if (learners_of(r).count(id) &&
          (why.find("authentication") != std::string::npos || why.find("decrypt") != std::string::npos))
        ++refused;
    }
  EXPECT_EQ(refused, 2u) << all;
  expect_bit_identical_to_final_cut(run, {id});
}

// A learner at the protocol level: a raw socket to the syncer, past the challenge, `hello` (as
// learner `id`, with the layout the test learners train), `welcome` and, unless the welcome asks
// for `init`, its `holds` (of nothing), with its session.
struct RawLearner {
  const std::uint64_t run_id = ys::run_id_from_name("yeto");
  const ys::Layout layout = ys::build_layout({{"w1", 300}, {"w2", 200}, {"w3", 100}, {"w4", 50}}, 2,
                                             ys::FragmentPattern::binpack);
  int fd = -1;
  ys::FrameDecoder decoder{run_id, 1 << 20};
  std::optional<ys::Session> session;
  ys::Welcome welcome;

  ~RawLearner() {
    if (fd >= 0) ::close(fd);
  }
  void connect(int port, const std::string& id = "raw") {
    const ys::Key key = ys::run_key_from_secret(kSecret);
    fd = dial(port);
    ASSERT_GE(fd, 0);
    const auto ch = read_frame(fd, decoder);
    ASSERT_TRUE(ch);
    const auto server = ys::Challenge::decode(ch->payload).server_nonce;
    ys::Hello h;
    h.learner_id = id;
    h.client_nonce = ys::random_nonce();
    h.layout_fp = layout.fingerprint();
    send_all(fd, h.seal(key, run_id, server));
    const auto w = read_frame(fd, decoder);
    ASSERT_TRUE(w && w->type == ys::MsgType::welcome);
    welcome = ys::Welcome::decode(w->payload);
    session.emplace(ys::session_key(key, server, h.client_nonce), 'L', 'S');
    if (welcome.init == ys::InitAsk::send) return;
    // It claims to hold nothing, so every fragment follows in full.
    ys::Holds nothing;
    nothing.claims.assign(layout.fragments.size(), ys::FragmentClaim{ys::kNoClaim, {}});
    send_all(fd, session->seal(ys::MsgType::holds, run_id, nothing.encode()));
  }
  // A sealed `init` of the test layout with these values (every tensor, in order).
  std::string init_frame(const std::vector<float>& values) {
    ys::Init in;
    in.pattern = layout.pattern;
    in.fragments = static_cast<std::uint32_t>(layout.fragments.size());
    in.tensors = layout.tensors;
    in.params = values;
    return session->seal(ys::MsgType::init, run_id, in.encode());
  }
  void leave() {
    send_all(fd, session->seal(ys::MsgType::leave, run_id, ""));
    ::close(fd);
    fd = -1;
  }
};

// A learner at the protocol level (a raw socket): after its `holds` it gets every fragment in full,
// then q4 updates, each on top of exactly the version it holds and reproducing the syncer's CRC.
// A push refused as too stale is answered with the ack alone: the current version is already on
// its way, so no second copy of the fragment is queued.
TEST(SyncMultiProcess, ARawLearnerAppliesEveryUpdateOnItsBaseAndGetsNoResendWhenStale) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=120", "sync.max_staleness=2"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1);
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    return std::count_if(t.begin(), t.end(), [](const json& r) { return r["event"] == "merge"; }) >= 2;
  }, 15)) << run.logs();
  RawLearner raw;
  ASSERT_NO_FATAL_FAILURE(raw.connect(run.port));
  const std::uint64_t run_id = raw.run_id;
  const int fd = raw.fd;
  ys::FrameDecoder& d = raw.decoder;
  ys::Session& s = *raw.session;
  std::map<std::uint32_t, ys::FragmentMsg> held;
  int fragments = 0, updates = 0, fragments_after_stale = 0;
  bool stale_sent = false;
  std::optional<Clock::time_point> stale_acked;
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < end && !(stale_acked && Clock::now() - *stale_acked > std::chrono::milliseconds(400))) {
    auto f = read_frame(fd, d);
    ASSERT_TRUE(f) << run.logs();
    const ys::MsgType type = f->type;
    const std::string payload = s.open(std::move(*f));
    if (type == ys::MsgType::fragment) {
      auto fm = ys::FragmentMsg::decode(payload);
      ++fragments;
      if (stale_acked) ++fragments_after_stale;
      held[fm.fragment] = std::move(fm);
    } else if (type == ys::MsgType::update) {
      const auto u = ys::UpdateMsg::decode(payload);
      ASSERT_TRUE(held.count(u.fragment)) << "an update before the fragment it applies to";
      auto& mine = held[u.fragment];
      ASSERT_EQ(u.base_version, mine.version) << "an update on a version this connection does not hold";
      u.apply_to(mine.data);
      mine.version = u.version;
      EXPECT_EQ(ys::public_crc(mine.data), u.crc) << "update to version " << u.version;
      ++updates;
    } else if (type == ys::MsgType::push_ack) {
      if (ys::PushAck::decode(payload).status == ys::PushStatus::too_stale) stale_acked = Clock::now();
    } else if (type == ys::MsgType::final_cut) {
      break;
    }
    if (!stale_sent && held.count(0) && held[0].version >= 4 && updates >= 4) {
      // Based on version 0: more than sync.max_staleness = 2 merges behind.
      send_all(fd, s.seal(ys::MsgType::push, run_id,
                          ys::Push::from_delta_f32(0, 0, 8, 10, std::vector<float>(held[0].data.size(), 0.0f)).encode()));
      stale_sent = true;
    }
  }
  EXPECT_TRUE(stale_acked) << run.logs();
  EXPECT_EQ(fragments, 2) << "only the catch-up after holds is a full fragment";
  EXPECT_EQ(fragments_after_stale, 0) << "the fragment was sent again after a too-stale push";
  EXPECT_GE(updates, 4);
  raw.leave();
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(expect_continuous(run.tape()), 120u);
  expect_bit_identical_to_final_cut(run, {"isle-a"});
}

// A connection's bulk frame is opened on a frame worker while the syncer goes on reading: a push
// of a small fragment that a learner wrote right behind its push of a large one (here one write
// holds both: an f32 push of fragment 0 over sync.offload_kb, then a q4 push of fragment 1 under
// it) is handled, and taped, before the large one, so a small fragment's round never waits for a
// large push's decryption and decoding. Handled in wire order, fragment 0 would come first.
TEST(SyncMultiProcess, ASmallPushIsHandledWhileTheLargePushBeforeItIsOpened) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=30", "sync.offload_kb=1"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1);
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    return std::count_if(t.begin(), t.end(), [](const json& r) { return r["event"] == "merge"; }) >= 2;
  }, 15)) << run.logs();
  RawLearner raw;
  ASSERT_NO_FATAL_FAILURE(raw.connect(run.port));
  const std::uint64_t run_id = raw.run_id;
  const int fd = raw.fd;
  ys::FrameDecoder& d = raw.decoder;
  const ys::Layout& layout = raw.layout;
  ys::Session& s = *raw.session;
  std::map<std::uint32_t, std::uint64_t> version;
  while (version.size() < 2) {
    auto f = read_frame(fd, d);
    ASSERT_TRUE(f) << run.logs();
    const ys::MsgType type = f->type;
    const std::string payload = s.open(std::move(*f));
    if (type == ys::MsgType::fragment) {
      const auto fm = ys::FragmentMsg::decode(payload);
      version[fm.fragment] = fm.version;
    }
  }
  ASSERT_EQ(layout.fragments[0].numel, 350u);
  const std::string large = s.seal(ys::MsgType::push, run_id,
                                   ys::Push::from_delta_f32(0, version[0], 8, 10, std::vector<float>(350, 0.0f)).encode());
  const std::string small = s.seal(ys::MsgType::push, run_id,
                                   ys::Push::from_delta_q4(1, version[1], 8, 10, std::vector<float>(300, 0.0f), 64).encode());
  ASSERT_GE(large.size(), 1024u + ys::kHeaderBytes);
  ASSERT_LT(small.size(), 1024u);
  send_all(fd, large + small);
  ASSERT_TRUE(run.wait_tape([](const auto& t) {
    return std::count_if(t.begin(), t.end(), [](const json& r) {
             return r["event"] == "push" && r["learners"][0] == "raw";
           }) >= 2;
  }, 15)) << run.logs();
  std::vector<std::int64_t> order;
  for (const auto& r : run.tape())
    if (r["event"] == "push" && r["learners"][0] == "raw") order.push_back(r["fragment"].get<std::int64_t>());
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 0}));
  raw.leave();
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(expect_continuous(run.tape()), 30u);
  expect_bit_identical_to_final_cut(run, {"isle-a"});
}

// A learner that misses updates (everything the syncer sends it is lost for a while, then its
// connection breaks) gets the full fragments when it reconnects, is given updates again after
// that, and ends bit-identical to the final cut like the learner that missed nothing.
TEST(SyncMultiProcess, ALearnerThatMissedUpdatesCatchesUpFromTheFullFragment) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=40"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1);
  {
    CapturingProxy proxy(run.port, ys::run_id_from_name("yeto"));
    ASSERT_NE(proxy.port(), 0);
    proxy.blackout(0, 12, 700);
    const std::uint16_t syncer_port = run.port;
    run.port = proxy.port();
    auto b = run.start_learner("isle-b", 2);
    run.port = syncer_port;
    EXPECT_EQ(syncer->wait(30), 0) << run.logs();
    EXPECT_EQ(a->wait(10), 0) << run.logs();
    EXPECT_EQ(b->wait(10), 0) << run.logs();
    EXPECT_GE(proxy.connections(), 2) << run.logs();
  }
  EXPECT_EQ(expect_continuous(run.tape()), 40u);
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
  expect_downlink(run, {"isle-a", "isle-b"}, "q4");
  // isle-b's second connection started from full fragments that skipped versions it never got.
  std::map<std::int64_t, std::uint64_t> last;
  int connects = 0;
  bool skipped = false;
  std::uint64_t fragments = 0, updates = 0, held = 0;
  for (const auto& e : learner_events(run, "isle-b")) {
    if (e["event"] == "connected") ++connects;
    if (e["event"] == "applied" && connects >= 2) {
      const auto p = e["fragment"].get<std::int64_t>();
      if (e["version"].get<std::uint64_t>() > last[p] + 1) skipped = true;
    }
    if (e["event"] == "applied" && connects < 2) last[e["fragment"].get<std::int64_t>()] = e["version"];
    if (e["event"] == "closed") {
      fragments = e["fragments_received"];
      updates = e["updates_received"];
      held = e["fragments_held"];
    }
  }
  EXPECT_GE(connects, 2);
  EXPECT_TRUE(skipped) << "isle-b missed no version";
  // Its first connection may start from what it holds (the initial state, when it joined
  // before the first merge); the second, behind by the updates it missed, gets them in full.
  EXPECT_GE(fragments, 2u) << "the reconnection's catch-up";
  EXPECT_GE(fragments + held, 4u) << "two connections, two fragments each";
  EXPECT_GT(updates, 0u);
}

// Merges average: with the default quorum (1) and learners at equal speed, the adaptive grace
// window learns how far apart their pushes arrive (including pushes that arrive after a merge
// went ahead without them), so at least 80% of merges include every live learner.
// With the default quorum (1) and the adaptive grace window, islands at equal speed are merged
// together: at least 80 % of the merges hold every learner, and the merge record's
// `every_active` says so.
void at_equal_speed_most_merges_include_every_learner(const std::vector<std::string>& ids) {
  RunDir run;
  run.syncer_sets = {"sync.budget_outer_steps=60"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  std::vector<std::unique_ptr<Proc>> learners;
  for (std::size_t i = 0; i < ids.size(); ++i) learners.push_back(run.start_learner(ids[i], static_cast<int>(i + 1)));
  EXPECT_EQ(syncer->wait(60), 0) << run.logs();
  for (auto& l : learners) EXPECT_EQ(l->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 60u);
  std::size_t all = 0, merges = 0, every_active = 0;
  std::string reasons;
  for (const auto& r : tape)
    if (r["event"] == "merge") {
      ++merges;
      if (learners_of(r).size() == ids.size()) ++all;
      if (r.value("every_active", false)) ++every_active;
      if (learners_of(r).size() == ids.size()) {
        EXPECT_TRUE(r.value("every_active", false)) << r.dump();
      }
      reasons += std::to_string(learners_of(r).size()) + ":" + r["reason"].get<std::string>() + " ";
    }
  std::printf("%zu learners: %zu of %zu merges include every learner, %zu every active one\n", ids.size(), all,
              merges, every_active);
  EXPECT_GE(all * 10, merges * 8) << reasons;
  EXPECT_GE(every_active, all);
  expect_bit_identical_to_final_cut(run, ids);
}

TEST(SyncMultiProcess, AtEqualSpeedMostMergesIncludeEveryLearner) {
  at_equal_speed_most_merges_include_every_learner({"isle-a", "isle-b", "isle-c"});
}

TEST(SyncMultiProcess, AtEqualSpeedMostMergesIncludeBothLearners) {
  at_equal_speed_most_merges_include_every_learner({"isle-a", "isle-b"});
}

// ---- The run's initial state: while the syncer has none, it asks one learner at a time for `init`.

namespace {

std::size_t count_events(const std::vector<json>& tape, const std::string& event) {
  return static_cast<std::size_t>(
      std::count_if(tape.begin(), tape.end(), [&](const json& r) { return r["event"] == event; }));
}

// The `init` frames the learner processes wrote, from their own traffic counters (each life's
// `closed` event) and their `init_sent` events, which must agree.
std::uint64_t inits_sent(const RunDir& run, const std::vector<std::string>& lives) {
  std::uint64_t frames = 0, events = 0;
  for (const auto& life : lives)
    for (const auto& e : learner_events(run, life)) {
      if (e["event"] == "init_sent") {
        ++events;
        EXPECT_GT(e["bytes"].get<std::uint64_t>(), 0u) << life;
      }
      if (e["event"] == "closed") frames += e.value("inits_sent", std::uint64_t{0});
    }
  EXPECT_EQ(frames, events);
  return frames;
}

// Polls a learner's events until one satisfies `pred` (bounded).
bool wait_event(const RunDir& run, const std::string& life, const std::function<bool(const json&)>& pred,
                double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (const auto& e : learner_events(run, life))
      if (pred(e)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// The tape's init_asked records as "learner:by[:instead_of:reason]".
std::vector<std::string> init_asks(const std::vector<json>& tape) {
  std::vector<std::string> v;
  for (const auto& r : tape)
    if (r["event"] == "init_asked") {
      std::string s = r["learners"][0].get<std::string>() + ":" + r["by"].get<std::string>();
      if (r.contains("instead_of")) s += ":" + r["instead_of"].get<std::string>() + ":" + r["reason"].get<std::string>();
      v.push_back(s);
    }
  return v;
}

// A learner process at the protocol level that is asked for `init` and dies with it: fork()ed, it
// completes the handshake, checks that its welcome asks it for `init`, writes `init_fraction` of
// its sealed `init` frame (0: nothing; less than 1: the syncer has a partial frame), tells the
// test through a pipe and waits for the SIGKILL.
class AskedLearnerProcess {
 public:
  AskedLearnerProcess(std::uint16_t port, const std::string& id, double init_fraction) {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      ::_exit(child(port, id, init_fraction, p[1]));
    }
    ::close(p[1]);
    ready_fd_ = p[0];
  }
  ~AskedLearnerProcess() {
    kill9();
    if (ready_fd_ >= 0) ::close(ready_fd_);
  }
  // True once the child was welcomed with InitAsk::send and wrote its share of `init`.
  bool ready(int ms) {
    pollfd pf{ready_fd_, POLLIN, 0};
    char c = 0;
    return ready_fd_ >= 0 && ::poll(&pf, 1, ms) == 1 && ::read(ready_fd_, &c, 1) == 1 && c == 'k';
  }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

 private:
  static int child(std::uint16_t port, const std::string& id, double fraction, int ready) {
    try {
      RawLearner raw;
      raw.connect(port, id);
      if (!raw.session || raw.welcome.init != ys::InitAsk::send) return 3;
      std::vector<float> values(raw.layout.total_numel());
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.1f * static_cast<float>(i)) + 1.5f;
      const std::string frame = raw.init_frame(values);
      send_all(raw.fd, frame.substr(0, static_cast<std::size_t>(static_cast<double>(frame.size()) * fraction)));
      const char ok = 'k';
      if (::write(ready, &ok, 1) != 1) return 4;
      for (;;) ::pause();
    } catch (...) {
      return 5;
    }
  }
  pid_t pid_ = -1;
  int ready_fd_ = -1;
};

std::vector<std::string> isle_ids(std::size_t n) {
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(std::string("isle-") + static_cast<char>('a' + i));
  return ids;
}

// Learners that start at the same moment on a fresh syncer: exactly one `init` crosses the wire
// (the learners' own counters and the tape agree), the others are told the state is pending or
// join after it exists, and all end bit-identical to the final cut.
void learners_starting_at_once_upload_one_init(std::size_t n) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=" + std::to_string(n), "sync.budget_outer_steps=12"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  const auto ids = isle_ids(n);
  std::vector<std::unique_ptr<Proc>> learners;
  for (std::size_t i = 0; i < n; ++i) learners.push_back(run.start_learner(ids[i], static_cast<int>(i + 1)));
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  for (auto& l : learners) EXPECT_EQ(l->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(count_events(tape, "init"), 1u);
  EXPECT_EQ(count_events(tape, "init_ignored"), 0u) << "a second learner uploaded the initial state";
  EXPECT_EQ(init_asks(tape).size(), 1u);
  EXPECT_EQ(inits_sent(run, ids), 1u);
  std::size_t pending = 0;
  for (const auto& id : ids)
    for (const auto& e : learner_events(run, id))
      if (e["event"] == "connected" && e["init"] == "pending") ++pending;
  std::printf("%zu learners at once: %zu welcomed while the state was pending\n", n, pending);
  EXPECT_EQ(expect_continuous(tape), 12u);
  expect_bit_identical_to_final_cut(run, ids);
  expect_downlink(run, ids, "q4");
}

TEST(SyncInit, TwoLearnersStartingAtOnceUploadOneInit) { learners_starting_at_once_upload_one_init(2); }
TEST(SyncInit, ThreeLearnersStartingAtOnceUploadOneInit) { learners_starting_at_once_upload_one_init(3); }

// The learner asked for `init` is killed (SIGKILL) before its `init` is complete, while n learners
// welcomed after it wait with the state pending (none uploads anything): the oldest of them is
// asked (`init_request`), the run gets its state from that one `init` and completes; nothing is
// applied twice. init_fraction 0: killed before sending a byte of it; 0.5: mid-frame.
void killed_asked_learner_is_replaced(std::size_t n, double init_fraction) {
  RunDir run;
  // The asked learner sends no heartbeats: a learner timeout long enough for the others to start
  // on a loaded machine keeps it asked (not silent) until it is killed.
  run.syncer_sets = {"sync.quorum=" + std::to_string(n), "sync.budget_outer_steps=12", "sync.learner_timeout_s=3",
                     "sync.grace_max_s=4", "sync.round_deadline_s=5"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  AskedLearnerProcess gate(run.port, "gate", init_fraction);
  ASSERT_TRUE(gate.ready(10000)) << "the first learner was not asked for init\n" << run.logs();
  const auto ids = isle_ids(n);
  std::vector<std::unique_ptr<Proc>> learners;
  for (std::size_t i = 0; i < n; ++i) learners.push_back(run.start_learner(ids[i], static_cast<int>(i + 1)));
  for (const auto& id : ids)
    ASSERT_TRUE(wait_event(run, id, [](const json& e) { return e["event"] == "connected"; }, 10)) << run.logs();
  for (const auto& id : ids)
    for (const auto& e : learner_events(run, id))
      if (e["event"] == "connected") {
        EXPECT_EQ(e["init"], "pending") << id;
      }
  EXPECT_EQ(count_events(run.tape(), "init"), 0u);
  gate.kill9();
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  for (auto& l : learners) EXPECT_EQ(l->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(count_events(tape, "init"), 1u);
  EXPECT_EQ(count_events(tape, "init_ignored"), 0u);
  const auto asks = init_asks(tape);
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(asks[0], "gate:welcome");
  // One of the waiting learners is asked, and its `init` is the run's state.
  std::string asked;
  for (const auto& r : tape)
    if (r["event"] == "init_asked" && r["by"] == "request") asked = r["learners"][0];
  EXPECT_EQ(asks[1], asked + ":request:gate:disconnected");
  EXPECT_NE(std::find(ids.begin(), ids.end(), asked), ids.end()) << asked;
  for (const auto& r : tape)
    if (r["event"] == "init") {
      EXPECT_EQ(learners_of(r), std::set<std::string>{asked});
    }
  if (init_fraction > 0) {
    bool truncated = false;
    for (const auto& r : tape)
      if (r["event"] == "reject" && learners_of(r).count("gate") &&
          r["reason"].get<std::string>().find("truncated frame") != std::string::npos)
        truncated = true;
    EXPECT_TRUE(truncated) << "the partial init was not seen";
  }
  EXPECT_EQ(inits_sent(run, ids), 1u);
  EXPECT_EQ(expect_continuous(tape), 12u);
  expect_bit_identical_to_final_cut(run, ids, {"gate"});  // killed: missing if the cut came before its timeout
  expect_downlink(run, ids, "q4");
}

TEST(SyncInit, AskedLearnerKilledBeforeItsInitIsReplacedByAWaitingOne) { killed_asked_learner_is_replaced(2, 0.0); }
TEST(SyncInit, AskedLearnerKilledMidInitIsReplacedByAWaitingOne) { killed_asked_learner_is_replaced(3, 0.5); }

// The learner asked for `init` stays connected but silent: after sync.learner_timeout_s a
// waiting learner is asked instead. Its own `init`, arriving after the state exists, counts
// as a claim (`init_ignored`), never as a second state.
TEST(SyncInit, ASilentAskedLearnerIsReplacedAndItsLateInitIsIgnored) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=12"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  RawLearner gate;
  ASSERT_NO_FATAL_FAILURE(gate.connect(run.port, "gate"));
  ASSERT_EQ(gate.welcome.init, ys::InitAsk::send);
  const auto ids = isle_ids(2);
  auto a = run.start_learner(ids[0], 1), b = run.start_learner(ids[1], 2);
  ASSERT_TRUE(run.wait_tape([](const auto& t) { return count_events(t, "init") == 1; }, 15)) << run.logs();
  const auto asks = init_asks(run.tape());
  ASSERT_EQ(asks.size(), 2u) << run.logs();
  EXPECT_EQ(asks[0], "gate:welcome");
  // A waiting learner is asked instead (or, when the gate fell silent before either connected,
  // the first to connect is asked in its welcome).
  EXPECT_TRUE(asks[1] == "isle-a:request:gate:silent" || asks[1] == "isle-b:request:gate:silent" ||
              asks[1] == "isle-a:welcome" || asks[1] == "isle-b:welcome")
      << asks[1];
  send_all(gate.fd, gate.init_frame(std::vector<float>(gate.layout.total_numel(), 0.0f)));
  ASSERT_TRUE(run.wait_tape([](const auto& t) { return count_events(t, "init_ignored") == 1; }, 10)) << run.logs();
  gate.leave();
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(count_events(tape, "init"), 1u);
  EXPECT_EQ(inits_sent(run, ids), 1u);
  EXPECT_EQ(expect_continuous(tape), 12u);
  expect_bit_identical_to_final_cut(run, ids);
  expect_downlink(run, ids, "q4");
}

// A refused `init` (non-finite values): the learner gets a sealed `error` (code 3) that says
// why and is dropped, and a waiting learner is asked. A learner process whose own initial state
// is refused stops with that diagnosis at once instead of reconnecting.
TEST(SyncInit, ARefusedInitIsExplainedAndAWaitingLearnerIsAsked) {
  {
    RunDir run;
    // The gate sends no heartbeats: it must stay asked (not silent) until its `init` is refused.
    run.syncer_sets = {"sync.quorum=1", "sync.budget_outer_steps=8", "sync.learner_timeout_s=3", "sync.grace_max_s=4",
                       "sync.round_deadline_s=5"};
    auto syncer = run.start_syncer();
    ASSERT_NE(run.port, 0) << run.logs();
    RawLearner gate;
    ASSERT_NO_FATAL_FAILURE(gate.connect(run.port, "gate"));
    ASSERT_EQ(gate.welcome.init, ys::InitAsk::send);
    auto a = run.start_learner("isle-a", 1);
    ASSERT_TRUE(wait_event(run, "isle-a", [](const json& e) { return e["event"] == "connected"; }, 10))
        << run.logs();
    std::vector<float> bad(gate.layout.total_numel(), 0.5f);
    bad[17] = std::nanf("");
    send_all(gate.fd, gate.init_frame(bad));
    auto f = read_frame(gate.fd, gate.decoder);
    ASSERT_TRUE(f) << run.logs();
    ASSERT_EQ(f->type, ys::MsgType::error);
    const auto e = ys::ErrorMsg::decode(gate.session->open(std::move(*f)));
    EXPECT_EQ(e.code, ys::kErrorInitRefused);
    EXPECT_NE(e.message.find("non-finite"), std::string::npos) << e.message;
    EXPECT_TRUE(closed_by_peer(gate.fd));
    EXPECT_EQ(syncer->wait(30), 0) << run.logs();
    EXPECT_EQ(a->wait(10), 0) << run.logs();
    const auto tape = run.tape();
    EXPECT_EQ(count_events(tape, "init"), 1u);
    EXPECT_EQ(init_asks(tape), (std::vector<std::string>{"gate:welcome", "isle-a:request:gate:refused"}));
    EXPECT_EQ(inits_sent(run, {"isle-a"}), 1u);
    EXPECT_EQ(expect_continuous(tape), 8u);
    expect_bit_identical_to_final_cut(run, {"isle-a"});
  }
  {
    RunDir run;
    auto syncer = run.start_syncer();
    ASSERT_NE(run.port, 0) << run.logs();
    auto bad = run.start_learner("isle-nan", 1, "", {"--init-value", "nan"});
    EXPECT_EQ(bad->wait(10), 4) << "no global state: the learner stops\n" << run.logs();
    bool refused = false;
    std::size_t connected = 0;
    for (const auto& e : learner_events(run, "isle-nan")) {
      if (e["event"] == "refused") {
        refused = e["reason"].get<std::string>().find("refused this learner's initial state") != std::string::npos;
        EXPECT_NE(e["reason"].get<std::string>().find("non-finite"), std::string::npos) << e.dump();
      }
      if (e["event"] == "connected") ++connected;
    }
    EXPECT_TRUE(refused) << run.logs();
    EXPECT_EQ(connected, 1u) << "it reconnected after the refusal";
    EXPECT_EQ(count_events(run.tape(), "init"), 0u);
  }
}

}  // namespace
