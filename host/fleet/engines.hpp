// The engines' renderers and client commands behind fleet::render / fleet::submit_commands, and
// the command lines every engine's jobs run. Internal to host/fleet. Torch-free.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fleet/fleet.hpp"

namespace yeto::fleet {

// A shell word: quoted when literal, inserted as is when raw ("$syncer", "$HOME/...").
struct Word {
  std::string text;
  bool raw = false;
};
std::string shell_line(const std::vector<Word>& words);

// Where a job sees the run's files.
struct JobPaths {
  std::string host_bin;
  std::string config;   // empty: no --config
  std::string run_dir;
  Word secret;          // the run secret file
};

// `yeto-host syncer ...` for the head job: the config, the forwarded --set, sync.islands,
// --listen 0.0.0.0:PORT, the secret and RUN_DIR/syncer as the state dir.
std::vector<Word> syncer_words(const Fleet& f, const JobPaths& p, int port);
// `yeto-host learner ...` for island i: sync.islands, train.island_ranks (and train.shard =
// fsdp when the run asks for it, else ddp, when the island has several ranks), --syncer, the secret, --learner-id island-<i>,
// --island-rank i and --output RUN_DIR/island-<i>.
std::vector<Word> learner_words(const Fleet& f, const JobPaths& p, std::size_t island, const Word& syncer);
// The --set overrides that point a job that does not share this machine's file system at the
// mounted config's data and model (data.path and model.id when they are local paths).
std::vector<std::string> mounted_sets(const Fleet& f);

std::string island_role(std::size_t i);

// The syncer's manifest, then one per island: RUN_DIR/launch/<engine>/<role><ext>, each text
// from the engine's renderer.
using SyncerText = std::string (*)(const Fleet&);
using IslandText = std::string (*)(const Fleet&, std::size_t);
std::vector<Manifest> render_each(const Fleet& f, const std::string& engine, const std::string& ext, SyncerText syncer,
                                  IslandText island);

std::vector<Manifest> render_slurm(const Fleet& f);
std::vector<Manifest> render_skypilot(const Fleet& f);
std::vector<Manifest> render_kubernetes(const Fleet& f);
std::vector<ClientCommand> submit_slurm(const Fleet& f, const std::vector<Manifest>& ms);
std::vector<ClientCommand> submit_skypilot(const Fleet& f, const std::vector<Manifest>& ms);
std::vector<ClientCommand> submit_kubernetes(const Fleet& f, const std::vector<Manifest>& ms);

// A YAML scalar: plain where YAML reads it back as the same string, else JSON-quoted.
std::string yaml_str(const std::string& s);
// A literal block scalar ("|") of `text`, each line indented by `indent` spaces.
std::string yaml_block(const std::string& text, int indent);

}  // namespace yeto::fleet
