// The order rows are trained in: seeded shuffling, sharding by logical rank, and (with
// data.bucket_by_shape) bucketing by (frames, height, width) so shapes never mix in a micro
// batch. Everything is a pure function of (seed, epoch, rank, world, shapes), with its own
// shuffle (not std::shuffle, whose output differs between standard libraries), so every
// machine computes the same plan.
//
// Per epoch: one global permutation of all rows (identical on every rank); rank r takes the
// rows at positions r, r + world, r + 2*world, ... -- the shards are disjoint and together
// cover every row once. Without bucketing the rank's rows are cut into micro batches in that
// order. With bucketing they are grouped by shape key (keeping the shuffled order inside each
// bucket), each bucket is cut into micro batches, and the list of all batches is shuffled
// again with a per-rank stream, so buckets interleave.
#pragma once

#include <cstdint>
#include <vector>

#include "data/row.hpp"

namespace yeto::data {

struct SamplerOptions {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  int rank = 0;        // this learner island's index (its data shard: every world-th row)
  int world = 1;       // number of learner islands
  // The ranks of the island split its shard again: rank sub_rank of sub_world takes every
  // sub_world-th row of it. Islands of different rank counts so keep disjoint rows.
  int sub_rank = 0;
  int sub_world = 1;
  std::int64_t batch_size = 1;
  bool bucket_by_shape = false;
  bool shuffle = true;
  bool drop_last = false;  // drop incomplete micro batches (per bucket when bucketing)
};

using BatchPlan = std::vector<std::vector<std::size_t>>;  // row indices per micro batch

// `shapes[i]` is the shape key of row i. Throws yeto::UsageError on rank/world/batch misuse.
BatchPlan plan_batches(const std::vector<ShapeKey>& shapes, const SamplerOptions& options);

// The rows rank `rank` of `world` owns in `epoch` (the sharding step alone).
std::vector<std::size_t> shard_rows(std::size_t row_count, const SamplerOptions& options);

// Deterministic 64-bit stream keyed by a seed and labels (splitmix64 mixing).
class SeededStream {
 public:
  explicit SeededStream(std::uint64_t seed, std::uint64_t a = 0, std::uint64_t b = 0, std::uint64_t c = 0);
  std::uint64_t next();
  std::uint64_t below(std::uint64_t n);  // uniform in [0, n), unbiased
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(below(i))]);
  }

 private:
  std::uint64_t state_;
};

}  // namespace yeto::data
