// The embedded local mode of `yeto-host train`: `--islands N` (or sync.islands > 1) runs a
// syncer and N learner islands as child processes from the command's config (sync/launch.hpp).
// The train command calls this; it returns the exit code.
#pragma once

#include <cstdint>

#include "app/command.hpp"

namespace yeto::app {

int run_train_islands(CommandContext& ctx, std::uint32_t islands);

}  // namespace yeto::app
