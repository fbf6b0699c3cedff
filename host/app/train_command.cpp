// `yeto-host train`: one learner island without a syncer.
#include "app/commands.hpp"
#include "app/train_islands.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "island/island_group.hpp"
#include "island/run_island.hpp"
#include "learner/learner.hpp"
#include "report/report.hpp"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace yeto::app {
namespace {

int run_train(CommandContext& ctx) {
  const auto& cfg = ctx.config();
  std::int64_t islands = cfg.get_int("sync.islands");
  if (ctx.has("islands")) {
    const std::string v = ctx.value("islands");
    std::size_t used = 0;
    try {
      islands = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() || islands < 1)
      throw UsageError("--islands: expected a number of learner islands (1 or more), got '" + v + "'");
  }
  if (islands > 1) return run_train_islands(ctx, static_cast<std::uint32_t>(islands));
  learner::RunOptions options;
  options.run_dir = cfg.get_path("run.output");
  if (ctx.has("no-resume")) options.resume = false;
  // One island on several ranks (torchrun-style environment, train.shard = "ddp" or "fsdp").
  const auto ranks = island::open_run_island(cfg, island::island_env());
  if (ranks) {
    options.logical_rank = island::rank_of(*ranks);
    options.world = island::world_size_of(*ranks);
    options.ranks = ranks.get();
  }
  const auto result = learner::run(cfg, options, nullptr);
  if (result.stopped_early) spdlog::info("stopped at step {}; run the same command again to resume", result.steps);
  // The run report, written by the rank that writes RUN_DIR; never a reason to fail the run.
  if (options.logical_rank == 0) {
    std::string warning;
    if (const auto index = report::try_write_report(options.run_dir, warning))
      std::printf("report: %s\n", index->string().c_str());
    else
      spdlog::warn("the run report was not written: {}", warning);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void register_train_command(Registry& r) {
  Command c;
  c.name = "train";
  c.summary = "Train the run the config describes (embedded syncer + N islands with --islands).";
  c.description =
      "Trains LoRA adapters (or, with tuning.mode = \"full\", every denoiser parameter) on the model model.id names, "
      "with the family plugin that serves it, on the rows data.path names. Writes into --output RUN_DIR: config.toml "
      "(the resolved configuration), provenance.json, metrics.jsonl (one record per step: loss, lr, grad_norm, "
      "samples_per_s, step-time split, peak RSS; val_loss on evaluation steps), tensorboard/ event files, "
      "checkpoints/ (resumable: LoRA, optimizer, data position) and, at the end, lora.safetensors. A run directory "
      "holding a checkpoint is resumed from it (bit-identical to an uninterrupted run) unless --no-resume is given. "
      "SIGTERM / SIGINT, or a file named save_quit in RUN_DIR, write a checkpoint and stop; a file named save writes "
      "one and continues. Started by a torchrun-style launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) with "
      "train.shard = \"ddp\" or \"fsdp\", the ranks train one island together: each its own data shard, LoRA "
      "gradients averaged before every optimizer step, only rank 0 writing RUN_DIR; fsdp keeps 1/WORLD_SIZE of the "
      "denoiser's frozen blocks on each rank and gathers a block only while it runs.";
  c.run_config = true;
  c.options = {{"no-resume", "", "Start from step 0 even when RUN_DIR holds a checkpoint (it is overwritten)."},
               {"islands", "N", "Run a syncer and N learner islands as child processes (embedded local mode); "
                                "train.island_ranks (--island-ranks K) ranks each."}};
  c.run = run_train;
  r.add(std::move(c));
}

}  // namespace yeto::app
