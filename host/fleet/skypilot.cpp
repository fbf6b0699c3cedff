// SkyPilot: one task YAML per island (a managed job on spot capacity, recovered on
// preemption; a plain cluster launch on demand) and one for the syncer (the head, on demand,
// with its port opened). The config file, and data.path / model.id when they are local paths,
// are uploaded by file_mounts under launch.mount; every job keeps its run directory under
// launch.mount/run on its own disk: a recovered island catches up from the syncer's state.
#include <sstream>

#include "fleet/engines.hpp"

namespace yeto::fleet {
namespace {

constexpr int kDefaultPort = 29400;
constexpr const char* kSecretEnv = "YETO_RUN_SECRET";
constexpr const char* kSyncerEnv = "YETO_SYNCER";

int port(const Fleet& f) { return f.s.syncer_port > 0 ? f.s.syncer_port : kDefaultPort; }

JobPaths sky_paths(const Fleet& f) {
  JobPaths p;
  p.host_bin = f.s.host_bin;
  p.config = f.config_file.empty() ? "" : f.s.mount + "/run.toml";
  p.run_dir = f.s.mount + "/run";
  p.secret = {"\"$HOME/.yeto/" + f.name + ".secret\"", true};
  return p;
}

std::string infra(const std::string& cloud, const std::string& region) {
  std::string s = cloud;
  if (!region.empty()) s += "/" + region;
  return s;
}

void common_sections(std::ostringstream& o, const Fleet& f) {
  o << "secrets:\n  " << kSecretEnv << ": null\n";
  bool mounts = !f.config_file.empty() || !f.data_local.empty() || !f.model_local.empty();
  if (mounts) {
    o << "file_mounts:\n";
    if (!f.config_file.empty()) o << "  " << f.s.mount << "/run.toml: " << yaml_str(f.config_file.string()) << "\n";
    if (!f.data_local.empty()) {
      const auto src = std::filesystem::is_regular_file(f.data_local) ? f.data_local.parent_path() : f.data_local;
      o << "  " << f.s.mount << "/data: " << yaml_str(src.string()) << "\n";
    }
    if (!f.model_local.empty()) o << "  " << f.s.mount << "/model: " << yaml_str(f.model_local.string()) << "\n";
  }
  if (!f.s.setup.empty()) o << "setup: " << yaml_block(f.s.setup, 2);
}

// The secret, from the task's environment into a private file.
std::string secret_lines(const Fleet& f) {
  return "umask 077\nmkdir -p \"$HOME/.yeto\" " + shell_quote(f.s.mount + "/run") + "\nprintf '%s' \"$" + kSecretEnv +
         "\" > \"$HOME/.yeto/" + f.name + ".secret\"\n";
}

std::string syncer_yaml(const Fleet& f) {
  std::ostringstream o;
  o << "# The syncer (head) of Yeto run " << f.name << ". Written by `yeto-host launch`.\n"
    << "name: " << f.name << "-syncer\n"
    << "resources:\n";
  if (!f.s.syncer_cloud.empty()) o << "  infra: " << yaml_str(f.s.syncer_cloud) << "\n";
  o << "  cpus: 4+\n  use_spot: false\n  ports: " << port(f) << "\n";
  common_sections(o, f);
  const std::string run = "set -euo pipefail\n" + secret_lines(f) + "exec " + shell_line(syncer_words(f, sky_paths(f), port(f))) + "\n";
  o << "run: " << yaml_block(run, 2);
  return o.str();
}

std::string island_yaml(const Fleet& f, std::size_t i) {
  const IslandSpec& spec = f.islands[i];
  std::ostringstream o;
  o << "# Island " << i << " of Yeto run " << f.name << ": " << spec.to_string() << ". Written by `yeto-host launch`.\n"
    << "name: " << f.name << "-" << island_role(i) << "\n"
    << "num_nodes: " << spec.nodes << "\n"
    << "resources:\n";
  if (!spec.default_cloud()) o << "  infra: " << yaml_str(infra(spec.cloud, spec.region)) << "\n";
  if (spec.cpu_only())
    o << "  cpus: " << spec.per_node << "+\n";
  else
    o << "  accelerators: " << yaml_str(spec.gpu + ":" + std::to_string(spec.per_node)) << "\n";
  o << "  use_spot: " << (f.s.spot ? "true" : "false") << "\n";
  if (f.s.spot)
    o << "  job_recovery:\n    strategy: FAILOVER\n    max_restarts_on_errors: " << f.s.island_restarts << "\n";
  o << "envs:\n  " << kSyncerEnv << ": null\n";
  common_sections(o, f);
  // One learner process per rank on every node; torchrun-style variables from SkyPilot's.
  std::ostringstream run;
  run << "set -euo pipefail\n" << secret_lines(f)
      << "per_node=" << spec.per_node << "\n"
      << "nodes=$(echo \"$SKYPILOT_NODE_IPS\" | wc -l)\n"
      << "export MASTER_ADDR=$(echo \"$SKYPILOT_NODE_IPS\" | head -n 1) MASTER_PORT=29500\n"
      << "pids=()\n"
      << "for local_rank in $(seq 0 $((per_node - 1))); do\n";
  if (spec.ranks() > 1)
    run << "  RANK=$((SKYPILOT_NODE_RANK * per_node + local_rank)) WORLD_SIZE=$((nodes * per_node)) "
           "LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$per_node \\\n    ";
  else
    run << "  ";
  run << shell_line(learner_words(f, sky_paths(f), i, {"\"$" + std::string(kSyncerEnv) + "\"", true})) << " &\n"
      << "  pids+=($!)\n"
      << "done\n"
      << "rc=0\n"
      << "for pid in \"${pids[@]}\"; do wait \"$pid\" || rc=$?; done\n"
      << "exit \"$rc\"\n";
  o << "run: " << yaml_block(run.str(), 2);
  return o.str();
}

}  // namespace

std::vector<Manifest> render_skypilot(const Fleet& f) {
  return render_each(f, "skypilot", ".yaml", syncer_yaml, island_yaml);
}

std::vector<ClientCommand> submit_skypilot(const Fleet& f, const std::vector<Manifest>& ms) {
  std::vector<ClientCommand> out;
  out.push_back({"syncer", {"sky", "launch", "--yes", "--detach-run", "--cluster", f.name + "-syncer", "--secret", kSecretEnv,
                            ms[0].path.string()}, {kSecretEnv}});
  for (std::size_t i = 0; i < f.islands.size(); ++i) {
    const auto& m = ms[i + 1];
    if (f.s.spot)
      out.push_back({m.role, {"sky", "jobs", "launch", "--yes", "--name", f.name + "-" + m.role, "--env", kSyncerEnv,
                              "--secret", kSecretEnv, m.path.string()}, {kSecretEnv, kSyncerEnv}});
    else
      out.push_back({m.role, {"sky", "launch", "--yes", "--detach-run", "--cluster", f.name + "-" + m.role, "--env", kSyncerEnv,
                              "--secret", kSecretEnv, m.path.string()}, {kSecretEnv, kSyncerEnv}});
  }
  return out;
}

}  // namespace yeto::fleet
