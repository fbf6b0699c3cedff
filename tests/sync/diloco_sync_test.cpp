// sync::DilocoSync (learner::OuterSync over the sync client) against a real syncer on
// 127.0.0.1, run in this process on its own thread. No model: the "learner" is a few float32
// tensors trained by SGD on a quadratic towards an island-specific target, each island on
// its own thread as the real learner would run. Every wait is bounded; ports are ephemeral.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"
#include "island/island_group.hpp"
#include "support/ports.hpp"
#include "support/temp_dir.hpp"
#include "sync/diloco_sync.hpp"
#include "sync/state.hpp"
#include "sync/syncer.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;
using yeto::learner::Trainable;

namespace {

const std::string kSecret = "diloco-test-secret-0123456789abcdef";

ys::Timeouts fast_timeouts() {
  ys::Timeouts t;
  t.heartbeat_s = 0.1;
  t.learner_timeout_s = 0.8;
  t.grace_max_s = 1.0;
  t.round_deadline_s = 2.0;
  t.reconnect_budget_s = 15;
  t.final_timeout_s = 5;
  return t;
}

class SyncerThread {
 public:
  SyncerThread(const fs::path& state, std::uint32_t quorum, std::uint64_t budget_outer_steps,
               std::uint32_t expected_learners = 1, double expect_window_s = 60,
               ys::MergeRule merge = ys::MergeRule::mean, ys::Downlink downlink = ys::Downlink::q4,
               ys::PartialMerge partial = ys::PartialMerge::share, ys::Timeouts timeouts = fast_timeouts())
      : state_(state) {
    ys::SyncerOptions o;
    o.merge = merge;
    o.downlink = downlink;
    o.partial_merge = partial;
    o.expected_learners = expected_learners;
    o.expect_window_s = expect_window_s;
    o.state_dir = state;
    o.run_secret = kSecret;
    o.timeouts = timeouts;
    o.quorum = quorum;
    o.outer_lr = 0.7;
    o.outer_momentum = 0.5;
    o.budget_outer_steps = budget_outer_steps;
    syncer_ = std::make_unique<ys::Syncer>(std::move(o));
    thread_ = std::thread([this] { code_ = syncer_->run(); });
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end && !fs::exists(state / "port"))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    port_ = static_cast<std::uint16_t>(std::stoi(yeto::test::read_text(state / "port")));
  }
  ~SyncerThread() {
    if (thread_.joinable()) {
      syncer_->stop();
      thread_.join();
    }
  }
  // Waits (bounded) for run() to return after the final marker; -1 when it did not.
  int join(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end && !fs::exists(state_ / "final.json"))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(state_ / "final.json")) return -1;
    thread_.join();
    return code_;
  }
  std::uint16_t port() const { return port_; }
  std::vector<json> tape() const { return ys::read_tape_records(state_ / "tape.jsonl"); }

 private:
  fs::path state_;
  std::unique_ptr<ys::Syncer> syncer_;
  std::thread thread_;
  std::atomic<int> code_{-1};
  std::uint16_t port_ = 0;
};

ys::DilocoOptions options(const std::string& id, std::uint16_t port, const fs::path& events) {
  ys::DilocoOptions o;
  o.client.host = "127.0.0.1";
  o.client.port = port;
  o.client.run_secret = kSecret;
  o.client.learner_id = id;
  o.client.inner_steps = 5;
  o.client.quant_block = 32;
  o.client.timeouts = fast_timeouts();
  o.client.events = events;
  o.fragments = 2;
  o.join_timeout_s = 10;
  return o;
}

// A toy island: three trainable float32 tensors, one of them a non-contiguous view (so the
// staging path is exercised next to the in-place one), trained towards its own target.
struct Island {
  at::Tensor storage = at::zeros({4, 12});
  Trainable trainable;
  std::vector<at::Tensor> targets;
  explicit Island(double seed, double init = 0.0) {
    trainable = {{"a.weight", at::full({8, 6}, init)}, {"b.bias", at::full({10}, init)}, {"c.weight", storage.t()}};
    trainable[2].second.fill_(init);
    for (auto& [name, t] : trainable) {
      t.requires_grad_(true);
      targets.push_back(at::sin(at::arange(t.numel(), at::kFloat).reshape(t.sizes()) * 0.37 + seed));
    }
  }
  void inner_step() {
    at::NoGradGuard ng;
    for (std::size_t i = 0; i < trainable.size(); ++i) {
      auto& t = trainable[i].second;
      t.sub_((t - targets[i]) * 0.05);
    }
  }
  // The tensors in canonical order as raw float32, the layout of final_cut.bin.
  std::string bytes() const {
    std::string s;
    for (const auto& [name, t] : trainable) {
      const at::Tensor c = t.detach().contiguous();
      s.append(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()) * 4);
    }
    return s;
  }
};

