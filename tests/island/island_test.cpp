// Learner islands of several ranks, as real processes on 127.0.0.1 training the tinyden
// plugin (island_driver): a syncer (`yeto-host syncer`) with an island of two ranks and
// an island of one, started by the embedded launcher (sync/launch.hpp), which sets the
// torchrun variables; and ddp islands without a syncer (determinism, resume).
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dataset.hpp"
#include "support/process.hpp"
#include "support/ports.hpp"
#include "support/temp_dir.hpp"
#include "sync/launch.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;
using yeto::test::read_text;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string run_toml(int steps, const std::string& extra = "") {
  return "[data]\npath = \"data/train.jsonl\"\nheight = 16\nwidth = 16\nworkers = 1\n"
         "[validation]\nsplit = 0.2\nmax_rows = 4\n"
         "[train]\nshard = \"ddp\"\nmax_steps = " + std::to_string(steps) +
         "\nmicro_batch_size = 2\ncheckpoint_every = 0\nrendezvous_timeout_s = 30\n"
         "[optimizer]\nlearning_rate = 0.03\nweight_decay = 0.0\n"
         "[diffusion]\nseed = 5\n" + extra;
}

std::vector<std::string> lines(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read_text(p));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::int64_t applied_of(const std::string& trace_line) {
  const auto at = trace_line.find(" applied ");
  return std::stoll(trace_line.substr(at + 9));
}

TEST(Island, TwoRankIslandAndOneRankIslandBlendTogetherAndEndOnTheFinalCut) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 20);
  // The syncer's budget ends the run (max_steps is only a cap); with quorum 2 merges wait for
  // both islands.
  const auto toml = dir.write("run.toml", run_toml(400,
                                                   "[sync]\nfragments = 2\ninner_steps = 3\nquorum = 2\n"
                                                   "budget_outer_steps = 8\n"
                                                   "heartbeat_s = 0.1\nlearner_timeout_s = 0.8\ngrace_max_s = 1.0\n"
                                                   "round_deadline_s = 3.0\nreconnect_budget_s = 20\nfinal_timeout_s = 5\n"
                                                   "join_timeout_s = 20\n"));
  const fs::path run = dir / "run";
  ys::IslandLaunch L;
  L.run_dir = run;
  L.islands = 2;
  L.island_ranks = {2, 1};
  L.syncer_argv = {YETO_HOST_BIN, "syncer", "--log-level", "warn", "--config", toml.string(), "--set", "sync.islands=2"};
  // The one-rank island starts once the two-rank island has joined (it starts slower: two
  // processes and their rendezvous), so that the budget cannot be spent before both are in.
  const fs::path joined_marker = run / "island-0-joined";
  L.learner_argv = [&](const ys::IslandSlot& s) {
    std::vector<std::string> a = {ISLAND_DRIVER, toml.string(), s.dir.string(), "--out", (s.dir / "dump").string(),
                                  "--syncer", s.syncer, "--secret", s.secret.string(), "--id", s.id,
                                  "--island", std::to_string(s.index), "--islands", "2", "--step-ms", "20"};
    a.push_back(s.index == 0 ? "--joined-marker" : "--start-after");
    a.push_back(joined_marker.string());
    EXPECT_EQ(s.ranks, s.index == 0 ? 2u : 1u);
    return a;
  };
  L.syncer_grace_s = 10;
  const auto r = ys::run_islands(L);
  ASSERT_EQ(r.exit_code(), 0) << read_text(run / "island-0" / "learner.log") << read_text(run / "island-0" / "learner-rank1.log")
                              << read_text(run / "island-1" / "learner.log") << read_text(run / "syncer" / "syncer.log");
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 0}));

  // Both ranks of island 0 hold the same bytes at every step boundary (after every blend).
  const auto t0 = lines(run / "island-0" / "dump.rank0.trace");
  const auto t1 = lines(run / "island-0" / "dump.rank1.trace");
  ASSERT_GE(t0.size(), 3u);
  EXPECT_EQ(t0, t1);
  int blends = 0;  // step boundaries where global fragments were blended in (not the join or the final cut)
  for (std::size_t i = 1; i + 1 < t0.size(); ++i)
    if (applied_of(t0[i]) > applied_of(t0[i - 1])) ++blends;
  EXPECT_GE(blends, 1) << read_text(run / "island-0" / "dump.rank0.trace");

  // Every rank of every island ends bit-identical to the syncer's final cut.
  const std::string cut = read_text(run / "syncer" / "final_cut.bin");
  ASSERT_GT(cut.size(), 0u);
  EXPECT_TRUE(read_text(run / "island-0" / "dump.rank0.bin") == cut);
  EXPECT_TRUE(read_text(run / "island-0" / "dump.rank1.bin") == cut);
  EXPECT_TRUE(read_text(run / "island-1" / "dump.rank0.bin") == cut);

  // The syncer saw two learners: the two-rank island is one of them.
  std::set<std::string> joined, merged;
  for (const auto& rec : ys::read_tape_records(run / "syncer" / "tape.jsonl")) {
    if (rec["event"] == "join" || rec["event"] == "rejoin")
      for (const auto& l : rec["learners"]) joined.insert(l.get<std::string>());
    if (rec["event"] == "merge")
      for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
  }
  EXPECT_EQ(joined, (std::set<std::string>{"island-0", "island-1"}));
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"}));
  const json fin = json::parse(read_text(run / "syncer" / "final.json"));
  EXPECT_EQ(fin["acked"].size(), 2u) << fin.dump();

  // Only rank 0 wrote the island's run directory: one metrics record per step.
  std::map<std::int64_t, int> per_step;
  for (const auto& l : lines(run / "island-0" / "metrics.jsonl")) {
    const auto j = json::parse(l);
    if (j.contains("loss")) ++per_step[j["step"].get<std::int64_t>()];
  }
  ASSERT_FALSE(per_step.empty());
  for (const auto& [step, n] : per_step) EXPECT_EQ(n, 1) << step;
  EXPECT_TRUE(fs::exists(run / "island-0" / "lora.safetensors"));
  EXPECT_EQ(json::parse(read_text(run / "island-0" / "provenance.json"))["extra"]["learner"]["island_ranks"], 2);
}

