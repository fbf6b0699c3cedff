// Bucketing, sharding, seeded shuffling and the prefetching loader.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "data/loader.hpp"
#include "data/sampler.hpp"

namespace yeto::data {
namespace {

using ::testing::HasSubstr;

std::vector<ShapeKey> mixed_shapes(std::size_t n) {
  const ShapeKey kinds[] = {{false, 1, 512, 512}, {false, 1, 512, 768}, {false, 16, 256, 256}, {true, 1, 64, 64}};
  std::vector<ShapeKey> s;
  for (std::size_t i = 0; i < n; ++i) s.push_back(kinds[(i * 7 + i / 3) % 4]);
  return s;
}

// Learner islands of different rank counts (2 ranks, 1 rank, 3 ranks): every island takes every
// third row and its ranks split that again, so no row is trained twice in an epoch and every row
// once; an island of one rank keeps the shard it has without ranks.
TEST(DataSampler, IslandsOfDifferentRankCountsGetDisjointShards) {
  const auto shapes = mixed_shapes(101);
  const std::vector<int> ranks_per_island = {2, 1, 3};
  for (const bool bucket : {false, true}) {
    std::multiset<std::size_t> seen;
    for (int island = 0; island < 3; ++island) {
      std::set<std::size_t> island_rows;
      for (int r = 0; r < ranks_per_island[static_cast<std::size_t>(island)]; ++r) {
        SamplerOptions o;
        o.seed = 9;
        o.rank = island;
        o.world = 3;
        o.sub_rank = r;
        o.sub_world = ranks_per_island[static_cast<std::size_t>(island)];
        o.batch_size = 3;
        o.bucket_by_shape = bucket;
        for (const auto& batch : plan_batches(shapes, o))
          for (const std::size_t row : batch) {
            seen.insert(row);
            island_rows.insert(row);
          }
      }
      // The island's ranks together train exactly the shard one rank would.
      SamplerOptions whole;
      whole.seed = 9;
      whole.rank = island;
      whole.world = 3;
      const auto one = shard_rows(shapes.size(), whole);
      EXPECT_EQ(island_rows, std::set<std::size_t>(one.begin(), one.end())) << island;
    }
    ASSERT_EQ(seen.size(), shapes.size());
    for (std::size_t r = 0; r < shapes.size(); ++r) EXPECT_EQ(seen.count(r), 1u) << r;
  }
  SamplerOptions bad;
  bad.sub_rank = 2;
  bad.sub_world = 2;
  EXPECT_THROW(shard_rows(10, bad), yeto::UsageError);
}

TEST(DataSampler, BucketsNeverMixShapesAndCoverEveryRowOnce) {
  const auto shapes = mixed_shapes(103);
  for (int world : {1, 2, 3}) {
    std::multiset<std::size_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      SamplerOptions o;
      o.seed = 42;
      o.rank = rank;
      o.world = world;
      o.batch_size = 4;
      o.bucket_by_shape = true;
      for (const auto& batch : plan_batches(shapes, o)) {
        ASSERT_FALSE(batch.empty());
        ASSERT_LE(batch.size(), 4u);
        for (const std::size_t r : batch) {
          EXPECT_EQ(shapes[r], shapes[batch[0]]) << "mixed shapes in a micro batch";
          seen.insert(r);
        }
      }
    }
    // Disjoint shards whose union is every row exactly once.
    ASSERT_EQ(seen.size(), shapes.size()) << "world " << world;
    for (std::size_t r = 0; r < shapes.size(); ++r) EXPECT_EQ(seen.count(r), 1u) << r;
  }
}

TEST(DataSampler, PlansAreDeterministicPerSeedAndEpoch) {
  const auto shapes = mixed_shapes(64);
  SamplerOptions o;
  o.seed = 7;
  o.batch_size = 3;
  o.bucket_by_shape = true;
  const BatchPlan a = plan_batches(shapes, o);
  EXPECT_EQ(a, plan_batches(shapes, o));
  SamplerOptions other = o;
  other.seed = 8;
  EXPECT_NE(a, plan_batches(shapes, other));
  other = o;
  other.epoch = 1;
  EXPECT_NE(a, plan_batches(shapes, other));
  // Buckets interleave: the first batches are not all from one bucket.
  std::set<ShapeKey> first;
  for (std::size_t i = 0; i < 6; ++i) first.insert(shapes[a[i][0]]);
  EXPECT_GT(first.size(), 1u);
  // A fixed stream: these values are part of the reproducibility contract.
  SeededStream s(1, 2, 3);
  const std::uint64_t x = s.next();
  EXPECT_EQ(SeededStream(1, 2, 3).next(), x);
  EXPECT_NE(SeededStream(1, 2, 4).next(), x);
}

TEST(DataSampler, WithoutBucketingRowsAreCutInShuffledOrderAndDropLastWorks) {
  std::vector<ShapeKey> shapes(10, ShapeKey{false, 1, 8, 8});
  SamplerOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  const BatchPlan p = plan_batches(shapes, o);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(p[2], (std::vector<std::size_t>{8, 9}));
  o.drop_last = true;
  EXPECT_EQ(plan_batches(shapes, o).size(), 2u);
  o.rank = 2;
  o.world = 2;
  EXPECT_THROW(plan_batches(shapes, o), UsageError);
}

Sample fake_sample(std::size_t row) {
  Sample s;
  s.row = row;
  s.prompt = "row " + std::to_string(row);
  return s;
}

TEST(DataLoader, OutputOrderIsThePlanOrderWhateverTheThreads) {
  BatchPlan plan;
  for (std::size_t b = 0; b < 40; ++b) plan.push_back({b * 2, b * 2 + 1});
  std::vector<std::vector<std::size_t>> results;
  for (int workers : {0, 1, 2, 4}) {
    auto decode = [&](std::size_t row) {
      // Uneven work so threads finish out of order.
      std::this_thread::sleep_for(std::chrono::microseconds((row * 7919) % 13 * 50));
      return fake_sample(row);
    };
    Loader loader(plan, decode, {workers, 3, BadRowPolicy::error});
    std::vector<std::size_t> order;
    while (auto b = loader.next()) {
      for (const auto& s : b->samples) order.push_back(s.row);
    }
    results.push_back(order);
  }
  for (std::size_t i = 0; i < results.front().size(); ++i) ASSERT_EQ(results.front()[i], i);
  for (const auto& r : results) EXPECT_EQ(r, results.front());
}

TEST(DataLoader, PrefetchWindowIsBounded) {
  BatchPlan plan;
  for (std::size_t b = 0; b < 30; ++b) plan.push_back({b});
  std::mutex mu;
  std::size_t highest_started = 0;
  std::size_t consumed = 0;
  std::size_t worst_lead = 0;
  auto decode = [&](std::size_t row) {
    std::lock_guard<std::mutex> lock(mu);
    highest_started = std::max(highest_started, row + 1);
    worst_lead = std::max(worst_lead, highest_started - consumed);
    return fake_sample(row);
  };
  Loader loader(plan, decode, {3, 4, BadRowPolicy::error});
  while (auto b = loader.next()) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow consumer
    std::lock_guard<std::mutex> lock(mu);
    ++consumed;
  }
  EXPECT_EQ(consumed, 30u);
  // A worker may start batch i only while i < returned + prefetch; `consumed` lags the
  // loader's own count by at most the batch being handed over.
  EXPECT_LE(worst_lead, 4u + 1u);
}

TEST(DataLoader, BadRowsStopOrAreSkippedPerPolicy) {
  BatchPlan plan = {{0, 1}, {2, 3}, {4}};
  auto decode = [](std::size_t row) -> Sample {
    if (row == 3) throw Error("m.jsonl line 4: corrupt image", ExitCode::bad_input);
    if (row == 4) throw Error("m.jsonl line 5: empty file", ExitCode::bad_input);
    return fake_sample(row);
  };
  {
    Loader loader(plan, decode, {2, 2, BadRowPolicy::error});
    EXPECT_EQ(loader.next()->samples.size(), 2u);
    try {
      loader.next();
      FAIL();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("line 4: corrupt image"));
    }
  }
  Loader loader(plan, decode, {2, 2, BadRowPolicy::skip});
  EXPECT_EQ(loader.next()->samples.size(), 2u);
  const auto b = loader.next();
  ASSERT_EQ(b->samples.size(), 1u);
  ASSERT_EQ(b->skipped.size(), 1u);
  EXPECT_EQ(b->skipped[0].row, 3u);
  EXPECT_FALSE(loader.next());  // the last batch had only a bad row
  EXPECT_EQ(loader.skipped_rows(), 2u);
}

}  // namespace
}  // namespace yeto::data
