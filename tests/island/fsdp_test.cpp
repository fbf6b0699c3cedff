// train.shard = "fsdp" end to end: rank processes of island_driver training the tiny Flux
// repository (tests/fixtures/repos/flux-tiny) through learner::run, its denoiser's blocks sharded
// across the ranks by the family kit, against ddp islands of the same topology and seed (every
// rank then holds the whole base). What must hold: the same LoRA bytes as ddp on 2 and 3 ranks
// (also under fp8 storage, activation checkpointing and micro_batch_size = auto), a save_quit /
// resume and a kill -9 / resume ending on the same bytes, and a syncer run with a 2-rank fsdp
// island next to a 1-rank ddp island whose fsdp ranks stay bit-identical at every step boundary.
#include <gtest/gtest.h>

#include <csignal>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dataset.hpp"
#include "support/ports.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/launch.hpp"
#include "sync/tape.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;
using yeto::test::read_text;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string flux_toml(const std::string& shard, int steps, const std::string& train_extra = "",
                      const std::string& model_extra = "", const std::string& tail = "") {
  const fs::path repo = fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny";
  return "[run]\nthreads = 1\n"
         "[model]\nid = \"" + repo.string() + "\"\nadapter = \"flux\"\nprecision = \"fp32\"\n" + model_extra +
         "[data]\npath = \"data/train.jsonl\"\nheight = 32\nwidth = 32\nworkers = 1\n"
         "[lora]\nr = 4\nalpha = 4.0\n"
         "[train]\nshard = \"" + shard + "\"\nmax_steps = " + std::to_string(steps) +
         "\nmicro_batch_size = 2\ncheckpoint_every = 0\nrendezvous_timeout_s = 30\n" + train_extra +
         "[optimizer]\nlearning_rate = 0.002\nweight_decay = 0.0\nwarmup_steps = 1\n"
         "[diffusion]\nseed = 5\n" + tail;
}

std::vector<std::string> lines(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read_text(p));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// One island of `world` rank processes (no syncer) on `cfg`, writing `out`; returns every rank's
// result (a failing rank is not a test failure here: callers check).
std::vector<yeto::test::ProcessResult> island(const fs::path& cfg, const fs::path& out, int world,
                                              const std::vector<std::string>& extra = {}) {
  const int port = yeto::test::unused_loopback_port();
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
  return res;
}

std::string all_of(const std::vector<yeto::test::ProcessResult>& res) {
  std::string s;
  for (std::size_t r = 0; r < res.size(); ++r)
    s += "==== rank " + std::to_string(r) + " (exit " + std::to_string(res[r].exit_code) + ")\n" + res[r].all();
  return s;
}

// Every rank exited 0.
::testing::AssertionResult ok(const std::vector<yeto::test::ProcessResult>& res) {
  for (const auto& p : res)
    if (p.exit_code != 0) return ::testing::AssertionFailure() << all_of(res);
  return ::testing::AssertionSuccess();
}

// The run's adapter, and every rank's final trainable bytes equal to rank 0's.
std::string adapter_of(const fs::path& out, int world) {
  const std::string bin0 = read_text(out.string() + "-dump.rank0.bin");
  EXPECT_FALSE(bin0.empty());
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(read_text(out.string() + "-dump.rank" + std::to_string(r) + ".bin") == bin0) << "rank " << r;
    EXPECT_EQ(lines(out.string() + "-dump.rank0.trace"), lines(out.string() + "-dump.rank" + std::to_string(r) + ".trace"));
  }
  return read_text(out / "lora.safetensors");
}