// Runs one ddp island of `world` ranks (no syncer) on `cfg`, writing `out`; returns the exit codes.
std::vector<int> ddp_island(const fs::path& cfg, const fs::path& out, int world, int port,
                            const std::vector<std::string>& extra = {}) {
  std::vector<yeto::test::ProcessResult> res(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::vector<std::string> argv = {ISLAND_DRIVER, cfg.string(), out.string(), "--out", (out.string() + "-dump")};
      argv.insert(argv.end(), extra.begin(), extra.end());
      res[static_cast<std::size_t>(r)] = yeto::test::run_process(
          argv, "", {{"RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(r)},
                     {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}});
    });
  for (auto& t : threads) t.join();
  std::vector<int> codes;
  for (const auto& p : res) {
    codes.push_back(p.exit_code);
    if (p.exit_code != 0) ADD_FAILURE() << p.all();
  }
  return codes;
}

TEST(Island, DdpIsDeterministicForTheSameSeedAndTopologyAndResumesExactly) {
  yeto::test::TempDir dir;
  // 11 training rows over 2 ranks: uneven shards (6 and 5 rows), so the ranks' data positions
  // differ after a few epochs and resuming must restore each rank's own.
  yeto::learner::test::write_dataset(dir / "data", 14);
  const auto toml = dir.write("run.toml", run_toml(8));
  ASSERT_EQ(ddp_island(toml, dir / "a", 2, yeto::test::unused_loopback_port()), (std::vector<int>{0, 0}));
  ASSERT_EQ(ddp_island(toml, dir / "b", 2, yeto::test::unused_loopback_port()), (std::vector<int>{0, 0}));
  const std::string lora_a = read_text(dir / "a" / "lora.safetensors");
  EXPECT_TRUE(lora_a == read_text(dir / "b" / "lora.safetensors"));
  // Both ranks hold the same tensors at every step and at the end.
  EXPECT_EQ(lines(dir / "a-dump.rank0.trace"), lines(dir / "a-dump.rank1.trace"));
  EXPECT_TRUE(read_text(dir / "a-dump.rank0.bin") == read_text(dir / "a-dump.rank1.bin"));
  // The same numbers on every rank, and training changed the weights.
  const auto trace = lines(dir / "a-dump.rank0.trace");
  EXPECT_NE(trace.front().substr(trace.front().find("sha256")), trace.back().substr(trace.back().find("sha256")));

  // Stopped (save_quit) after step 5 and resumed: the same bytes as the uninterrupted run.
  ASSERT_EQ(ddp_island(toml, dir / "c", 2, yeto::test::unused_loopback_port(), {"--save-quit-at", "5"}), (std::vector<int>{0, 0}));
  EXPECT_FALSE(fs::exists(dir / "c" / "lora.safetensors"));
  const json st = json::parse(read_text(dir / "c" / "checkpoints" / read_text(dir / "c" / "checkpoints" / "latest").substr(0, 13) / "state.json"));
  EXPECT_EQ(st["step"], 5);
  EXPECT_EQ(st["rank_positions"].size(), 2u) << st.dump();
  ASSERT_EQ(ddp_island(toml, dir / "c", 2, yeto::test::unused_loopback_port()), (std::vector<int>{0, 0}));
  EXPECT_TRUE(read_text(dir / "c" / "lora.safetensors") == lora_a);
}

TEST(Island, ABadEnvironmentIsRefusedBeforeTraining) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 6);
  const auto toml = dir.write("run.toml", run_toml(2));
  const auto p = yeto::test::run_process({ISLAND_DRIVER, toml.string(), (dir / "run").string(), "--out",
                                          (dir / "dump").string()},
                                         "", {{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_TRUE(has(p.all(), "WORLD_SIZE=2 but RANK is not set; set RANK")) << p.all();
  EXPECT_FALSE(fs::exists(dir / "run"));
}

}  // namespace
