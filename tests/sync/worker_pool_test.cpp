// The syncer's worker pool: a large fragment's merges, the sealing of its updates and the
// opening of its pushes run off the I/O thread, while a small fragment's rounds go on; every
// learner still ends bit-identical to final_cut.bin. An in-process syncer and two SyncClient
// learners (threads) on 127.0.0.1.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "sync/client.hpp"
#include "sync/syncer.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Outcome {
  std::vector<json> tape;
  std::vector<std::vector<float>> learner_tensors;  // per learner, every tensor concatenated
  std::string final_cut;                            // final_cut.bin
  json final_marker;
  std::vector<std::vector<json>> events;  // per learner, the client's progress events
};

// Two learners, tensors "large" (fragment 0) and "small" (fragment 1), `steps` inner steps of
// 2 ms each, H inner steps; the run ends when both are done (or at budget_outer_steps).
Outcome run(const fs::path& dir, std::uint64_t large, std::size_t offload_bytes, int steps,
            std::uint64_t budget_outer_steps = 0, std::uint32_t H = 2) {
  const std::string secret = "worker-pool-secret-0123456789";
  ys::SyncerOptions so;
  so.state_dir = dir / "state";
  so.run_secret = secret;
  so.quorum = 2;
  so.expected_learners = 2;
  so.offload_bytes = offload_bytes;
  // The bulk lanes at the I/O thread's priority: the counts of large merges below need their share
  // of a machine other processes load (sync_lanes_test covers sync.bulk_nice).
  so.bulk_nice = 0;
  so.budget_outer_steps = budget_outer_steps;
  so.timeouts.heartbeat_s = 0.2;
  so.timeouts.learner_timeout_s = 20;
  so.timeouts.grace_max_s = 25;
  so.timeouts.round_deadline_s = 30;
  so.timeouts.grace_fraction = ys::kGraceFractionNoCarry;  // the learners below do not carry
  so.timeouts.reconnect_budget_s = 60;
  so.timeouts.final_timeout_s = 30;
  ys::Syncer syncer(so);
  std::thread st([&] { syncer.run(); });
  std::uint16_t port = 0;
  for (int i = 0; i < 1000 && port == 0; ++i) {
    std::ifstream in(so.state_dir / "port");
    int p = 0;
    if (in >> p) port = static_cast<std::uint16_t>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(port, 0);
  const std::vector<ys::TensorSpec> specs{{"large", large}, {"small", 1000}};
  const auto layout = ys::build_layout(specs, 2, ys::FragmentPattern::binpack);
  Outcome out;
  out.learner_tensors.resize(2);
  std::vector<std::thread> ts;
  for (int l = 0; l < 2; ++l)
    ts.emplace_back([&, l] {
      ys::ClientOptions o;
      o.port = port;
      o.run_secret = secret;
      o.learner_id = "learner-" + std::to_string(l);
      o.inner_steps = H;
      // A push every H steps of 2 ms, whatever the merges' pace: this test loads the syncer's
      // pool. With sync.carry a fragment's next push would wait for its 16 MB merge.
      o.carry = false;
      o.timeouts = so.timeouts;
      o.events = dir / (o.learner_id + ".jsonl");
      std::vector<std::vector<float>> t;
      for (const auto& s : specs) t.emplace_back(s.numel, 0.5f);
      std::vector<std::span<float>> ms(t.begin(), t.end());
      std::vector<std::span<const float>> cs(t.begin(), t.end());
      ys::SyncClient c(o, layout);
      c.start(cs);
      ASSERT_TRUE(c.wait_for_global(ms, 30));
      bool finished = false;
      for (int step = 1; step <= steps && !finished; ++step) {
        for (auto& v : t)
          for (std::size_t k = static_cast<std::size_t>(step % 7); k < v.size(); k += 97)
            v[k] += 1e-3f * static_cast<float>((l + 1) * ((k / 97) % 5 + 1));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const auto r = c.step(ms, 4);
        finished = r.finished;
        ASSERT_FALSE(r.failed);
      }
      if (!finished) {
        c.finish_local(static_cast<std::uint64_t>(steps), static_cast<std::uint64_t>(steps) * 4);
        EXPECT_TRUE(c.wait_for_final(ms, 60));
      }
      c.close(10);
      for (const auto& v : t) out.learner_tensors[l].insert(out.learner_tensors[l].end(), v.begin(), v.end());
    });
  for (auto& t : ts) t.join();
  st.join();
  out.tape = ys::read_tape_history(so.state_dir / "tape.jsonl");
  out.final_cut = yeto::test::read_text(so.state_dir / "final_cut.bin");
  out.final_marker = json::parse(yeto::test::read_text(so.state_dir / "final.json"));
  for (int l = 0; l < 2; ++l) {
    out.events.emplace_back();
    std::ifstream in(dir / ("learner-" + std::to_string(l) + ".jsonl"));
    for (std::string line; std::getline(in, line);) out.events.back().push_back(json::parse(line));
  }
  return out;
}

void expect_bit_identical(const Outcome& o) {
  for (const auto& t : o.learner_tensors) {
    ASSERT_EQ(t.size() * 4, o.final_cut.size());
    EXPECT_EQ(std::memcmp(t.data(), o.final_cut.data(), o.final_cut.size()), 0);
  }
  EXPECT_EQ(o.final_marker["acked"].size(), 2u);
  EXPECT_TRUE(o.final_marker["missing"].empty());
}

}  // namespace

