#include "data/sampler.hpp"

#include <map>
#include <numeric>

#include "core/error.hpp"

namespace yeto::data {
namespace {

std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kRowsStream = 0x726f7773;      // "rows"
constexpr std::uint64_t kBatchesStream = 0x62617463;   // "batc"

}  // namespace

SeededStream::SeededStream(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) : state_(seed) {
  for (const std::uint64_t label : {a, b, c}) {
    std::uint64_t t = state_ ^ label;
    state_ = splitmix(t) ^ (label * 0xD6E8FEB86659FD93ull);
  }
}

std::uint64_t SeededStream::next() { return splitmix(state_); }

std::uint64_t SeededStream::below(std::uint64_t n) {
  if (n <= 1) return 0;
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);  // reject the biased tail
  std::uint64_t x;
  do x = next();
  while (x >= limit);
  return x % n;
}

std::vector<std::size_t> shard_rows(std::size_t n, const SamplerOptions& o) {
  if (o.world < 1) throw UsageError("data sharding: world size must be at least 1, got " + std::to_string(o.world));
  if (o.rank < 0 || o.rank >= o.world)
    throw UsageError("data sharding: logical rank " + std::to_string(o.rank) + " is outside 0.." + std::to_string(o.world - 1));
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  if (o.shuffle) SeededStream(o.seed, kRowsStream, o.epoch).shuffle(perm);
  if (o.sub_world < 1 || o.sub_rank < 0 || o.sub_rank >= o.sub_world)
    throw UsageError("data sharding: island rank " + std::to_string(o.sub_rank) + " is outside 0.." +
                     std::to_string(o.sub_world - 1));
  // Island `rank` takes positions rank, rank + world, ...; its rank sub_rank every sub_world-th
  // of those: position rank + world * (sub_rank + sub_world * j).
  std::vector<std::size_t> mine;
  const auto step = static_cast<std::size_t>(o.world) * static_cast<std::size_t>(o.sub_world);
  mine.reserve(n / step + 1);
  for (std::size_t p = static_cast<std::size_t>(o.rank) + static_cast<std::size_t>(o.world) * static_cast<std::size_t>(o.sub_rank);
       p < n; p += step)
    mine.push_back(perm[p]);
  return mine;
}

BatchPlan plan_batches(const std::vector<ShapeKey>& shapes, const SamplerOptions& o) {
  if (o.batch_size < 1) throw UsageError("micro batch size must be at least 1, got " + std::to_string(o.batch_size));
  const std::vector<std::size_t> mine = shard_rows(shapes.size(), o);
  const auto bs = static_cast<std::size_t>(o.batch_size);
  BatchPlan plan;
  auto cut = [&](const std::vector<std::size_t>& rows) {
    for (std::size_t i = 0; i < rows.size(); i += bs) {
      const std::size_t end = std::min(rows.size(), i + bs);
      if (o.drop_last && end - i < bs) break;
      plan.emplace_back(rows.begin() + static_cast<std::ptrdiff_t>(i), rows.begin() + static_cast<std::ptrdiff_t>(end));
    }
  };
  if (!o.bucket_by_shape) {
    cut(mine);
    return plan;
  }
  std::map<ShapeKey, std::vector<std::size_t>> buckets;  // ordered: the same on every machine
  for (const std::size_t r : mine) buckets[shapes[r]].push_back(r);
  for (const auto& [key, rows] : buckets) cut(rows);
  if (o.shuffle)
    SeededStream(o.seed, kBatchesStream, o.epoch,
                 static_cast<std::uint64_t>(o.rank) + static_cast<std::uint64_t>(o.world) * static_cast<std::uint64_t>(o.sub_rank))
        .shuffle(plan);
  return plan;
}

}  // namespace yeto::data
