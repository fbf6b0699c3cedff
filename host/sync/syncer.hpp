// The fragment syncer: accepts learner islands over TCP, authenticates them, merges their
// pseudo-gradients per fragment (quorum, adaptive grace window, token-weighted RDA, HeLoCo
// correction, Nesterov outer step), broadcasts each merge's new global state (a q4 update of
// the public state every learner holds, or the exact fragment), keeps the event tape and the
// checkpoint in the state directory, and ends the run with the terminal handshake.
// docs/PROTOCOL.md and the "Synchronisation" section of docs/DESIGN.md state every rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "sync/options.hpp"

namespace yeto::sync {

class Syncer {
 public:
  // Validates the options (throws UsageError) and restores the state directory.
  explicit Syncer(SyncerOptions options);
  ~Syncer();
  Syncer(const Syncer&) = delete;
  Syncer& operator=(const Syncer&) = delete;

  // Serves until the final marker is written (returns 0) or stop() is called (returns 130 after
  // checkpointing). The port actually bound is written to STATE_DIR/port before serving.
  int run();
  // Thread-safe: checkpoint and return from run() without a final cut.
  void stop();
  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yeto::sync