// Runs an island on its own thread: inner steps until the syncer asks it to stop or it
// reached max_steps, then the terminal handshake.
struct IslandRun {
  Island island;
  ys::DilocoSync sync;
  std::thread thread;
  std::atomic<bool> finished{false};
  std::atomic<std::int64_t> steps{0};
  std::int64_t max_steps;
  int step_ms = 2;  // each inner step's duration
  IslandRun(double seed, ys::DilocoOptions o, std::int64_t max_steps_, double init = 0.0)
      : island(seed, init), sync(std::move(o)), max_steps(max_steps_) {}
  void start() {
    thread = std::thread([this] {
      sync.start(island.trainable);
      for (std::int64_t s = 1; s <= max_steps && !sync.stop_requested(); ++s) {
        island.inner_step();
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        sync.after_step(s, s * 4, island.trainable);
        steps = s;
      }
      finished = sync.finish(island.trainable);
    });
  }
  void join() { thread.join(); }
};

std::vector<json> events_of(const fs::path& p) { return ys::read_tape_records(p); }

std::size_t count(const std::vector<json>& recs, const std::string& event) {
  std::size_t n = 0;
  for (const auto& r : recs)
    if (r.value("event", "") == event) ++n;
  return n;
}

// Two islands training towards different targets (island-0 and island-1, events in DIR/a and
// DIR/b.events.jsonl) until the syncer's budget ends the run.
ys::DilocoOptions with_uplink(ys::DilocoOptions o, ys::Uplink uplink) {
  o.client.uplink = uplink;
  return o;
}

struct TwoIslands {
  IslandRun a, b;
  TwoIslands(const yeto::test::TempDir& dir, std::uint16_t port, ys::Uplink uplink = ys::Uplink::q4)
      : a(1.0, with_uplink(options("island-0", port, dir / "a.events.jsonl"), uplink), 100000),
        b(2.0, with_uplink(options("island-1", port, dir / "b.events.jsonl"), uplink), 100000) {
    a.start();
    b.start();
    a.join();
    b.join();
  }
};

TEST(DilocoSync, TwoIslandsMergeUntilTheBudgetAndEndBitIdenticalToTheFinalCut) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 2, 8);
  TwoIslands run(dir, syncer.port());
  auto& a = run.a;
  auto& b = run.b;
  ASSERT_EQ(syncer.join(20), 0);
  EXPECT_TRUE(a.finished);
  EXPECT_TRUE(b.finished);
  EXPECT_LT(a.steps.load(), 100000);  // stopped by the syncer's budget, not by max_steps
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  ASSERT_EQ(cut.size(), (48u + 10u + 48u) * 4u);
  EXPECT_TRUE(a.island.bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  const auto tape = syncer.tape();
  std::size_t merges = 0, both = 0;
  for (const auto& r : tape)
    if (r["event"] == "merge") {
      ++merges;
      if (r["learners"].size() == 2) ++both;
    }
  EXPECT_GE(merges, 8u);
  EXPECT_GE(both, 1u);
  for (const auto& r : tape)
    if (r["event"] == "final_cut") {
      EXPECT_EQ(r["reason"], "budget_outer_steps");
    }
  const json fin = json::parse(yeto::test::read_text(dir / "state" / "final.json"));
  EXPECT_EQ(fin["acked"].size(), 2u);
  const auto ev = events_of(dir / "a.events.jsonl");
  EXPECT_EQ(count(ev, "joined"), 1u);
  EXPECT_GE(count(ev, "push"), 1u);
  EXPECT_GE(count(ev, "applied"), 2u);
  EXPECT_EQ(count(ev, "final_applied"), 1u);
  EXPECT_EQ(count(ev, "finished"), 1u);
  const auto st = a.sync.stats();
  EXPECT_GT(st.staged_steps, 0u);  // the non-contiguous tensor went through host buffers
  EXPECT_LT(st.staged_steps, st.steps);  // ... but only on the steps that needed it
}

