// The embedded local mode (`yeto-host train --islands N`): one syncer and N learner islands
// as child processes on this machine, from one run configuration.
//
//   RUN_DIR/run.secret          generated run secret (32 random bytes, hex, mode 0600; reused)
//   RUN_DIR/syncer/             the syncer's state dir: tape.jsonl, checkpoint.bin + fragments/, final_cut.bin,
//                               final.json, port, syncer.log
//   RUN_DIR/island-<i>/         island i's run dir (the learner's output, written by its rank 0),
//                               learner.log (rank 0; learner-rank<r>.log for rank r > 0) and its
//                               sync progress events sync_events.jsonl
//
// An island of K > 1 ranks is K processes with the same argv and the torchrun variables set
// (RANK, WORLD_SIZE = K, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = 127.0.0.1 and a free
// MASTER_PORT per island); a one-rank island and the syncer get none of them (inherited values
// are removed). The island's exit code is its first failing rank's.
//   RUN_DIR/summary.json        what print_summary() prints, machine-readable
//   RUN_DIR/launch.jsonl        the launcher's record (appended; `launch` opens each launch):
//                               island_exit, island_restart, island_given_up, syncer_restart, end
//
// The children run in their own process groups, so a terminal's Ctrl-C reaches only the
// launcher, which forwards it: the first SIGINT/SIGTERM goes to the syncer (it takes the final
// cut early, the islands overwrite their weights from it, acknowledge and save), a second one
// to every child (islands checkpoint and stop). A syncer that dies while islands still train
// is restarted on the same port from its checkpoint (at most three times).
//
// Islands are supervised: an island one of whose ranks exits non-zero or is killed while the
// run goes on (no signal forwarded, the syncer up and without its final marker) is restarted
// as a whole (its surviving ranks are stopped first: SIGTERM, SIGKILL after stop_grace_s)
// after a backoff of restart_backoff_s, doubled for each further restart, at most
// island_restarts (sync.island_restarts) times. It resumes from its own checkpoint in its run
// dir and rejoins the syncer as the same learner, catching up from the syncer's state; the
// syncer holds the learners-done cut for it (sync.join_timeout_s). An island that failed after
// acknowledging the final cut is not restarted; one that fails after its last restart, or once
// the run is over, is given up (lost unless it acknowledged the cut). Either way its exit code
// fails the run. The run's result
// is the syncer's final cut (RUN_DIR/syncer/final_cut.bin): the summary names every island
// that did not acknowledge it as not holding it. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace yeto::config {
class Config;
}

namespace yeto::sync {

struct IslandSlot {
  std::uint32_t index = 0;
  std::string id;                  // "island-<i>"
  std::filesystem::path dir;       // RUN_DIR/island-<i>
  std::string syncer;              // "127.0.0.1:PORT"
  std::filesystem::path secret;    // RUN_DIR/run.secret
  std::uint32_t ranks = 1;         // processes in the island (the same argv for each)
};

struct IslandLaunch {
  std::filesystem::path run_dir;
  std::uint32_t islands = 1;
  // Ranks per island, by island index; missing entries (or an empty list) mean one rank.
  std::vector<std::uint32_t> island_ranks;
  // The syncer's argv; the launcher appends --listen, --run-secret-file and --state-dir.
  std::vector<std::string> syncer_argv;
  // One island's argv.
  std::function<std::vector<std::string>(const IslandSlot&)> learner_argv;
  double startup_timeout_s = 60;  // the syncer must have bound its port by then
  // After the last island exited, how long the syncer may take to write its final marker
  // before it is asked to stop (SIGTERM), and then killed.
  double syncer_grace_s = 30;
  // Restarts of a failed island (sync.island_restarts), the first after restart_backoff_s,
  // each next one after twice as long (at most restart_backoff_max_s). The surviving ranks
  // of a failed multi-rank island get stop_grace_s after SIGTERM before SIGKILL.
  std::uint32_t island_restarts = 3;
  double restart_backoff_s = 1.0;
  double restart_backoff_max_s = 30.0;
  double stop_grace_s = 10.0;
};

struct LaunchResult {
  int syncer_exit = -1;                 // exit code, 128 + signal when killed
  std::vector<int> island_exits;        // per island: its last life's first failing rank's code, else 0
  std::vector<std::uint32_t> island_restarts;  // per island: times it was restarted
  std::vector<bool> island_given_up;    // per island: failed and not restarted again
  std::uint32_t syncer_restarts = 0;
  int signals = 0;                      // SIGINT/SIGTERM received and forwarded
  // 0 when the syncer and every island's last life exited 0, else the first failure (so a
  // lost island fails the run; one that was restarted and then finished does not).
  int exit_code() const;
};

// RUN_DIR/run.secret: 32 random bytes as hex, written with mode 0600 from its first byte;
// an existing one is kept (a resumed run). Returns its path.
std::filesystem::path ensure_run_secret(const std::filesystem::path& run_dir);

// Runs the syncer and the islands to completion. Throws yeto::Error when the syncer does not
// come up. A run directory whose syncer wrote its final marker with every island holding the
// cut is a finished run: nothing is started and every exit code is 0 (training again needs
// another run directory).
LaunchResult run_islands(const IslandLaunch& launch);

// Reads the tape, the launcher's record and the islands' progress events of a finished
// embedded run: outer steps merged (all fragments and per fragment), merges with every island,
// the result (the final cut's file, or null), islands lost / restarted / missing (not holding
// the final cut), per island its restarts, whether it acknowledged (holds) the final cut,
// whether it was lost (failed for good without acknowledging it), the tape time of its last
// merged push (last_merge_time, unix seconds; absent when none), its steps (last life), bytes
// sent and received (and their sum, bytes_total), and the bytes a data-parallel float32 ring
// all-reduce of the same trainable tensors would have sent and received over the same steps
// (allreduce_equivalent_bytes: each rank sends 2(N-1)/N x 4 bytes x numel per step and receives
// as many, so both directions count, as they do for the islands). Totals: bytes_sent_total,
// bytes_received_total, bytes_total, allreduce_equivalent_bytes_total and allreduce_over_total.
nlohmann::json embedded_summary(const std::filesystem::path& run_dir, std::uint32_t islands);
std::string format_summary(const nlohmann::json& summary);

// `yeto-host train --islands N`: the children are `host_bin syncer` and `host_bin learner`
// with the same config file and overrides; island i runs with --island-rank i so that each
// island draws its own data shard and random streams.
struct EmbeddedRun {
  std::filesystem::path host_bin;                 // this program
  std::optional<std::filesystem::path> config_file;
  std::vector<std::string> sets;                  // KEY=VALUE overrides, forwarded with --set
  std::filesystem::path run_dir;
  std::uint32_t islands = 2;
  std::uint32_t island_ranks = 1;                 // train.island_ranks: processes per island
  std::string log_level;                          // forwarded with --log-level when not empty
  // Called once the run is over and summary.json is written; what it returns is printed after
  // the summary (the train command writes the run report here and names it).
  std::function<std::string(const std::filesystem::path& run_dir)> after_summary;
};
int run_embedded(const config::Config& cfg, const EmbeddedRun& run);

// The embedded run's syncer command: `host_bin syncer` with the run's config and overrides and
// sync.islands. Its syncer shares the machine with the islands' CPU-bound learners, so unless
// the config or an override sets sync.bulk_nice, its bulk lanes keep the learners' priority
// (`--set sync.bulk_nice=0`): lowered below them, a large merge would get a tenth of a core.
std::vector<std::string> embedded_syncer_argv(const config::Config& cfg, const EmbeddedRun& run);

}  // namespace yeto::sync
