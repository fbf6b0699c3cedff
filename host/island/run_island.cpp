#include "island/run_island.hpp"

#include <algorithm>

#include "config/config.hpp"
#include "core/error.hpp"
#include "island/island_group.hpp"

namespace yeto::island {

std::shared_ptr<IslandGroup> open_run_island(const config::Config& cfg, const IslandEnv& env) {
  const std::string shard = cfg.get_string("train.shard");
  const auto ranks = cfg.get_int("train.island_ranks");
  if (shard == "fsdp" && cfg.get_string("tuning.mode") == "full")
    throw UsageError("train.shard = \"fsdp\" shards the frozen base across the island's ranks, but tuning.mode = "
                     "\"full\" trains the base itself: sharded weights would need their gradients reduce-scattered "
                     "and their optimizer state sharded, which is not built; use train.shard = \"ddp\" for full "
                     "tuning, or tuning.mode = \"lora\" with fsdp");
  if (!env.distributed()) {
    if (ranks > 1)
      throw UsageError("train.island_ranks = " + std::to_string(ranks) + " but WORLD_SIZE is not set: this process "
                       "is one rank; start the ranks with `yeto-host train --islands N --island-ranks K` or a "
                       "torchrun-style launcher (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
    return nullptr;
  }
  if (shard != "ddp" && shard != "fsdp")
    throw UsageError("WORLD_SIZE=" + std::to_string(env.world_size) + " but train.shard = \"" + shard +
                     "\"; set train.shard = \"ddp\" (--shard ddp: the frozen base on every rank) or \"fsdp\" "
                     "(--shard fsdp: each rank keeps 1/WORLD_SIZE of it) to train one island on several ranks, or "
                     "start one process without WORLD_SIZE");
  if (ranks > 1 && ranks != env.world_size)
    throw UsageError("WORLD_SIZE=" + std::to_string(env.world_size) + " but train.island_ranks = " +
                     std::to_string(ranks) + "; start as many ranks as train.island_ranks says (or leave it at 1 "
                     "and let WORLD_SIZE decide)");
  GroupOptions o;
  o.rendezvous_timeout_s = cfg.get_number("train.rendezvous_timeout_s");
  o.collective_timeout_s = collective_timeout_s(cfg);
  return IslandGroup::connect(env, o);
}

double collective_timeout_s(const config::Config& cfg) {
  // The other ranks wait in a broadcast while rank 0 waits on the syncer: for the run's state at
  // start-up (join), reconnecting, and at the end for its outstanding merges before pushing what
  // is left (SyncClient::push_remaining, up to a round deadline) and then for the final cut.
  return std::max(1800.0, cfg.get_number("sync.reconnect_budget_s") + cfg.get_number("sync.join_timeout_s") +
                              cfg.get_number("sync.round_deadline_s") + cfg.get_number("sync.final_timeout_s") + 60.0);
}

int rank_of(const IslandGroup& group) { return group.rank(); }
int world_size_of(const IslandGroup& group) { return group.world_size(); }

}  // namespace yeto::island
