// The ranks of one learner island, as a torchrun-style launcher describes them in the
// environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Any launcher that sets
// these (torchrun, Slurm wrappers, Kubernetes, `yeto-host train --islands N --island-ranks K`)
// can start an island. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace yeto::island {

struct IslandEnv {
  int rank = 0;             // RANK: this process's rank in the island, [0, world_size)
  int world_size = 1;       // WORLD_SIZE: ranks in the island
  int local_rank = 0;       // LOCAL_RANK: rank on this machine (picks the GPU); default RANK
  std::string master_addr;  // MASTER_ADDR: host of rank 0's rendezvous store
  std::uint16_t master_port = 0;  // MASTER_PORT: its TCP port
  bool distributed() const { return world_size > 1; }
  std::string describe() const;  // "rank 1 of 2 (rendezvous 127.0.0.1:29500)"
};

// Reads the variables through `get` (nullptr = unset). Neither WORLD_SIZE nor RANK set: one
// rank. WORLD_SIZE > 1 needs RANK, MASTER_ADDR and MASTER_PORT. Throws yeto::UsageError naming
// the variable and what to set on a missing or malformed value.
IslandEnv island_env_from(const std::function<const char*(const char*)>& get);
// The same from this process's environment.
IslandEnv island_env();

}  // namespace yeto::island