TEST(Fsdp, TwoRanksTrainTheSameBytesAsDdpAndResumeExactlyAfterSaveQuitAndAKilledRank) {
  yeto::test::TempDir dir;
  // 11 training rows over 2 ranks: uneven shards (6 and 5 rows).
  yeto::learner::test::write_dataset(dir / "data", 14, {}, 32);
  const auto ddp = dir.write("ddp.toml", flux_toml("ddp", 6));
  std::string fsdp_toml = flux_toml("fsdp", 6);
  const std::string no_checkpoints = "checkpoint_every = 0\n";
  fsdp_toml.replace(fsdp_toml.find(no_checkpoints), no_checkpoints.size(), "checkpoint_every = 2\n");
  const auto fsdp = dir.write("fsdp.toml", fsdp_toml);

  auto a = island(ddp, dir / "ddp", 2);
  ASSERT_TRUE(ok(a));
  auto b = island(fsdp, dir / "fsdp", 2);
  ASSERT_TRUE(ok(b));
  // Each rank kept half of the denoiser's blocks.
  EXPECT_TRUE(has(b[0].all(), "train.shard = fsdp: FluxTransformer2DModel keeps 4 blocks as shards of")) << b[0].all();
  EXPECT_TRUE(has(b[1].all(), "on rank 1 of 2")) << b[1].all();
  const std::string lora_ddp = adapter_of(dir / "ddp", 2);
  const std::string lora_fsdp = adapter_of(dir / "fsdp", 2);
  ASSERT_FALSE(lora_ddp.empty());
  EXPECT_TRUE(lora_fsdp == lora_ddp) << "fsdp's adapter differs from ddp's";
  const auto trace = lines(dir / "fsdp-dump.rank0.trace");
  EXPECT_NE(trace.front().substr(trace.front().find("sha256")), trace.back().substr(trace.back().find("sha256")));

  // save_quit after step 3, then resumed: the same bytes.
  ASSERT_TRUE(ok(island(fsdp, dir / "quit", 2, {"--save-quit-at", "3"})));
  EXPECT_FALSE(fs::exists(dir / "quit" / "lora.safetensors"));
  ASSERT_TRUE(ok(island(fsdp, dir / "quit", 2)));
  EXPECT_TRUE(read_text(dir / "quit" / "lora.safetensors") == lora_fsdp);

  // Rank 1 killed (SIGKILL) after step 3: rank 0 ends with an error naming itself and its
  // collective, the step-2 checkpoint stays intact, and resuming ends on the same bytes.
  auto k = island(fsdp, dir / "kill", 2, {"--kill-rank-at", "3"});
  EXPECT_EQ(k[1].exit_code, 128 + SIGKILL) << all_of(k);
  EXPECT_NE(k[0].exit_code, 0) << all_of(k);
  EXPECT_TRUE(has(k[0].all(), "failed on rank 0 of 2")) << k[0].all();
  EXPECT_TRUE(has(k[0].all(), "a peer rank exited")) << k[0].all();
  EXPECT_EQ(read_text(dir / "kill" / "checkpoints" / "latest").substr(0, 13), "step-00000002");
  EXPECT_FALSE(fs::exists(dir / "kill" / "lora.safetensors"));
  auto resumed = island(fsdp, dir / "kill", 2);
  ASSERT_TRUE(ok(resumed));
  EXPECT_TRUE(has(resumed[0].all(), "resum")) << resumed[0].all();
  EXPECT_TRUE(read_text(dir / "kill" / "lora.safetensors") == lora_fsdp);
}

// Also with validation renders (rank 0 writes them; its peers generate with it, their gathers in
// lock-step), which change nothing that is trained.
TEST(Fsdp, ThreeRanksTrainTheSameBytesAsDdp) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 14, {}, 32);
  auto a = island(dir.write("ddp.toml", flux_toml("ddp", 4)), dir / "ddp", 3);
  ASSERT_TRUE(ok(a));
  const std::string renders = "[validation]\nprompts = [\"a red horizontal gradient\"]\nsample_every = 2\nsample_steps = 2\n";
  auto b = island(dir.write("fsdp.toml", flux_toml("fsdp", 4, "", "", renders)), dir / "fsdp", 3);
  ASSERT_TRUE(ok(b));
  EXPECT_TRUE(has(b[2].all(), "on rank 2 of 3")) << b[2].all();
  for (const char* png : {"samples/step-00000000/p0.png", "samples/step-00000002/p0.png", "samples/final/p0.png"})
    EXPECT_TRUE(fs::exists(dir / "fsdp" / png)) << png << "\n" << all_of(b);
  EXPECT_EQ(lines(dir / "fsdp" / "samples" / "index.jsonl").size(), 3u);
  const std::string lora_ddp = adapter_of(dir / "ddp", 3);
  ASSERT_FALSE(lora_ddp.empty());
  EXPECT_TRUE(adapter_of(dir / "fsdp", 3) == lora_ddp);
}

// fp8 storage (the shards hold e4m3 codes), activation checkpointing on, and the micro batch
// probed (micro_batch_size = auto, every rank probing in lock-step): still ddp's bytes.
TEST(Fsdp, Fp8StorageActivationCheckpointingAndAutoMicroBatchMatchDdp) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 14, {}, 32);
  const std::string train = "activation_checkpointing = true\nmemory_budget_mb = 100000\ngradient_accumulation = 2\n";
  auto toml = [&](const std::string& shard) {
    std::string t = flux_toml(shard, 3, train, "storage = \"fp8\"\n");
    const std::string fixed = "micro_batch_size = 2\n";
    t.replace(t.find(fixed), fixed.size(), "micro_batch_size = \"auto\"\n");
    return t;
  };
  auto a = island(dir.write("ddp.toml", toml("ddp")), dir / "ddp", 2);
  ASSERT_TRUE(ok(a));
  auto b = island(dir.write("fsdp.toml", toml("fsdp")), dir / "fsdp", 2);
  ASSERT_TRUE(ok(b));
  EXPECT_TRUE(has(b[0].all(), "micro_batch_size = auto")) << b[0].all();
  const std::string lora_ddp = adapter_of(dir / "ddp", 2);
  ASSERT_FALSE(lora_ddp.empty());
  EXPECT_TRUE(adapter_of(dir / "fsdp", 2) == lora_ddp);
}

