// `yeto-host launch`: a run's syncer and islands handed to a cluster engine (Slurm, SkyPilot,
// Kubernetes) as the engine's own manifests, written into the run directory:
//
//   RUN_DIR/launch/<engine>/syncer.<ext>    the syncer (head) job
//   RUN_DIR/launch/<engine>/island-<i>.<ext> island i (one job per island, nodes x ranks)
//   RUN_DIR/launch/fleet.json               what was submitted: engine, islands, job ids
//   RUN_DIR/run.secret                      the run secret (mode 0600, created when missing)
//   RUN_DIR/syncer/, RUN_DIR/island-<i>/    as in the embedded mode (sync/launch.hpp), where
//                                           the engine shares the run directory (Slurm)
//
// The run secret never appears in a manifest or on a command line: Slurm jobs read RUN_DIR's
// private file over the cluster's shared file system; SkyPilot gets it as a task secret taken
// from the submitting process's environment; Kubernetes as a Secret created from the file and
// mounted read-only. The syncer's address reaches Slurm islands through a private file the
// syncer job writes (RUN_DIR/launch/syncer.address), SkyPilot islands through an environment
// variable of the submitting process, Kubernetes islands as the syncer Service's DNS name.
// Manifests are written with mode 0600. Torch-free.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fleet/spec.hpp"

namespace yeto::config {
class Config;
}

namespace yeto::fleet {

enum class Engine { slurm, skypilot, kubernetes };
Engine parse_engine(const std::string& name);  // throws UsageError naming the choices
std::string engine_name(Engine e);

// The [launch] keys of the run configuration (docs/CONFIG.md).
struct LaunchSettings {
  Engine engine = Engine::slurm;
  int syncer_port = 0;            // 0: any free port (Slurm); 29400 elsewhere
  std::string syncer_host;        // Slurm: how islands reach the syncer's node; empty: its hostname
  std::string host_bin;           // yeto-host as the jobs find it
  std::string setup;              // shell lines run before yeto-host in every job
  std::string time_limit;         // Slurm --time
  std::string account;            // Slurm --account
  bool spot = true;               // SkyPilot / Kubernetes: islands on spot capacity
  int island_restarts = 3;        // the engine's own restarts of an island job
  double syncer_wait_s = 600;     // how long an island job waits for the syncer's address
  std::string image;              // Kubernetes container image
  std::string k8s_namespace = "default";
  std::string queue;              // Kueue LocalQueue
  std::string volume_claim;       // Kubernetes PVC holding the run directory, data and model
  std::string mount = "/yeto";    // where SkyPilot / Kubernetes jobs see the run files
  std::string syncer_cloud;       // SkyPilot infra of the syncer task; empty: any
};
LaunchSettings launch_settings_from_config(const config::Config& cfg);

struct Fleet {
  std::string name;                      // DNS-safe run name: job, cluster and object prefix
  std::filesystem::path run_dir;         // absolute
  std::filesystem::path config_file;     // absolute; empty: none (defaults and --set only)
  std::vector<std::string> sets;         // KEY=VALUE forwarded to every job with --set
  std::vector<IslandSpec> islands;
  // The run's train.shard ("none", "ddp" or "fsdp"): an island of several ranks runs fsdp when
  // it is "fsdp" and ddp otherwise (ranks need one of the two); a one-rank island keeps the
  // run's setting.
  std::string shard = "none";
  LaunchSettings s;
  // data.path and model.id when they are paths on this machine (absolute), else empty: the
  // engines that do not share this file system mount them (SkyPilot uploads them; Kubernetes
  // expects them in launch.volume_claim) and point the jobs at the mounted copies.
  std::filesystem::path data_local;
  std::filesystem::path model_local;
};

// The DNS-1123 label a run name becomes ("My Run_2" -> "yeto-my-run-2"), at most 40 chars so
// that "-island-<i>" suffixes stay under the 63-character limit.
std::string fleet_name(const std::string& run_name);

struct Manifest {
  std::string role;                // "syncer" or "island-<i>"
  std::filesystem::path path;      // absolute, under RUN_DIR/launch/<engine>/
  std::string text;
};

// What the engine is given, in submission order (the syncer first).
std::vector<Manifest> render(const Fleet& fleet);

// Writes the manifests (0600, atomically) and creates RUN_DIR/run.secret (0600) when missing.
void write_manifests(const Fleet& fleet, const std::vector<Manifest>& manifests);

// The client command lines that submit each manifest of render(fleet) (`sbatch --parsable FILE`, `sky launch`
// / `sky jobs launch`, `kubectl apply -f`), preceded by any set-up command (the Kubernetes
// Secret). Environment variables a command reads (the secret, the syncer's address) are named
// in `env`, never put in argv.
struct ClientCommand {
  std::string role;                   // the manifest's role, or "secret"
  std::vector<std::string> argv;
  std::vector<std::string> env;       // variable names the submitting process must export
};
std::vector<ClientCommand> submit_commands(const Fleet& fleet, const std::vector<Manifest>& manifests);

// POSIX shell quoting ('...' with embedded quotes escaped).
std::string shell_quote(const std::string& s);

}  // namespace yeto::fleet