// The large fragment (4 M values, 16 MB) merges on the pool; the small one (1000 values) on
// the I/O thread, and it keeps merging while a large merge is being computed: some small
// merge lands inside a large merge's computation (impossible when the I/O thread computes it).
TEST(SyncWorkerPool, SmallFragmentsMergeWhileALargeMergeIsComputedAndLearnersEndBitIdentical) {
  yeto::test::TempDir dir;
  const Outcome o = run(dir.path(), 4'000'000, 1u << 20, 240);
  std::map<std::int64_t, std::uint64_t> last_version;
  struct Window {
    double from, to;
  };
  std::vector<Window> large;
  std::vector<double> small_landed;
  std::size_t pool_merges = 0;
  for (const auto& r : o.tape) {
    if (r.value("event", "") != "merge") continue;
    const std::int64_t p = r["fragment"].get<std::int64_t>();
    const std::uint64_t v = r["version"].get<std::uint64_t>();
    EXPECT_EQ(v, last_version[p] + 1) << "merge versions of fragment " << p << " are continuous";
    last_version[p] = v;
    EXPECT_EQ(r.value("worker", false), p == 0) << r.dump();
    ASSERT_TRUE(r.contains("merge_s"));
    const double t = r["time"].get<double>();
    if (p == 0) {
      ++pool_merges;
      large.push_back({t - r["merge_s"].get<double>(), t});
    } else {
      small_landed.push_back(t);
    }
  }
  EXPECT_GE(pool_merges, 5u);
  EXPECT_GE(small_landed.size(), 5u);
  std::size_t during = 0;
  for (double t : small_landed)
    for (const auto& w : large)
      if (t > w.from && t < w.to) {
        ++during;
        break;
      }
  EXPECT_GE(during, 1u) << "no small-fragment merge landed while a large merge was computed";
  std::printf("large merges %zu, small merges %zu, small merges landing during a large merge's computation %zu\n",
              large.size(), small_landed.size(), during);
  expect_bit_identical(o);
}

// With a budget of outer steps the run stops at exactly that many merges although merges of
// both fragments are in flight on the pool at once (offload of every fragment), and the final
// cut waits for them.
TEST(SyncWorkerPool, TheBudgetIsMetExactlyWithMergesInFlight) {
  yeto::test::TempDir dir;
  const Outcome o = run(dir.path(), 200'000, 1024, 100000, 15);
  std::uint64_t merges = 0;
  bool cut = false;
  for (const auto& r : o.tape) {
    const std::string ev = r.value("event", "");
    if (ev == "merge") {
      EXPECT_FALSE(cut) << "a merge after the final cut";
      EXPECT_TRUE(r.value("worker", false));
      ++merges;
    }
    if (ev == "final_cut") {
      cut = true;
      EXPECT_EQ(r["reason"], "budget_outer_steps");
      EXPECT_EQ(r["outer_steps"], 15);
    }
  }
  EXPECT_TRUE(cut);
  EXPECT_EQ(merges, 15u);
  expect_bit_identical(o);
}

// With H = 1 both fragments are due at every step: a learner hands both pushes to its
// communication thread at once, which sends the smallest first, so the small fragment's push is
// never queued behind the large one's encoding and transfer (the syncer reads a connection's
// frames in order). Sent lowest fragment index first, the large fragment (0) would lead.
TEST(SyncWorkerPool, ALearnerSendsTheSmallFragmentsPushBeforeTheLargeOnes) {
  yeto::test::TempDir dir;
  const Outcome o = run(dir.path(), 500'000, 1u << 20, 12, 0, 1);
  for (std::size_t l = 0; l < o.events.size(); ++l) {
    std::vector<std::int64_t> order;
    for (const auto& e : o.events[l])
      if (e.value("event", "") == "push") order.push_back(e["fragment"].get<std::int64_t>());
    ASSERT_GE(order.size(), 4u) << "learner " << l;
    EXPECT_EQ(order.front(), 1) << "learner " << l << ": its first push is the small fragment's";
    for (std::size_t i = 1; i < order.size(); ++i)
      EXPECT_FALSE(order[i] == 0 && order[i - 1] == 0)
          << "learner " << l << ": two large pushes in a row at " << i << " (the small one was due too)";
  }
  expect_bit_identical(o);
}