// A syncer with a 2-rank fsdp island and a 1-rank ddp island (the embedded launcher sets the
// torchrun variables): the fsdp island's ranks hold the same bytes at every step boundary, and
// every rank ends bit-identical to the final cut.
TEST(Fsdp, AnFsdpIslandAndADdpIslandBlendThroughTheSyncer) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 20, {}, 32);
  const std::string sync = "[sync]\nfragments = 2\ninner_steps = 2\nquorum = 2\nbudget_outer_steps = 4\n"
                           "heartbeat_s = 0.1\nlearner_timeout_s = 3\ngrace_max_s = 4\nround_deadline_s = 8\n"
                           "reconnect_budget_s = 30\nfinal_timeout_s = 10\njoin_timeout_s = 30\n";
  const auto fsdp = dir.write("fsdp.toml", flux_toml("fsdp", 400, "", "", sync));
  const auto ddp = dir.write("ddp.toml", flux_toml("ddp", 400, "", "", sync));
  const fs::path run = dir / "run";
  ys::IslandLaunch L;
  L.run_dir = run;
  L.islands = 2;
  L.island_ranks = {2, 1};
  L.syncer_argv = {YETO_HOST_BIN, "syncer", "--log-level", "warn", "--config", fsdp.string(), "--set", "sync.islands=2"};
  const fs::path joined_marker = run / "island-0-joined";
  L.learner_argv = [&](const ys::IslandSlot& s) {
    std::vector<std::string> a = {ISLAND_DRIVER, (s.index == 0 ? fsdp : ddp).string(), s.dir.string(), "--out",
                                  (s.dir / "dump").string(), "--syncer", s.syncer, "--secret", s.secret.string(),
                                  "--id", s.id, "--island", std::to_string(s.index), "--islands", "2"};
    a.push_back(s.index == 0 ? "--joined-marker" : "--start-after");
    a.push_back(joined_marker.string());
    return a;
  };
  L.syncer_grace_s = 10;
  const auto r = ys::run_islands(L);
  ASSERT_EQ(r.exit_code(), 0) << read_text(run / "island-0" / "learner.log") << read_text(run / "island-0" / "learner-rank1.log")
                              << read_text(run / "island-1" / "learner.log") << read_text(run / "syncer" / "syncer.log");
  EXPECT_EQ(r.island_exits, (std::vector<int>{0, 0}));
  EXPECT_TRUE(has(read_text(run / "island-0" / "learner-rank1.log"), "on rank 1 of 2"));

  const auto t0 = lines(run / "island-0" / "dump.rank0.trace");
  const auto t1 = lines(run / "island-0" / "dump.rank1.trace");
  ASSERT_GE(t0.size(), 3u);
  EXPECT_EQ(t0, t1);
  int blends = 0;
  for (std::size_t i = 1; i + 1 < t0.size(); ++i)
    if (std::stoll(t0[i].substr(t0[i].find(" applied ") + 9)) > std::stoll(t0[i - 1].substr(t0[i - 1].find(" applied ") + 9)))
      ++blends;
  EXPECT_GE(blends, 1) << read_text(run / "island-0" / "dump.rank0.trace");

  const std::string cut = read_text(run / "syncer" / "final_cut.bin");
  ASSERT_GT(cut.size(), 0u);
  EXPECT_TRUE(read_text(run / "island-0" / "dump.rank0.bin") == cut);
  EXPECT_TRUE(read_text(run / "island-0" / "dump.rank1.bin") == cut);
  EXPECT_TRUE(read_text(run / "island-1" / "dump.rank0.bin") == cut);
  std::set<std::string> merged;
  for (const auto& rec : ys::read_tape_records(run / "syncer" / "tape.jsonl"))
    if (rec["event"] == "merge")
      for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"}));
}

// Block swap moves blocks between host memory and a GPU: a CPU run refuses the key, naming it.
TEST(Fsdp, BlockSwapIsRefusedOnTheCpu) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 6, {}, 32);
  const auto res = island(dir.write("swap.toml", flux_toml("none", 2, "", "block_swap = 1\n")), dir / "swap", 1);
  ASSERT_EQ(res.size(), 1u);
  EXPECT_NE(res[0].exit_code, 0) << res[0].all();
  EXPECT_TRUE(has(res[0].all(), "model.block_swap = 1 keeps blocks' frozen weights in host memory")) << res[0].all();
  EXPECT_TRUE(has(res[0].all(), "set model.block_swap = 0")) << res[0].all();
  EXPECT_FALSE(fs::exists(dir / "swap" / "lora.safetensors"));
}

TEST(Fsdp, FullTuningIsRefused) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 6, {}, 32);
  auto full = island(dir.write("full.toml", flux_toml("fsdp", 2, "", "", "[tuning]\nmode = \"full\"\n")), dir / "full", 2);
  for (const auto& p : full) {
    EXPECT_EQ(p.exit_code, 2) << p.all();
    EXPECT_TRUE(has(p.all(), "tuning.mode = \"full\" trains the base itself")) << p.all();
  }
}

}  // namespace
