// host/island: the torchrun-style environment, the island rendezvous and the two collectives the
// learner uses (the ddp gradient average, broadcasts from rank 0). Two ranks run as threads of
// this process over Gloo on 127.0.0.1.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <functional>
#include <map>
#include <thread>

#include "config/config.hpp"
#include "core/error.hpp"
#include "island/env.hpp"
#include "island/island_group.hpp"
#include "island/run_island.hpp"
#include "support/ports.hpp"
#include "support/temp_dir.hpp"

namespace yd = yeto::island;

namespace {

using Vars = std::map<std::string, std::string>;

yd::IslandEnv env_of(const Vars& v) {
  return yd::island_env_from([&](const char* name) -> const char* {
    auto it = v.find(name);
    return it == v.end() ? nullptr : it->second.c_str();
  });
}

std::string usage_error(const Vars& v) {
  try {
    env_of(v);
  } catch (const yeto::UsageError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

yd::IslandEnv rank_env(int rank, int world, std::uint16_t port) {
  yd::IslandEnv e;
  e.rank = rank;
  e.local_rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// Runs `body(rank)` for ranks 0..world-1 on threads; returns each rank's error text ("" = ok).
std::vector<std::string> on_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(IslandEnv, TorchrunVariables) {
  const auto one = env_of({});
  EXPECT_EQ(one.world_size, 1);
  EXPECT_FALSE(one.distributed());
  const auto e = env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "10.0.0.5"},
                         {"MASTER_PORT", "29511"}});
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.master_addr, "10.0.0.5");
  EXPECT_EQ(e.master_port, 29511);
  EXPECT_EQ(e.describe(), "rank 1 of 2 (rendezvous 10.0.0.5:29511)");
  // LOCAL_RANK defaults to RANK; WORLD_SIZE=1 needs no rendezvous.
  EXPECT_EQ(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).world_size, 1);
  EXPECT_EQ(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).local_rank, 1);
}

TEST(IslandEnv, BadOrMissingVariablesNameTheVariable) {
  const Vars base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto without = [&](const std::string& k) {
    Vars v = base;
    v.erase(k);
    return usage_error(v);
  };
  auto with = [&](const std::string& k, const std::string& val) {
    Vars v = base;
    v[k] = val;
    return usage_error(v);
  };
  EXPECT_TRUE(has(without("RANK"), "RANK is not set; set RANK to this process's rank in [0, 1]")) << without("RANK");
  EXPECT_TRUE(has(without("MASTER_ADDR"), "MASTER_ADDR is not set")) << without("MASTER_ADDR");
  EXPECT_TRUE(has(without("MASTER_PORT"), "MASTER_PORT is not set")) << without("MASTER_PORT");
  EXPECT_TRUE(has(usage_error({{"RANK", "0"}}), "RANK=0 is set but WORLD_SIZE is not"));
  EXPECT_TRUE(has(with("RANK", "2"), "RANK=2 is out of range; set RANK to an integer in [0, 1]")) << with("RANK", "2");
  EXPECT_TRUE(has(with("WORLD_SIZE", "two"), "WORLD_SIZE='two' is not an integer"));
  EXPECT_TRUE(has(with("WORLD_SIZE", "0"), "WORLD_SIZE=0 is out of range"));
  EXPECT_TRUE(has(with("MASTER_PORT", "70000"), "MASTER_PORT=70000 is out of range"));
  EXPECT_TRUE(has(with("LOCAL_RANK", "-1"), "LOCAL_RANK=-1 is out of range"));
  EXPECT_TRUE(has(without("RANK"), "torchrun-style launcher"));
}

