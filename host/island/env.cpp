#include "island/env.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace yeto::island {
namespace {

const char* const kHint =
    " (a torchrun-style launcher sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every rank; "
    "`yeto-host train --island-ranks K` does it for its islands)";

long long parse_int(const char* name, const char* value, long long lo, long long hi) {
  const std::string v = value;
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size())
    throw UsageError(std::string(name) + "='" + v + "' is not an integer; set " + name + " to an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]" + kHint);
  if (x < lo || x > hi)
    throw UsageError(std::string(name) + "=" + v + " is out of range; set " + name + " to an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]" + kHint);
  return x;
}

}  // namespace

std::string IslandEnv::describe() const {
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(world_size);
  if (distributed()) s += " (rendezvous " + master_addr + ":" + std::to_string(master_port) + ")";
  return s;
}

IslandEnv island_env_from(const std::function<const char*(const char*)>& get) {
  auto value = [&](const char* name) -> const char* {
    const char* v = get(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  IslandEnv e;
  const char* world = value("WORLD_SIZE");
  const char* rank = value("RANK");
  if (!world) {
    if (rank)
      throw UsageError(std::string("RANK=") + rank + " is set but WORLD_SIZE is not; set WORLD_SIZE to the number of "
                       "ranks in the island" + kHint);
    return e;
  }
  e.world_size = static_cast<int>(parse_int("WORLD_SIZE", world, 1, 65536));
  if (!rank) {
    if (e.world_size > 1)
      throw UsageError("WORLD_SIZE=" + std::to_string(e.world_size) + " but RANK is not set; set RANK to this "
                       "process's rank in [0, " + std::to_string(e.world_size - 1) + "]" + kHint);
  } else {
    e.rank = static_cast<int>(parse_int("RANK", rank, 0, e.world_size - 1));
  }
  const char* local = value("LOCAL_RANK");
  e.local_rank = local ? static_cast<int>(parse_int("LOCAL_RANK", local, 0, 65535)) : e.rank;
  if (!e.distributed()) return e;
  const char* addr = value("MASTER_ADDR");
  if (!addr)
    throw UsageError("WORLD_SIZE=" + std::to_string(e.world_size) + " but MASTER_ADDR is not set; set MASTER_ADDR to "
                     "the host of rank 0 (127.0.0.1 on one machine)" + kHint);
  e.master_addr = addr;
  const char* port = value("MASTER_PORT");
  if (!port)
    throw UsageError("WORLD_SIZE=" + std::to_string(e.world_size) + " but MASTER_PORT is not set; set MASTER_PORT to "
                     "a free TCP port on MASTER_ADDR, the same for every rank of the island" + kHint);
  e.master_port = static_cast<std::uint16_t>(parse_int("MASTER_PORT", port, 1, 65535));
  return e;
}

IslandEnv island_env() {
  return island_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace yeto::island
