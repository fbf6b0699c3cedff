// Slurm: one sbatch script per island and one for the syncer. The run directory lives on the
// cluster's shared file system: jobs read the config, the secret and the syncer's address
// from it and write RUN_DIR/syncer and RUN_DIR/island-<i> as the embedded mode does.
#include <sstream>

#include "fleet/engines.hpp"

namespace yeto::fleet {
namespace {

JobPaths slurm_paths(const Fleet& f) {
  JobPaths p;
  p.host_bin = f.s.host_bin;
  p.config = f.config_file.empty() ? "" : f.config_file.string();
  p.run_dir = f.run_dir.string();
  p.secret = {(f.run_dir / "run.secret").string()};
  return p;
}

std::string address_file(const Fleet& f) { return (f.run_dir / "launch" / "syncer.address").string(); }

// The #SBATCH lines both kinds of job share, then the script's common prologue.
void header(std::ostringstream& o, const Fleet& f, const std::string& role, const std::string& what,
            const std::string& log) {
  o << "#!/bin/bash\n"
    << "# " << what << " Written by `yeto-host launch`; submit with `yeto-host launch up` (or sbatch).\n"
    << "#SBATCH --job-name=" << f.name << "-" << role << "\n";
  if (!f.s.account.empty()) o << "#SBATCH --account=" << f.s.account << "\n";
  if (!f.s.time_limit.empty()) o << "#SBATCH --time=" << f.s.time_limit << "\n";
  // 120 s before the time limit (or a preemption's grace) the batch shell gets SIGTERM and
  // passes it on: the syncer takes its final cut, a learner checkpoints.
  o << "#SBATCH --signal=B:TERM@120\n"
    << "#SBATCH --requeue\n"
    << "#SBATCH --open-mode=append\n"
    << "#SBATCH --output=" << log << "\n";
}

// Runs "$@" in the background, forwards SIGTERM/SIGINT to it and exits with its status.
const char* kSupervise =
    "run_forwarding() {\n"
    "  \"$@\" &\n"
    "  local child=$!\n"
    "  trap 'kill -TERM \"$child\" 2>/dev/null' TERM INT\n"
    "  local rc=0\n"
    "  wait \"$child\" || rc=$?\n"
    "  # A trapped signal interrupts wait: wait again for the child's own status.\n"
    "  while kill -0 \"$child\" 2>/dev/null; do rc=0; wait \"$child\" || rc=$?; done\n"
    "  return \"$rc\"\n"
    "}\n";

void prologue(std::ostringstream& o, const Fleet& f, bool supervise) {
  o << "set -euo pipefail\n"
    << "umask 077\n";
  if (!f.s.setup.empty()) o << f.s.setup << (f.s.setup.back() == '\n' ? "" : "\n");
  if (supervise) o << kSupervise;
}

std::string syncer_script(const Fleet& f) {
  const JobPaths p = slurm_paths(f);
  const std::string run = f.run_dir.string();
  std::ostringstream o;
  header(o, f, "syncer", "The syncer (head) of Yeto run " + f.name + ".", run + "/syncer/slurm.log");
  o << "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n";
  prologue(o, f, false);
  const std::string addr = address_file(f);
  o << "mkdir -p " << shell_quote(run + "/syncer") << "\n"
    << "rm -f " << shell_quote(run + "/syncer/port") << " " << shell_quote(addr) << "\n"
    << shell_line(syncer_words(f, p, f.s.syncer_port)) << " &\n"
    << "syncer=$!\n"
    << "trap 'kill -TERM \"$syncer\" 2>/dev/null' TERM INT\n"
    << "# Publish host:port (the port file appears once the syncer listens) for the islands.\n"
    << "for _ in $(seq 1 600); do\n"
    << "  [ -s " << shell_quote(run + "/syncer/port") << " ] && break\n"
    << "  kill -0 \"$syncer\" 2>/dev/null || break\n"
    << "  sleep 0.5\n"
    << "done\n"
    << "if [ -s " << shell_quote(run + "/syncer/port") << " ]; then\n"
    << "  host=" << (f.s.syncer_host.empty() ? std::string("$(hostname)") : shell_quote(f.s.syncer_host)) << "\n"
    << "  printf '%s:%s\\n' \"$host\" \"$(cat " << shell_quote(run + "/syncer/port") << ")\" > "
    << shell_quote(addr + ".tmp") << "\n"
    << "  mv -f " << shell_quote(addr + ".tmp") << " " << shell_quote(addr) << "\n"
    << "fi\n"
    << "rc=0\n"
    << "wait \"$syncer\" || rc=$?\n"
    << "while kill -0 \"$syncer\" 2>/dev/null; do rc=0; wait \"$syncer\" || rc=$?; done\n"
    << "exit \"$rc\"\n";
  return o.str();
}

std::string island_script(const Fleet& f, std::size_t i) {
  const IslandSpec& spec = f.islands[i];
  const JobPaths p = slurm_paths(f);
  const std::string run = f.run_dir.string();
  const std::string dir = run + "/" + island_role(i);
  std::ostringstream o;
  header(o, f, island_role(i),
         "Island " + std::to_string(i) + " of Yeto run " + f.name + ": " + spec.to_string() + ".", dir + "/slurm.log");
  o << "#SBATCH --nodes=" << spec.nodes << "\n#SBATCH --ntasks-per-node=" << spec.per_node << "\n";
  if (!spec.cpu_only()) o << "#SBATCH --gpus-per-node=" << spec.per_node << "\n";
  if (!spec.default_cloud()) o << "#SBATCH --partition=" << spec.cloud << "\n";
  prologue(o, f, true);
  const std::string addr = address_file(f);
  o << "mkdir -p " << shell_quote(dir) << "\n"
    << "# The syncer job publishes its address once it listens.\n"
    << "waited=0\n"
    << "until [ -s " << shell_quote(addr) << " ]; do\n"
    << "  if [ \"$waited\" -ge " << static_cast<long>(f.s.syncer_wait_s) << " ]; then\n"
    << "    echo \"yeto " << island_role(i) << ": no syncer address in " << addr << " after " << static_cast<long>(f.s.syncer_wait_s)
    << " s; is the syncer job running?\" >&2\n"
    << "    exit 1\n"
    << "  fi\n"
    << "  sleep 1; waited=$((waited + 1))\n"
    << "done\n"
    << "syncer=$(cat " << shell_quote(addr) << ")\n";
  const std::string learner = shell_line(learner_words(f, p, i, {"\"$syncer\"", true}));
  if (spec.ranks() == 1) {
    o << "run_forwarding srun --ntasks=1 " << learner << "\n";
  } else {
    // torchrun-style rank variables from Slurm's, one task per rank.
    o << "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      << "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n"
      << "run_forwarding srun --kill-on-bad-exit=1 --ntasks=" << spec.ranks() << " bash -c "
      << shell_quote("export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
                     "LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; exec \"$@\"")
      << " yeto-rank " << learner << "\n";
  }
  return o.str();
}

}  // namespace

std::vector<Manifest> render_slurm(const Fleet& f) {
  return render_each(f, "slurm", ".sbatch", syncer_script, island_script);
}

std::vector<ClientCommand> submit_slurm(const Fleet& /*f*/, const std::vector<Manifest>& ms) {
  std::vector<ClientCommand> out;
  for (const auto& m : ms) out.push_back({m.role, {"sbatch", "--parsable", m.path.string()}, {}});
  return out;
}

}  // namespace yeto::fleet
