// The embedded local mode (`yeto-host train --islands N`): one syncer and N learner islands
// as child processes on this machine, from one run configuration.
//
//   RUN_DIR/run.secret          generated run secret (32 random bytes, hex, mode 0600; reused)
//   RUN_DIR/syncer/             the syncer's state dir: tape.jsonl, checkpoint.bin, final_cut.bin,
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
//
// The children run in their own process groups, so a terminal's Ctrl-C reaches only the
// launcher, which forwards it: the first SIGINT/SIGTERM goes to the syncer (it takes the final
// cut early, the islands overwrite their weights from it, acknowledge and save), a second one
// to every child (islands checkpoint and stop). A syncer that dies while islands still train
// is restarted on the same port from its checkpoint (at most three times). Torch-free.
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
};

struct LaunchResult {
  int syncer_exit = -1;                 // exit code, 128 + signal when killed
  std::vector<int> island_exits;        // per island: its first failing rank's code, else 0
  std::uint32_t syncer_restarts = 0;
  int signals = 0;                      // SIGINT/SIGTERM received and forwarded
  int exit_code() const;                // 0 when every child exited 0, else the first failure
};

// Runs the syncer and the islands to completion. Throws yeto::Error when the syncer does not
// come up.
LaunchResult run_islands(const IslandLaunch& launch);

// Reads the tape and the islands' progress events of a finished embedded run: outer steps
// merged (all fragments and per fragment), merges with every island, per island the steps,
// bytes sent and received, and the bytes a data-parallel ring all-reduce of the same
// trainable tensors would have sent over the same steps (2(N-1)/N x 4 bytes x numel per step).
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
};
int run_embedded(const config::Config& cfg, const EmbeddedRun& run);

}  // namespace yeto::sync