// The merge rule sets the length of each round's update (before the outer step): with the mean
// it is the agreement times the pushes' weighted mean length, with RDA that mean length itself.
// The islands train towards different targets, so their pushes disagree (agreement < 1) and the
// rules' updates differ.
TEST(DilocoSync, TheMergeRuleSetsTheLengthOfEachUpdate) {
  for (const auto rule : {ys::MergeRule::mean, ys::MergeRule::rda}) {
    SCOPED_TRACE(ys::merge_rule_name(rule));
    yeto::test::TempDir dir;
    SyncerThread syncer(dir / "state", 2, 6, 1, 60, rule);
    TwoIslands run(dir, syncer.port());
    ASSERT_EQ(syncer.join(20), 0);
    std::size_t both = 0;
    for (const auto& r : syncer.tape()) {
      if (r["event"] != "merge") continue;
      EXPECT_EQ(r["merge"], ys::merge_rule_name(rule));
      const auto w = r["weights"].get<std::vector<double>>();
      const auto n = r["push_norms"].get<std::vector<double>>();
      ASSERT_EQ(w.size(), n.size());
      double radius = 0;
      for (std::size_t i = 0; i < w.size(); ++i) radius += w[i] * n[i];
      const double agreement = r["agreement"].get<double>(), length = r["update_norm"].get<double>();
      EXPECT_GT(agreement, 0.0);
      EXPECT_LE(agreement, 1.0);
      if (rule == ys::MergeRule::mean) EXPECT_NEAR(length, agreement * radius, 1e-4 * radius) << r.dump();
      else EXPECT_NEAR(length, radius, 1e-4 * radius) << r.dump();
      if (w.size() == 2) {
        ++both;
        EXPECT_LT(agreement, 0.99) << r.dump();
      }
    }
    EXPECT_GE(both, 1u);
    const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
    EXPECT_TRUE(run.a.island.bytes() == cut);
    EXPECT_TRUE(run.b.island.bytes() == cut);
  }
}

// q2 both ways (sync.uplink = q2, sync.downlink = q2): the pushes and the downlink updates carry
// 2-bit codes, about half the bytes of q4's for the same fragment, and every island still ends
// bit-identical to the final cut.
TEST(DilocoSync, Q2BothWaysHalvesTheCodesAndKeepsEveryIslandBitIdentical) {
  std::map<std::string, std::map<std::int64_t, std::uint64_t>> push_bytes, update_bytes;
  for (const auto& [up, down] : {std::pair{ys::Uplink::q4, ys::Downlink::q4}, std::pair{ys::Uplink::q2, ys::Downlink::q2}}) {
    const std::string name = ys::uplink_name(up);
    SCOPED_TRACE(name);
    yeto::test::TempDir dir;
    SyncerThread syncer(dir / "state", 2, 6, 1, 60, ys::MergeRule::mean, down);
    TwoIslands run(dir, syncer.port(), up);
    ASSERT_EQ(syncer.join(20), 0);
    std::size_t merges = 0;
    for (const auto& r : syncer.tape()) {
      if (r["event"] == "push") {
        EXPECT_EQ(r["encoding"], name) << r.dump();
        push_bytes[name][r["fragment"].get<std::int64_t>()] = r["bytes"].get<std::uint64_t>();
      }
      if (r["event"] == "merge") {
        ++merges;
        EXPECT_EQ(r["downlink"]["encoding"], ys::downlink_name(down)) << r.dump();
        if (r["downlink"].contains("update_bytes"))
          update_bytes[name][r["fragment"].get<std::int64_t>()] = r["downlink"]["update_bytes"].get<std::uint64_t>();
      }
    }
    EXPECT_GE(merges, 6u);
    const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
    EXPECT_TRUE(run.a.island.bytes() == cut);
    EXPECT_TRUE(run.b.island.bytes() == cut);
  }
  // Per fragment of n values at block 32: q4 bodies hold ceil(n/2) code bytes, q2 ceil(n/4).
  for (auto* sizes : {&push_bytes, &update_bytes}) {
    ASSERT_EQ((*sizes)["q4"].size(), 2u);
    ASSERT_EQ((*sizes)["q2"].size(), 2u);
    for (const auto& [fragment, q4] : (*sizes)["q4"]) {
      const std::uint64_t q2 = (*sizes)["q2"][fragment];
      EXPECT_LT(q2, q4) << fragment;
      EXPECT_GE(q4 - q2, 10u) << fragment;  // ceil(n/2) - ceil(n/4) for fragments of 40 values or more
    }
  }
}

