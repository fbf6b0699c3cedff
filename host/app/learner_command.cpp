// `yeto-host learner --syncer HOST:PORT --run-secret-file FILE --learner-id ID --config run.toml
// --output DIR`: one learner island (the generic diffusion learner, learner::run) that
// synchronises with a remote syncer through sync::DilocoSync; and run_train_islands(), the
// `yeto-host train --islands N` embedded local mode (sync/launch.hpp).
#include "app/train_islands.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "app/commands.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "island/island_group.hpp"
#include "island/run_island.hpp"
#include "learner/learner.hpp"
#include "report/report.hpp"
#include "sync/diloco_sync.hpp"
#include "sync/launch.hpp"

namespace yeto::app {
namespace {

std::string read_secret(CommandContext& ctx, const config::Config& cfg) {
  std::filesystem::path secret = ctx.value("run-secret-file");
  if (secret.empty()) secret = cfg.get_path("sync.run_secret_file");
  if (secret.empty()) throw UsageError("the learner needs --run-secret-file FILE (or sync.run_secret_file)");
  try {
    return read_file(secret);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (--run-secret-file)", ExitCode::not_found);
  }
}

int run_learner(CommandContext& ctx) {
  const config::Config& cfg = ctx.config();
  sync::DilocoOptions o = sync::diloco_options_from_config(cfg);
  const std::string addr = ctx.value("syncer", cfg.get_string("sync.syncer"));
  if (addr.empty()) throw UsageError("the learner needs --syncer HOST:PORT (or sync.syncer)");
  sync::parse_host_port(addr, o.client.host, o.client.port);
  o.client.run_secret = read_secret(ctx, cfg);
  o.client.learner_id = ctx.value("learner-id");
  if (o.client.learner_id.empty()) throw UsageError("the learner needs --learner-id ID (unique within the run)");
  learner::RunOptions ro;
  ro.run_dir = cfg.get_path("run.output");
  ro.world = static_cast<int>(cfg.get_int("sync.islands"));
  const std::string rank = ctx.value("island-rank", "0");
  try {
    std::size_t used = 0;
    ro.logical_rank = std::stoll(rank, &used);
    if (used != rank.size()) throw std::invalid_argument(rank);
  } catch (const std::exception&) {
    throw UsageError("--island-rank expects an integer, got '" + rank + "'");
  }
  if (ro.logical_rank < 0 || ro.logical_rank >= ro.world)
    throw UsageError("--island-rank " + rank + " must lie in [0, sync.islands = " + std::to_string(ro.world) + ")");
  if (ctx.has("no-resume")) ro.resume = false;
  // Several ranks per island (torchrun-style environment, train.shard = "ddp" or "fsdp"): one data shard
  // and random stream per (island, rank); only rank 0 talks to the syncer.
  const auto ranks = island::open_run_island(cfg, island::island_env());
  ro.island = static_cast<int>(ro.logical_rank);
  ro.islands = ro.world;
  if (ranks) {
    // Unique per (island, rank) whatever the islands' rank counts.
    ro.logical_rank += static_cast<std::int64_t>(ro.islands) * island::rank_of(*ranks);
    ro.world *= island::world_size_of(*ranks);
    ro.ranks = ranks.get();
    o.ranks = ranks.get();
  }
  o.client.events = ro.run_dir / "sync_events.jsonl";
  sync::DilocoSync outer(std::move(o));
  const learner::RunResult r = learner::run(cfg, ro, &outer);
  const sync::DilocoStats st = outer.stats();
  const std::string who = ctx.value("learner-id") + (ranks && island::rank_of(*ranks) > 0
                                                         ? " rank " + std::to_string(island::rank_of(*ranks))
                                                         : std::string());
  spdlog::info("learner {}: {} steps, {} global fragments applied, {} bytes sent, {} received{}", who, r.steps,
               st.fragments_applied, st.client.bytes_sent, st.client.bytes_received,
               st.finished ? ", ended on the final cut" : "");
  if (st.finished || r.stopped_early) return 0;
  spdlog::error("learner {}: the run ended without the syncer's final cut; the saved weights are local", who);
  return static_cast<int>(ExitCode::failure);
}

}  // namespace

int run_train_islands(CommandContext& ctx, std::uint32_t islands) {
  const config::Config& cfg = ctx.config();
  sync::EmbeddedRun e;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error("cannot find this program's path (/proc/self/exe)");
  e.host_bin = std::string(self, static_cast<std::size_t>(n));
  // A binary replaced on disk while it runs (a rebuild) reads as "PATH (deleted)": start the
  // children from PATH, the program now installed there.
  const std::string deleted = " (deleted)";
  if (std::string s = e.host_bin.string(); s.size() > deleted.size() && s.ends_with(deleted))
    e.host_bin = s.substr(0, s.size() - deleted.size());
  if (ctx.args().config_file) e.config_file = std::filesystem::absolute(*ctx.args().config_file);
  for (const auto& ov : ctx.args().overrides)
    if (ov.key != "run.output" && ov.key != "sync.islands") e.sets.push_back(ov.key + "=" + ov.value);
  e.run_dir = std::filesystem::absolute(cfg.get_path("run.output"));
  e.islands = islands;
  e.island_ranks = static_cast<std::uint32_t>(cfg.get_int("train.island_ranks"));
  if (e.island_ranks > 1 && cfg.get_string("train.shard") != "ddp" && cfg.get_string("train.shard") != "fsdp")
    throw UsageError("train.island_ranks = " + std::to_string(e.island_ranks) + " needs train.shard = \"ddp\" or \"fsdp\" (got \"" +
                     cfg.get_string("train.shard") + "\"); set --shard ddp or --shard fsdp");
  e.after_summary = [](const std::filesystem::path& run_dir) {
    std::string warning;
    if (const auto index = report::try_write_report(run_dir, warning)) return "  report: " + index->string() + "\n";
    return "  warning: the run report was not written: " + warning + "\n";
  };
  return sync::run_embedded(cfg, e);
}

void register_learner_command(Registry& r) {
  Command c;
  c.name = "learner";
  c.summary = "Run one learner island that syncs with a remote syncer.";
  c.description =
      "Trains the run the config describes (as `train` does) as one island of a Decoupled DiLoCo run: before the "
      "first step it joins the syncer and starts from the run's current global state (catch-up after a restart); "
      "every sync.inner_steps steps per fragment it pushes q4 pseudo-gradients and blends the merged global "
      "fragments in (sync.alpha) without ever waiting on the network; when the syncer's budget is spent, or every "
      "island reached train.max_steps, it overwrites its weights from the final cut, acknowledges it and saves. "
      "Progress events go to RUN_DIR/sync_events.jsonl. An island of several ranks is started by any torchrun-style "
      "launcher (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; train.shard = \"ddp\" or \"fsdp\"): every rank runs this "
      "command with the same arguments, rank 0 talks to the syncer and broadcasts what it blends in, and only rank 0 "
      "writes RUN_DIR. See docs/PROTOCOL.md.";
  c.run_config = true;
  c.options = {
      {"syncer", "HOST:PORT", "Address of the syncer; default: sync.syncer.", false, 0},
      {"run-secret-file", "FILE", "File holding the run secret; default: sync.run_secret_file.", false, 0},
      {"learner-id", "ID", "This island's id, unique within the run (a restarted island reuses it).", false, 0},
      {"island-rank", "I", "This island's index in [0, sync.islands): its data shard (every sync.islands-th row, split "
       "again among the island's K ranks) and random streams (rank r of island I: logical rank I + sync.islands*r).",
       false, 0},
      {"no-resume", "", "Start from step 0 even when RUN_DIR holds a checkpoint.", false, 0},
  };
  c.run = run_learner;
  r.add(std::move(c));
}

}  // namespace yeto::app
