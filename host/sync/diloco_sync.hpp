// Decoupled DiLoCo for the learner: learner::OuterSync over the torch-free SyncClient.
//
// Every rank of an island runs a DilocoSync; only island rank 0 owns the SyncClient (joins,
// pushes, pulls, heartbeats). start() builds the fragment layout from the trainable
// tensors (canonical order), joins the syncer and overwrites the tensors with the run's
// current global state (a joining or rejoining island catches up here). after_step() hands
// the client the tensors at every step boundary: fragments that are due (per-fragment
// offsets, every H inner steps) are turned into pseudo-gradients Δ = θ_global − θ_local and
// queued for the communication thread (which q4-encodes and sends them); global fragments
// that arrived meanwhile are alpha-blended in. Nothing in after_step() waits on the network.
// Tensors that are not contiguous float32 on the CPU (GPU masters) are staged through host
// buffers, and only on the steps where the client reads or writes them.
//
// The run ends with the terminal handshake: stop_requested() turns true once the syncer's
// final cut has arrived (its budget is spent, or every island is done); finish() tells the
// syncer this island is done (when it stopped on its own step budget), waits for the final
// cut, overwrites the tensors with it and acknowledges it.
//
// Islands of several ranks (DilocoOptions::island): at every step boundary rank 0 runs the
// client's step (never waiting on the network) and broadcasts its decision over the island's
// process group -- how many global fragments it blended in (fragment, version, alpha each),
// whether the final cut was applied, whether the run must stop -- then each blended global
// fragment; every other rank applies the same alpha-blend to its (identical) tensors, so all
// ranks stay bit-identical. The final cut is applied by every rank the same way; rank 0
// acknowledges it to the syncer only after a barrier, i.e. once every rank holds it. The
// syncer sees the island as one learner.
//
// Progress events (JSON lines, see docs/DESIGN.md "Broadcast, catch-up and the client") go
// to DilocoOptions::client.events, normally RUN_DIR/sync_events.jsonl (rank 0 only).
#pragma once

#include <cstdint>
#include <memory>

#include "learner/outer_sync.hpp"
#include "sync/client.hpp"
#include "sync/layout.hpp"
#include "sync/options.hpp"

namespace yeto::config {
class Config;
}
namespace yeto::island {
class Collectives;
}

namespace yeto::sync {

struct DilocoOptions {
  ClientOptions client;  // syncer address, secret, learner id, H, alpha, q4 block, timeouts, events
  std::uint32_t fragments = 1;
  FragmentPattern pattern = FragmentPattern::binpack;
  // start(): how long to wait for the global state. When it has not arrived by then the island
  // trains on its local weights and is overwritten (alpha = 1) at the step boundary after it
  // does arrive, so a missing syncer never stops training.
  double join_timeout_s = 60.0;
  // finish(): how long to wait for the final cut; 0 waits while the client is still trying
  // to reach the syncer (the reconnect budget bounds it).
  double final_wait_s = 0.0;
  // The island's last step (train.max_steps; <= 0: not known). With carry the pushes of its
  // last H steps are left to finish(), which pushes each fragment's rest in one push.
  std::int64_t max_steps = 0;
  // The island's ranks (every rank constructs a DilocoSync with the same group); null: one rank.
  island::Collectives* ranks = nullptr;
};

// [sync] keys of the run config (sync.fragments, sync.fragment_pattern, sync.join_timeout_s,
// the client keys). The caller fills in the address, secret, learner id and events path.
DilocoOptions diloco_options_from_config(const config::Config& cfg);

struct DilocoStats {
  ClientStats client;
  std::uint64_t steps = 0;             // after_step() calls
  std::uint64_t fragments_applied = 0; // global fragments blended in (including catch-up)
  std::uint64_t staged_steps = 0;      // steps whose tensors went through host buffers
  bool joined = false;                 // the global state arrived in start()
  bool finished = false;               // the final cut was applied (and, by rank 0, acknowledged)
  std::uint64_t broadcasts = 0;        // global fragments rank 0 broadcast to the island (or this rank received)
};

class DilocoSync final : public learner::OuterSync {
 public:
  explicit DilocoSync(DilocoOptions options);
  ~DilocoSync() override;
  DilocoSync(const DilocoSync&) = delete;
  DilocoSync& operator=(const DilocoSync&) = delete;

  void start(const learner::Trainable& trainable) override;
  void after_step(std::int64_t step, std::int64_t samples, const learner::Trainable& trainable) override;
  bool stop_requested() const override;
  bool finish(const learner::Trainable& trainable) override;

  DilocoStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yeto::sync