// A round merged without a live island that pushes (here island-1, forty times slower: its push
// period of 0.4 s is beyond the 0.3 s a round waits at most, so island-0's rounds close without
// it): with sync.partial_merge = share the pushes present weigh their share of the round (one of
// two: a lone push moves the state by half its length, and the late one adds its half when it
// lands); with full they are the whole round.
TEST(DilocoSync, AMergeWithoutALiveIslandMovesTheStateByItsShare) {
  ys::Timeouts tight = fast_timeouts();
  tight.heartbeat_s = 0.02;
  tight.learner_timeout_s = 0.2;
  tight.grace_max_s = 0.3;
  tight.round_deadline_s = 1.0;
  for (const auto partial : {ys::PartialMerge::share, ys::PartialMerge::full}) {
    SCOPED_TRACE(ys::partial_merge_name(partial));
    yeto::test::TempDir dir;
    SyncerThread syncer(dir / "state", 1, 12, 1, 60, ys::MergeRule::mean, ys::Downlink::q4, partial, tight);
    auto oa = options("island-0", syncer.port(), dir / "a.events.jsonl");
    auto ob = options("island-1", syncer.port(), dir / "b.events.jsonl");
    oa.client.timeouts = ob.client.timeouts = tight;
    IslandRun a(1.0, oa, 100000);
    IslandRun b(2.0, ob, 100000);
    b.step_ms = 80;
    a.start();
    b.start();
    a.join();
    b.join();
    ASSERT_EQ(syncer.join(20), 0);
    std::size_t partial_merges = 0, after_b = 0;
    bool b_pushed = false;
    for (const auto& r : syncer.tape()) {
      if (r["event"] != "merge") continue;
      const auto w = r["weights"].get<std::vector<double>>();
      const auto who = r["learners"].get<std::vector<std::string>>();
      const auto expected = r["round_learners"].get<std::size_t>();
      double sum = 0;
      for (const double x : w) sum += x;
      ASSERT_GE(expected, who.size()) << r.dump();
      const double share = partial == ys::PartialMerge::share ? double(who.size()) / double(expected) : 1.0;
      EXPECT_NEAR(r["share"].get<double>(), share, 1e-12) << r.dump();
      EXPECT_NEAR(sum, share, 1e-12) << r.dump();
      if (b_pushed) ++after_b;
      if (std::find(who.begin(), who.end(), "island-1") != who.end()) b_pushed = true;
      if (who.size() < expected) {
        ++partial_merges;
        EXPECT_EQ(expected, 2u) << r.dump();
        if (who.size() == 1) {  // the mean of one push: its share of it
          const double norm = r["push_norms"][0].get<double>();
          EXPECT_NEAR(r["update_norm"].get<double>(), share * norm, 1e-4 * norm) << r.dump();
        }
      }
    }
    EXPECT_GE(after_b, 3u);         // island-1 counted in the rounds after its first push
    EXPECT_GE(partial_merges, 2u);  // ... and rounds merged without it
    const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
    EXPECT_TRUE(a.island.bytes() == cut);
    EXPECT_TRUE(b.island.bytes() == cut);
  }
}

