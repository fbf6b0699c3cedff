// The embedded local mode of `yeto-host train`: `--islands N` (or sync.islands > 1) runs a
// syncer and N learner islands as child processes from the command's config (sync/launch.hpp).
// The train command calls this; it returns the exit code.
#pragma once

#include <cstdint>

#include "cli/command.hpp"

namespace yeto::cli {

int run_train_islands(CommandContext& ctx, std::uint32_t islands);

}  // namespace yeto::cli
