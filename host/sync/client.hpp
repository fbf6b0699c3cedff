// The learner island's side of synchronisation (used by island rank 0). The training
// thread calls step() after every inner step; it never waits on the network: pushes are
// handed to a communication thread (which quantises and sends them) and new global
// fragments that thread received are applied at the next step boundary. The client
// reconnects with exponential backoff for up to sync.reconnect_budget_s, catches up from
// the syncer's current global state on every (re)connection, and writes JSON-lines
// progress events. Torch-free: tensors are the trainable tensors, in canonical order, as
// float32 spans.
//
// Other ranks of the island: rank 0 broadcasts StepResult::applied (fragment, alpha, data)
// and every rank calls apply_fragment() with the same values, so all ranks hold the same
// weights after the blend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "sync/layout.hpp"
#include "sync/options.hpp"

namespace yeto::sync {

struct AppliedFragment {
  std::uint32_t fragment = 0;
  std::uint64_t version = 0;
  float alpha = 1.0f;         // 1: overwrite (first state, catch-up, final cut, sync.carry)
  std::vector<float> data;    // the global fragment that was blended in (sync.carry: the values that resulted)
};

struct StepResult {
  std::vector<AppliedFragment> applied;
  std::vector<std::uint32_t> pushed;  // fragments whose pseudo-gradient was queued at this step
  bool finished = false;  // the final cut was applied: the tensors now equal it; save and stop
  bool failed = false;    // the reconnect budget is spent (the syncer is gone), or it refused the handshake
};

struct ClientStats {
  bool connected = false;
  std::uint64_t connects = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t pushes_sent = 0;
  std::uint64_t pushes_accepted = 0;
  std::uint64_t pushes_refused = 0;
  std::uint64_t fragments_received = 0;  // full fragments (catch-up, the f32 downlink)
  std::uint64_t updates_received = 0;    // q4 updates applied to the public state
  std::uint64_t fragments_held = 0;      // catch-ups not needed: the syncer accepted the claim (holds)
  std::uint64_t inits_sent = 0;          // `init` frames written: the run's initial state, when asked for it
  std::uint64_t init_bytes = 0;          // their bytes on the wire
  std::uint64_t pushes_deferred = 0;     // sync.carry: pushes that fell due while the fragment's last was outstanding
  std::uint64_t steps = 0;
};

class SyncClient {
 public:
  SyncClient(ClientOptions options, Layout layout);
  ~SyncClient();
  SyncClient(const SyncClient&) = delete;
  SyncClient& operator=(const SyncClient&) = delete;

  // Starts the communication thread. `initial` (every trainable tensor) initialises the run
  // when the syncer has no state yet; otherwise the syncer's state wins.
  void start(std::span<const std::span<const float>> initial);
  // Start-up only: waits until every fragment's global state has arrived and overwrites the
  // tensors with it. False when it did not arrive in time or the client gave up.
  bool wait_for_global(std::span<const std::span<float>> tensors, double timeout_s);
  // After each inner step (samples: samples of that step). See the file comment. When this
  // step will read or write the tensors (a fragment is due, a global fragment or the final cut
  // is waiting), before_touch is called first, once: a caller that stages its tensors through
  // host buffers fills them there and copies back only the fragments in StepResult::applied.
  // steps_left: the inner steps this island has left after this one (-1: not known). With
  // carry, a push that would fall due with fewer than H steps left is left to push_remaining()
  // at the end, so a fragment's last push covers the rest of the steps instead of a short push
  // (and its merge) following a full one.
  StepResult step(std::span<const std::span<float>> tensors, std::uint64_t samples,
                  const std::function<void()>& before_touch = {}, std::int64_t steps_left = -1);
  // The learner's steps are over (call before finish_local): with ClientOptions::carry, what it
  // trained since a fragment's last push is pushed too, once that fragment has no push
  // outstanding (waiting up to timeout_s for the merge it waits for; a push due at the end of
  // the steps may be waiting for one). Without it the final cut would overwrite those steps.
  // Carried merges are applied to `tensors` on the way (listed in `out`, like step()'s). True
  // when nothing is left unpushed (always without carry); false after the timeout (logged and
  // an `unpushed` event), a final cut that came first, or a client that gave up.
  bool push_remaining(std::span<const std::span<float>> tensors, double timeout_s,
                      const std::function<void()>& before_touch = {}, StepResult* out = nullptr);
  // The learner reached its own step budget: after the pushes already queued, tell the syncer
  // (`done`, resent on every reconnection) that no more will come. When every live learner is
  // done the syncer merges what is pending and takes the final cut.
  void finish_local(std::uint64_t step, std::uint64_t samples);
  // Terminal handshake outside step(): waits up to timeout_s for the final cut, overwrites the
  // tensors with it and queues the acknowledgement. True when it was applied (now or before).
  bool wait_for_final(std::span<const std::span<float>> tensors, double timeout_s);
  // With ClientOptions::defer_final_ack: queues the acknowledgement of the applied final cut
  // (no-op before it was applied, or when it was already queued).
  void acknowledge_final();
  bool final_cut_available() const;  // the final cut has arrived (applied or not)
  bool gave_up() const;              // the reconnect budget is spent, or the handshake was refused
  // Sends what is queued (the final acknowledgement, bounded by timeout_s), then stops.
  void close(double timeout_s = 5.0);
  ClientStats stats() const;
  const Layout& layout() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yeto::sync