// A learner that starts from the run's initial state (the same seed) is sent no catch-up: its
// `holds` claim matches the syncer's version 0; one that starts elsewhere gets the full
// fragments. The final cut omits what each connection holds, and everyone ends on it.
TEST(DilocoSync, TheCatchUpAndTheFinalCutSendOnlyWhatALearnerDoesNotHold) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 1, 6);
  IslandRun a(1.0, options("island-0", syncer.port(), dir / "a.events.jsonl"), 100000);
  a.start();
  // island-0 sends the initial state; the others join once it exists.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end && count(syncer.tape(), "init") == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(count(syncer.tape(), "init"), 1u);
  IslandRun b(2.0, options("island-1", syncer.port(), dir / "b.events.jsonl"), 100000);
  IslandRun c(3.0, options("island-2", syncer.port(), dir / "c.events.jsonl"), 100000, 0.25);
  b.start();
  c.start();
  a.join();
  b.join();
  c.join();
  ASSERT_EQ(syncer.join(20), 0);
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  EXPECT_TRUE(a.island.bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  EXPECT_TRUE(c.island.bytes() == cut);
  std::map<std::string, json> catch_up;
  for (const auto& r : syncer.tape())
    if (r["event"] == "catch_up") catch_up[r["learners"][0].get<std::string>()] = r;
  ASSERT_TRUE(catch_up.count("island-1") && catch_up.count("island-2"));
  // island-1 may join after a merge (then its claim of version 0 is stale and it gets that
  // fragment in full); island-2's values differ from the initial state, so it never matches.
  // A merge that lands between a learner's welcome and its claims sends that fragment in full
  // already ("already" on the record): every fragment is in exactly one of the three lists.
  EXPECT_TRUE(catch_up["island-2"]["held"].empty()) << catch_up["island-2"].dump();
  for (const char* id : {"island-1", "island-2"}) {
    const json& r = catch_up[id];
    EXPECT_EQ(r["held"].size() + r["sent"].size() + r["already"].size(), 2u) << r.dump();
  }
  const auto sb = b.sync.stats().client, sc = c.sync.stats().client;
  EXPECT_GE(sb.fragments_held + sb.fragments_received, 2u);
  EXPECT_EQ(sc.fragments_held, 0u);
  EXPECT_GE(sc.fragments_received, 2u);
  // Every learner held the last update of both fragments when the cut came: nothing resent.
  for (const char* f : {"a.events.jsonl", "b.events.jsonl", "c.events.jsonl"}) {
    std::size_t cuts = 0;
    for (const auto& e : events_of(dir / f))
      if (e["event"] == "final_cut") {
        ++cuts;
        EXPECT_EQ(e["omitted"], 2) << f << ": " << e.dump();
      }
    EXPECT_EQ(cuts, 1u) << f;
  }
}

// Started together from the same initial state before any merge: the joiner holds everything.
TEST(DilocoSync, ASecondIslandFromTheSameSeedNeedsNoCatchUp) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 2, 4, 2);  // two islands expected: no merge before both joined
  IslandRun a(1.0, options("island-0", syncer.port(), dir / "a.events.jsonl"), 100000);
  IslandRun b(2.0, options("island-1", syncer.port(), dir / "b.events.jsonl"), 100000);
  a.start();
  b.start();
  a.join();
  b.join();
  ASSERT_EQ(syncer.join(20), 0);
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  EXPECT_TRUE(a.island.bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  // No merge before both joined, so whoever did not send the initial state holds
  // version 0 of both fragments exactly and is sent none (whether it was welcomed before the
  // state existed, its own init then being its claim, or after, with `holds`).
  std::size_t joiners = 0;
  for (const auto& r : syncer.tape())
    if (r["event"] == "catch_up") {
      ++joiners;
      EXPECT_EQ(r["held"].size(), 2u) << r.dump();
      EXPECT_TRUE(r["sent"].empty()) << r.dump();
    }
  EXPECT_EQ(joiners, 1u);
  EXPECT_EQ(a.sync.stats().client.fragments_received + b.sync.stats().client.fragments_received, 0u);
  // The initialiser is told it holds what it sent, the joiner that its claim matched.
  EXPECT_EQ(a.sync.stats().client.fragments_held, 2u);
  EXPECT_EQ(b.sync.stats().client.fragments_held, 2u);
}

TEST(DilocoSync, IslandsThatReachTheirStepBudgetEndTheRunTogether) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 2, 0);
  IslandRun a(1.0, options("island-0", syncer.port(), dir / "a.events.jsonl"), 40);
  IslandRun b(3.0, options("island-1", syncer.port(), dir / "b.events.jsonl"), 60);
  a.start();
  b.start();
  a.join();
  b.join();
  ASSERT_EQ(syncer.join(20), 0);
  EXPECT_TRUE(a.finished);
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(a.steps.load(), 40);
  EXPECT_EQ(b.steps.load(), 60);
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  EXPECT_TRUE(a.island.bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  const auto tape = syncer.tape();
  EXPECT_EQ(count(tape, "done"), 2u);
  std::set<std::string> merged;
  for (const auto& r : tape) {
    if (r["event"] == "merge")
      for (const auto& l : r["learners"]) merged.insert(l.get<std::string>());
    if (r["event"] == "final_cut") {
      EXPECT_EQ(r["reason"], "learners_done");
    }
  }
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"}));
  // island-1's pushes after island-0 stopped did not wait for it: merges of island-1 alone.
  bool alone = false;
  for (const auto& r : tape)
    if (r["event"] == "merge" && r["learners"] == json::array({"island-1"})) alone = true;
  EXPECT_TRUE(alone);
}