TEST(IslandEnv, RunConfigDecidesWhetherRanksMayJoin) {
  yeto::test::TempDir dir;
  auto cfg = [&](const std::string& train) {
    return yeto::config::Config::resolve(dir.write("run.toml", "[train]\n" + train), {});
  };
  auto refusal = [&](const std::string& train, const yd::IslandEnv& env) {
    try {
      yd::open_run_island(cfg(train), env);
    } catch (const yeto::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto two = rank_env(0, 2, 1);
  EXPECT_EQ(yd::open_run_island(cfg("shard = \"none\"\n"), yd::IslandEnv{}), nullptr);  // one rank: no group
  EXPECT_TRUE(has(refusal("shard = \"none\"\n", two), "WORLD_SIZE=2 but train.shard = \"none\"; set train.shard = \"ddp\""));
  // fsdp shards the frozen base: full tuning (which trains it) is refused, on one rank too.
  EXPECT_TRUE(has(refusal("shard = \"fsdp\"\n[tuning]\nmode = \"full\"\n", two),
                  "tuning.mode = \"full\" trains the base itself"));
  EXPECT_TRUE(has(refusal("shard = \"fsdp\"\n[tuning]\nmode = \"full\"\n", yd::IslandEnv{}),
                  "use train.shard = \"ddp\" for full tuning"));
  EXPECT_EQ(yd::open_run_island(cfg("shard = \"fsdp\"\n"), yd::IslandEnv{}), nullptr);
  EXPECT_TRUE(has(refusal("shard = \"ddp\"\nisland_ranks = 3\n", two), "WORLD_SIZE=2 but train.island_ranks = 3"));
  EXPECT_TRUE(has(refusal("shard = \"ddp\"\nisland_ranks = 2\n", yd::IslandEnv{}),
                  "train.island_ranks = 2 but WORLD_SIZE is not set"));
}

// The ranks' collective timeout outlasts everything rank 0 may wait for on the syncer while they
// wait in a broadcast, including the end-of-run pushes (up to sync.round_deadline_s).
TEST(IslandEnv, CollectiveTimeoutOutlastsWhatRankZeroWaitsFor) {
  namespace yc = yeto::config;
  EXPECT_EQ(yd::collective_timeout_s(yc::Config::resolve(std::nullopt, {})), 1800.0);  // defaults: 1130 s in all
  const auto long_rounds = yc::Config::resolve(std::nullopt, {{"sync.round_deadline_s", "3000", "--set"}});
  // 600 reconnecting + 60 joining + 3000 for the last merges + 10 for the final cut + 60.
  EXPECT_EQ(yd::collective_timeout_s(long_rounds), 3730.0);
}

TEST(IslandGroup, GradientAverageBroadcastAndValues) {
  const std::uint16_t port = yeto::test::unused_loopback_port();
  std::vector<std::vector<float>> got_a(2), got_b(2), got_c(2), bcast(2);
  std::vector<std::vector<double>> sums(2), maxes(2);
  std::vector<double> means(2);
  std::vector<std::vector<double>> from_root(2);
  std::vector<int> decided_yes(2), decided_no(2);
  std::vector<std::vector<int>> gathered(2);
  const auto errors = on_ranks(2, [&](int r) {
    auto g = yd::IslandGroup::connect(rank_env(r, 2, port), {10.0, 30.0, yd::Backend::gloo});
    EXPECT_EQ(g->backend_name(), "gloo");
    // Hand-checked: rank 0 grads a = [1, 2, 3], b = [[10, -4]]; rank 1 a = [3, 4, 8], b = [[20, 4]];
    // c has a gradient only on rank 0 ([6]); rank 1 counts as zeros.
    auto a = at::zeros({3}, at::kFloat).requires_grad_(true);
    auto b = at::zeros({1, 2}, at::kFloat).requires_grad_(true);
    auto c = at::zeros({1}, at::kFloat).requires_grad_(true);
    a.mutable_grad() = r == 0 ? at::tensor({1.f, 2.f, 3.f}) : at::tensor({3.f, 4.f, 8.f});
    b.mutable_grad() = r == 0 ? at::tensor({10.f, -4.f}).view({1, 2}) : at::tensor({20.f, 4.f}).view({1, 2});
    if (r == 0) c.mutable_grad() = at::tensor({6.f});
    yd::average_gradients(*g, {{"a", a}, {"b", b}, {"c", c}});
    auto vec = [](const at::Tensor& t) {
      const at::Tensor x = t.contiguous();
      return std::vector<float>(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    };
    const auto k = static_cast<std::size_t>(r);
    got_a[k] = vec(a.grad());
    got_b[k] = vec(b.grad());
    got_c[k] = vec(c.grad());
    // Rank 0's weights everywhere.
    auto w = at::full({2, 2}, static_cast<float>(r + 1)).requires_grad_(true);
    yd::broadcast_tensors(*g, {{"w", w}});
    bcast[k] = vec(w.detach());
    sums[k] = yd::allreduce_values(*g, {1.5 + r, 10.0 * r});
    maxes[k] = yd::allreduce_values(*g, {static_cast<double>(r), -static_cast<double>(r)}, yd::ReduceOp::max);
    // Through the interface the learner holds: the mean of 1 and 4; rank 0's decision whatever
    // rank 1 says.
    yd::Collectives& ranks = *g;
    EXPECT_EQ(ranks.world_size(), 2);
    means[k] = yd::mean_of(ranks, r == 0 ? 1.0 : 4.0);
    decided_yes[k] = yd::rank0_decides(ranks, r == 0);
    decided_no[k] = yd::rank0_decides(ranks, r == 1);
    from_root[k] = yd::broadcast_values(ranks, r == 0 ? std::vector<double>{3.0, 0.25} : std::vector<double>{-1.0, 9.0});
    // fsdp's all-gather of byte shards: rank 0 [1, 2, 3], rank 1 [7, 8, 9] -> [1, 2, 3, 7, 8, 9].
    const at::Tensor shard = r == 0 ? at::tensor({1, 2, 3}, at::kByte) : at::tensor({7, 8, 9}, at::kByte);
    at::Tensor full = at::zeros({6}, at::kByte);
    ranks.all_gather(shard, full);
    gathered[k] = std::vector<int>(full.data_ptr<std::uint8_t>(), full.data_ptr<std::uint8_t>() + 6);
    ranks.barrier();
  });
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int r = 0; r < 2; ++r) {
    const auto k = static_cast<std::size_t>(r);
    EXPECT_EQ(got_a[k], (std::vector<float>{2.f, 3.f, 5.5f})) << r;
    EXPECT_EQ(got_b[k], (std::vector<float>{15.f, 0.f})) << r;
    EXPECT_EQ(got_c[k], (std::vector<float>{3.f})) << r;
    EXPECT_EQ(bcast[k], (std::vector<float>{1.f, 1.f, 1.f, 1.f})) << r;
    EXPECT_EQ(sums[k], (std::vector<double>{4.0, 10.0})) << r;
    EXPECT_EQ(maxes[k], (std::vector<double>{1.0, 0.0})) << r;
    EXPECT_EQ(means[k], 2.5) << r;
    EXPECT_EQ(decided_yes[k], 1) << r;
    EXPECT_EQ(decided_no[k], 0) << r;
    EXPECT_EQ(from_root[k], (std::vector<double>{3.0, 0.25})) << r;
    EXPECT_EQ(gathered[k], (std::vector<int>{1, 2, 3, 7, 8, 9})) << r;
  }
}

TEST(IslandCollectives, OneRankLeavesEveryValueAsItIs) {
  yd::SingleRank one;
  yd::Collectives& ranks = one;
  EXPECT_EQ(ranks.rank(), 0);
  EXPECT_EQ(ranks.world_size(), 1);
  auto a = at::tensor({1.f, -2.f}).requires_grad_(true);
  a.mutable_grad() = at::tensor({0.25f, 8.f});
  auto w = at::tensor({3.f, 4.f});
  yd::average_gradients(ranks, {{"a", a}});
  yd::broadcast_tensors(ranks, {{"w", w}});
  EXPECT_TRUE(at::equal(a.grad(), at::tensor({0.25f, 8.f})));
  EXPECT_TRUE(at::equal(w, at::tensor({3.f, 4.f})));
  EXPECT_EQ(yd::allreduce_values(ranks, {0.1, 7.0}, yd::ReduceOp::max), (std::vector<double>{0.1, 7.0}));
  EXPECT_EQ(yd::mean_of(ranks, 0.3), 0.3);
  EXPECT_EQ(yd::broadcast_values(ranks, {2.5, -1.0}), (std::vector<double>{2.5, -1.0}));
  EXPECT_TRUE(yd::rank0_decides(ranks, true));
  EXPECT_FALSE(yd::rank0_decides(ranks, false));
  at::Tensor t = at::tensor({5.0});
  ranks.allreduce(t);
  ranks.broadcast(t, 0);
  ranks.barrier();
  EXPECT_EQ(t.item<double>(), 5.0);
}

TEST(IslandGroup, RankCountMismatchAndMissingRanksFailClearly) {
  {
    // Rank 1 was started with WORLD_SIZE=3 while rank 0 has 2.
    const std::uint16_t port = yeto::test::unused_loopback_port();
    const auto errors = on_ranks(2, [&](int r) {
      yd::IslandGroup::connect(rank_env(r, r == 0 ? 2 : 3, port), {10.0, 30.0, yd::Backend::gloo});
    });
    EXPECT_TRUE(has(errors[1], "WORLD_SIZE=3 on rank 1 of 3 but WORLD_SIZE=2 on rank 0 of the island at 127.0.0.1:"))
        << errors[1];
    EXPECT_TRUE(has(errors[0], "another rank refused to join")) << errors[0];
    EXPECT_TRUE(has(errors[0], "WORLD_SIZE=3")) << errors[0];
  }
  {
    // Rank 1 never comes: rank 0 gives up after the rendezvous timeout, saying how many joined.
    const std::uint16_t port = yeto::test::unused_loopback_port();
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = on_ranks(1, [&](int) { yd::IslandGroup::connect(rank_env(0, 2, port), {1.0, 30.0}); });
    EXPECT_TRUE(has(errors[0], "only 1 of WORLD_SIZE=2 ranks joined within train.rendezvous_timeout_s")) << errors[0];
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  }
  {
    // No rank 0 at MASTER_ADDR:MASTER_PORT: rank 1 gives up after the timeout.
    const std::uint16_t port = yeto::test::unused_loopback_port();
    const auto errors = on_ranks(1, [&](int) { yd::IslandGroup::connect(rank_env(1, 2, port), {1.0, 30.0}); });
    EXPECT_TRUE(has(errors[0], "island rendezvous at 127.0.0.1:")) << errors[0];
    EXPECT_TRUE(has(errors[0], "is rank 0 running with the same MASTER_ADDR and MASTER_PORT?")) << errors[0];
  }
}

}  // namespace
