// The collectives a learner island runs over its ranks, behind one interface: IslandGroup (the
// c10d process group of several ranks, island_group.hpp) and SingleRank (one process, where
// every collective leaves its input as it is). The learner holds one either way and calls the
// same functions, so one rank takes the multi-rank code path at no cost (DilocoSync is handed
// an IslandGroup only for islands of several ranks: only rank 0 talks to the syncer and its
// protocol differs from one rank's). Collectives are
// blocking and every rank must call them in the same order. Include only where LibTorch is
// already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace yeto::island {

enum class ReduceOp { sum, max };

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place, over one contiguous tensor.
  virtual void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  virtual void broadcast(at::Tensor& tensor, int root = 0) = 0;
  virtual void barrier() = 0;
  // Every rank's `shard` (contiguous, n elements; the same n and dtype on every rank) into
  // `out` (contiguous, n * world_size elements): rank r's at element r * n (train.shard =
  // "fsdp" gathers a block's frozen weights with it).
  virtual void all_gather(const at::Tensor& shard, at::Tensor& out) = 0;
};

// One rank of one: rank 0, and every collective is the identity.
class SingleRank final : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void allreduce(at::Tensor&, ReduceOp) override {}
  void broadcast(at::Tensor&, int) override {}
  void barrier() override {}
  void all_gather(const at::Tensor& shard, at::Tensor& out) override { out.copy_(shard); }
};

// The `ddp` gradient step: every rank's gradients of `params` (canonical order, the same on
// every rank) are summed in one flat buffer and divided by the world size, in place. A
// parameter without a gradient counts as zeros (and gets a zero gradient). One rank: nothing.
void average_gradients(Collectives& ranks, const std::vector<std::pair<std::string, at::Tensor>>& params);

// Overwrites `params` on every rank with rank `root`'s values (one flat broadcast).
void broadcast_tensors(Collectives& ranks, const std::vector<std::pair<std::string, at::Tensor>>& params,
                       int root = 0);

// Element-wise sum / max of small double vectors across the ranks (metrics, decisions).
std::vector<double> allreduce_values(Collectives& ranks, std::vector<double> values, ReduceOp op = ReduceOp::sum);

// Rank `root`'s small double vector on every rank (the others pass as many placeholders).
// Integers below 2^53 and float32 values travel exactly.
std::vector<double> broadcast_values(Collectives& ranks, std::vector<double> values, int root = 0);

// The mean across the ranks of one value each.
double mean_of(Collectives& ranks, double value);

// Rank 0's decision, the same on every rank (any rank's `decision` but rank 0's is ignored).
bool rank0_decides(Collectives& ranks, bool decision);

}  // namespace yeto::island