TEST(DilocoSync, TheRunWaitsForAnExpectedIslandThatJoinsLate) {
  // Two islands expected; island-0 reaches its step budget before island-1 even connects.
  // The learners-done final cut must wait for island-1 and merge its pushes.
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 1, 0, 2, 30);
  IslandRun a(1.0, options("island-0", syncer.port(), dir / "a.events.jsonl"), 20);
  IslandRun b(3.0, options("island-1", syncer.port(), dir / "b.events.jsonl"), 40);
  a.start();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until && count(syncer.tape(), "done") == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(count(syncer.tape(), "done"), 1u) << "island-0 did not reach its step budget";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // several syncer ticks with island-0 done alone
  EXPECT_EQ(count(syncer.tape(), "final_cut"), 0u) << "the run ended before the expected second island joined";
  b.start();
  a.join();
  b.join();
  ASSERT_EQ(syncer.join(20), 0);
  EXPECT_TRUE(a.finished);
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(b.steps.load(), 40);
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  EXPECT_TRUE(a.island.bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  const auto tape = syncer.tape();
  bool b_merged = false;
  for (const auto& r : tape) {
    if (r["event"] == "merge")
      for (const auto& l : r["learners"]) b_merged = b_merged || l == "island-1";
    if (r["event"] == "final_cut") {
      EXPECT_EQ(r["reason"], "learners_done");
    }
  }
  EXPECT_TRUE(b_merged);
  EXPECT_EQ(count(tape, "missing_learners"), 0u);
}

TEST(DilocoSync, AnExpectedIslandThatNeverJoinsHoldsTheRunOnlyForTheJoinWindow) {
  yeto::test::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  SyncerThread syncer(dir / "state", 1, 0, 2, 1.5);
  IslandRun a(1.0, options("island-0", syncer.port(), dir / "a.events.jsonl"), 10);
  a.start();
  a.join();
  ASSERT_EQ(syncer.join(20), 0);
  EXPECT_TRUE(a.finished);
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.5);
  const auto tape = syncer.tape();
  ASSERT_EQ(count(tape, "missing_learners"), 1u);
  for (const auto& r : tape)
    if (r["event"] == "missing_learners") {
      EXPECT_EQ(r["expected"], 2);
      EXPECT_EQ(r["joined"], 1);
    }
  EXPECT_TRUE(a.island.bytes() == yeto::test::read_text(dir / "state" / "final_cut.bin"));
}

