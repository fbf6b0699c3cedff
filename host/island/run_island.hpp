// The island a training process belongs to, decided from the torchrun-style environment and
// the run config (train.shard, train.island_ranks, train.rendezvous_timeout_s). Used by
// `yeto-host train` and `yeto-host learner`. Torch-free (the group is held by shared_ptr).
#pragma once

#include <memory>

#include "island/env.hpp"

namespace yeto::config {
class Config;
}

namespace yeto::island {

class IslandGroup;
int rank_of(const IslandGroup& group);
int world_size_of(const IslandGroup& group);

// Null for one rank. WORLD_SIZE > 1 needs train.shard = "ddp" or "fsdp" (fsdp with tuning.mode =
// "full" is refused, for one rank too)
// and, when train.island_ranks > 1, WORLD_SIZE == train.island_ranks; then joins the island.
// train.island_ranks > 1 without WORLD_SIZE is refused (the ranks were not started).
// Throws yeto::UsageError naming the key or variable.
std::shared_ptr<IslandGroup> open_run_island(const config::Config& cfg, const IslandEnv& env);

// How long a rank waits in one of the island's collectives: the longest rank 0 may spend on the
// syncer while the others wait (joining, reconnecting, pushing what is left at the end, the
// final cut) plus a minute, and at least 30 minutes.
double collective_timeout_s(const config::Config& cfg);

}  // namespace yeto::island
