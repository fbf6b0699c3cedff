// `yeto-host syncer --listen HOST:PORT --run-secret-file FILE --state-dir DIR`: runs the
// fragment syncer of a run until its budget is spent and the terminal handshake is done.
// Every [sync] key of the run config applies (--set sync.quorum=3, ...).
#include <iostream>

#include "app/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sync/options.hpp"
#include "sync/syncer.hpp"

namespace yeto::app {
namespace {

int run_syncer(CommandContext& ctx) {
  const config::Config& cfg = ctx.config();
  sync::SyncerOptions o = sync::syncer_options_from_config(cfg);
  const std::string listen = ctx.value("listen", "127.0.0.1:0");
  sync::parse_host_port(listen, o.listen_host, o.listen_port);
  std::filesystem::path secret = ctx.value("run-secret-file");
  if (secret.empty()) secret = cfg.get_path("sync.run_secret_file");
  if (secret.empty()) throw UsageError("the syncer needs --run-secret-file FILE (or sync.run_secret_file)");
  try {
    o.run_secret = read_file(secret);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (--run-secret-file)", ExitCode::not_found);
  }
  o.state_dir = ctx.value("state-dir");
  if (o.state_dir.empty()) throw UsageError("the syncer needs --state-dir DIR");
  sync::Syncer syncer(std::move(o));
  return syncer.run();
}

}  // namespace

void register_syncer_command(Registry& r) {
  Command c;
  c.name = "syncer";
  c.summary = "Run the fragment syncer that merges the islands' pseudo-gradients.";
  c.description =
      "Listens for learner islands, authenticates them with the run secret (challenge-response), merges their "
      "pseudo-gradients per fragment (quorum, a wait for the learners expected from their push periods, token-weighted radial-directional averaging, "
      "HeLoCo correction of stale pushes, Nesterov outer step) and broadcasts the new global fragments. The state "
      "directory holds the checkpoint, checkpoint.bin and the fragments' data files in fragments/ (restarted from "
      "automatically), the event tape tape.jsonl, the bound port in "
      "`port`, and at the end final_cut.bin and the final marker final.json. The budget keys sync.budget_* end "
      "the run with the terminal handshake; SIGINT/SIGTERM take the final cut early. See docs/PROTOCOL.md.";
  c.run_config = true;
  c.options = {
      {"listen", "HOST:PORT", "Address to listen on (port 0: any free port, written to STATE_DIR/port).", false, 0},
      {"run-secret-file", "FILE", "File holding the run secret (at least 16 bytes); default: sync.run_secret_file.",
       false, 0},
      {"state-dir", "DIR", "Directory of the checkpoint, the event tape and the final cut.", false, 0},
  };
  c.run = run_syncer;
  r.add(std::move(c));
}

}  // namespace yeto::app