TEST(DilocoSync, TrainingNeverWaitsForAnAbsentOrSilentSyncer) {
  yeto::test::TempDir dir;
  // A port nobody listens on, and a listener that accepts connections but never speaks.
  const std::uint16_t absent = yeto::test::unused_loopback_port();
  const int silent_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(silent_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(silent_fd, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(silent_fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::uint16_t silent = ntohs(a.sin_port);

  for (const std::uint16_t port : {absent, silent}) {
    const std::string tag = port == absent ? "absent" : "silent";
    Island reference(1.0), island(1.0);
    auto o = options("island-" + tag, port, dir / (tag + ".events.jsonl"));
    o.join_timeout_s = 0.2;
    ys::DilocoSync sync(o);
    sync.start(island.trainable);
    for (std::int64_t s = 1; s <= 400; ++s) {
      reference.inner_step();
      island.inner_step();
      sync.after_step(s, s * 4, island.trainable);
    }
    EXPECT_FALSE(sync.stop_requested()) << tag;
    const auto st = sync.stats();
    EXPECT_FALSE(st.joined) << tag;
    EXPECT_EQ(st.steps, 400u) << tag;
    EXPECT_EQ(st.client.pushes_sent, 0u) << tag;
    // Nothing arrived, so nothing was blended in: the island followed its local trajectory.
    EXPECT_TRUE(island.bytes() == reference.bytes()) << tag;
    EXPECT_EQ(count(events_of(dir / (tag + ".events.jsonl")), "join_deferred"), 1u) << tag;
  }
  ::close(silent_fd);
}

TEST(DilocoSync, ARejoiningIslandStartsFromTheCurrentGlobalState) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 1, 0);
  {
    // The first life of island-0: trains, is merged, then dies without the handshake.
    IslandRun first(1.0, options("island-0", syncer.port(), dir / "first.events.jsonl"), 60);
    first.sync.start(first.island.trainable);
    for (std::int64_t s = 1; s <= 60; ++s) {
      first.island.inner_step();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      first.sync.after_step(s, s * 4, first.island.trainable);
    }
  }
  // Every frame of the first life has been processed once its disconnect is on the tape.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end && count(syncer.tape(), "disconnect") == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(count(syncer.tape(), "disconnect"), 1u);
  // The merges its last pushes started may still be in flight (their checkpoint is written off
  // the syncer's I/O thread, and a merge is visible only once it is durable). With one learner
  // every round holds one push (a second push into an open round replaces the first), so every
  // round has merged once each fragment has as many merges on the tape as pushes that opened a
  // round; then the global state is the checkpoint, which names the taped versions.
  ys::SyncerState global;
  for (;;) {
    global = ys::load_checkpoint(dir / "state" / "checkpoint.bin");
    std::map<std::int64_t, std::uint64_t> taped;
    std::map<std::int64_t, std::int64_t> open_rounds;
    for (const auto& r : syncer.tape()) {
      const std::string e = r.value("event", "");
      if (e == "push" && !r.value("replaced", false)) ++open_rounds[r["fragment"].get<std::int64_t>()];
      if (e == "merge") {
        taped[r["fragment"].get<std::int64_t>()] = r["version"].get<std::uint64_t>();
        --open_rounds[r["fragment"].get<std::int64_t>()];
      }
    }
    bool visible = true;
    for (std::size_t p = 0; p < global.fragments.size(); ++p)
      visible = visible && open_rounds[static_cast<std::int64_t>(p)] == 0 &&
                taped[static_cast<std::int64_t>(p)] == global.fragments[p].version;
    if (visible || std::chrono::steady_clock::now() > end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t merges_before = count(syncer.tape(), "merge");
  ASSERT_GE(merges_before, 4u);

  // The second life starts from other weights and must be overwritten by the global state.
  Island again(5.0, 3.0);
  const std::string before = again.bytes();
  ys::DilocoSync sync(options("island-0", syncer.port(), dir / "again.events.jsonl"));
  sync.start(again.trainable);
  ASSERT_TRUE(sync.stats().joined);
  std::string expected;
  {
    std::vector<std::vector<float>> t;
    std::vector<std::span<float>> spans;
    for (const auto& s : global.layout.tensors) t.emplace_back(s.numel);
    for (auto& v : t) spans.emplace_back(v);
    // The public state (what every learner holds; with the q4 downlink it trails the master
    // parameters by the residual of the last update).
    for (std::uint32_t p = 0; p < global.fragments.size(); ++p)
      ys::apply_fragment(global.layout, p, global.fragments[p].public_values(), spans);
    for (const auto& v : t) expected.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  EXPECT_FALSE(before == expected);
  EXPECT_TRUE(again.bytes() == expected);
  EXPECT_EQ(count(syncer.tape(), "rejoin"), 1u);
  // It trains on from there and is merged again, with fresh (not stale) pushes.
  for (std::int64_t s = 1; s <= 30; ++s) {
    again.inner_step();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    sync.after_step(s, s * 4, again.trainable);
  }
  ASSERT_TRUE(sync.finish(again.trainable));
  ASSERT_EQ(syncer.join(20), 0);
  const auto tape = syncer.tape();
  EXPECT_GT(count(tape, "merge"), merges_before);
  // The first push of each fragment after the rejoin is based on the caught-up version, so
  // nothing was merged in between: staleness 0 (later ones may lag behind a busy syncer).
  bool rejoined = false;
  std::size_t merged_after = 0;
  std::set<std::int64_t> seen;
  for (const auto& r : tape) {
    if (r["event"] == "rejoin") rejoined = true;
    if (rejoined && r["event"] == "merge") {
      ++merged_after;
      if (seen.insert(r["fragment"].get<std::int64_t>()).second) {
        EXPECT_EQ(r["staleness"], json::array({0})) << r.dump();
      }
    }
  }
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GE(merged_after, 2u);
  if (::testing::Test::HasFailure())
    for (const auto& r : tape) std::cerr << r.dump() << "\n";
  EXPECT_TRUE(again.bytes() == yeto::test::read_text(dir / "state" / "final_cut.bin"));
}

// An island of two ranks (threads of this process, joined over Gloo on 127.0.0.1) next to an
// island of one: rank 0 owns the client and broadcasts what it blends in; both ranks train
// ddp-style (each towards its own target, gradients averaged) and must hold the same bytes
// at every step boundary, including the staged non-contiguous tensor, and end on the cut.
TEST(DilocoSync, AnIslandOfTwoRanksStaysBitIdenticalAndEndsOnTheFinalCut) {
  yeto::test::TempDir dir;
  SyncerThread syncer(dir / "state", 2, 8);
  const std::uint16_t master = yeto::test::unused_loopback_port();
  struct Rank {
    std::unique_ptr<Island> island;
    std::vector<std::string> hashes;  // after every after_step()
    std::vector<std::uint64_t> applied;
    bool finished = false;
    ys::DilocoStats stats;
    std::string error;
  };
  std::vector<Rank> ranks(2);
  std::atomic<bool> joined{false};
  auto run_rank = [&](int r) {
    try {
      yeto::island::IslandEnv env;
      env.rank = r;
      env.local_rank = r;
      env.world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = master;
      auto group = yeto::island::IslandGroup::connect(env, {10.0, 60.0, yeto::island::Backend::gloo});
      Rank& me = ranks[static_cast<std::size_t>(r)];
      me.island = std::make_unique<Island>(1.0 + 0.5 * r, 0.1 * r);  // different start: start() aligns them
      auto o = options("island-0", syncer.port(), r == 0 ? dir / "a.events.jsonl" : fs::path());
      o.ranks = group.get();
      ys::DilocoSync sync(std::move(o));
      auto& t = me.island->trainable;
      sync.start(t);
      joined = true;
      for (std::int64_t s = 1; s <= 100000 && !sync.stop_requested(); ++s) {
        {
          at::NoGradGuard ng;
          for (std::size_t i = 0; i < t.size(); ++i) t[i].second.mutable_grad() = (t[i].second - me.island->targets[i]).detach();
          yeto::island::average_gradients(*group, t);
          for (auto& [name, x] : t) x.sub_(x.grad() * 0.05);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        sync.after_step(s, s * 8, t);
        me.hashes.push_back(yeto::sha256_hex(me.island->bytes()));
        me.applied.push_back(sync.stats().fragments_applied);
      }
      me.finished = sync.finish(t);
      me.hashes.push_back(yeto::sha256_hex(me.island->bytes()));
      me.stats = sync.stats();
    } catch (const std::exception& e) {
      ranks[static_cast<std::size_t>(r)].error = e.what();
    }
  };
  std::thread r0(run_rank, 0), r1(run_rank, 1);
  // The one-rank island starts once the two-rank island joined, so that the budget cannot be
  // spent before both are in (quorum 2 counts only live learners).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!joined && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  IslandRun b(2.0, options("island-1", syncer.port(), dir / "b.events.jsonl"), 100000);
  b.start();
  r0.join();
  r1.join();
  b.join();
  ASSERT_EQ(ranks[0].error, "");
  ASSERT_EQ(ranks[1].error, "");
  ASSERT_EQ(syncer.join(20), 0);
  EXPECT_TRUE(ranks[0].finished);
  EXPECT_TRUE(ranks[1].finished);
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(ranks[0].hashes, ranks[1].hashes);
  EXPECT_EQ(ranks[0].applied, ranks[1].applied);
  int blends = 0;
  for (std::size_t i = 1; i < ranks[0].applied.size(); ++i)
    if (ranks[0].applied[i] > ranks[0].applied[i - 1]) ++blends;
  EXPECT_GE(blends, 2);
  const std::string cut = yeto::test::read_text(dir / "state" / "final_cut.bin");
  EXPECT_TRUE(ranks[0].island->bytes() == cut);
  EXPECT_TRUE(ranks[1].island->bytes() == cut);
  EXPECT_TRUE(b.island.bytes() == cut);
  // Rank 1 never talked to the syncer; rank 0 staged the view only when it had to.
  EXPECT_EQ(ranks[1].stats.client.bytes_sent, 0u);
  EXPECT_GT(ranks[1].stats.broadcasts, 0u);
  EXPECT_EQ(ranks[0].stats.broadcasts, ranks[1].stats.broadcasts);
  EXPECT_GT(ranks[0].stats.staged_steps, 0u);
  std::set<std::string> learners;
  for (const auto& r : syncer.tape())
    if (r["event"] == "join" || r["event"] == "merge")
      for (const auto& l : r["learners"]) learners.insert(l.get<std::string>());
  EXPECT_EQ(learners, (std::set<std::string>{"island-0", "island-1"}));
  const json fin = json::parse(yeto::test::read_text(dir / "state" / "final.json"));
  EXPECT_EQ(fin["acked"].size(), 2u);
  EXPECT_EQ(count(events_of(dir / "a.events.jsonl"), "final_applied"), 1u);
}

}  // namespace
