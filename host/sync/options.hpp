// Settings of the syncer and of the learner-side client, read from the [sync] section of
// the run config, and the start-up validation of the timeout hierarchy:
//
//   heartbeat_s < learner_timeout_s < grace_max_s < round_deadline_s < reconnect_budget_s
//
// Each level must be strictly longer than the one before it: several heartbeats fit in a
// learner timeout (one lost heartbeat never evicts a learner); a dead learner is evicted
// before the grace ceiling (so a grace window never waits on a learner that is gone); the
// grace ceiling ends before the round deadline (the deadline is the last resort for a round
// that never reaches its quorum); and a learner keeps reconnecting longer than a round lasts
// (so a syncer restart from its checkpoint does not make the learners give up).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "sync/merge.hpp"

namespace yeto::config {
class Config;
}

namespace yeto::sync {

// sync.grace_fraction: its largest value, and its default when sync.carry is off (the config's
// default, kGraceFraction, holds with carry: a round may wait longer than the pushing learner's
// period, because a carrying learner trains on and its next push waits for the merge).
inline constexpr double kGraceFraction = 1.5;
inline constexpr double kGraceFractionNoCarry = 0.6;
inline constexpr double kGraceFractionMax = 4.0;

struct Timeouts {
  double heartbeat_s = 1.0;
  double learner_timeout_s = 5.0;
  // How long a round waits for learners that have not pushed (sync/pace.hpp): a push waits at most
  // clamp(grace_fraction x its learner's push period, grace_min_s, grace_max_s); a missing learner
  // is waited for up to its expected arrival plus grace_factor x its prediction error.
  double grace_min_s = 0.0;
  double grace_max_s = 300.0;
  double grace_factor = 3.0;
  double grace_fraction = kGraceFraction;
  double round_deadline_s = 400.0;
  double reconnect_budget_s = 600.0;
  double final_timeout_s = 10.0;
  // Throws UsageError naming the keys that break the hierarchy.
  void validate() const;
};

// What the syncer broadcasts after a merge: q4 (default) or q2 updates of the public state (see
// UpdateMsg in protocol.hpp), or the exact float32 fragment.
enum class Downlink { q4, f32, q2 };
const char* downlink_name(Downlink d);
// How a learner's pushes travel (sync.uplink): q4 (default) or q2 (sync/quant.hpp).
enum class Uplink { q4, q2 };
const char* uplink_name(Uplink u);

// What a round's pushes weigh when some live islands are missing from it (sync.partial_merge):
//   share  each push weighs its share of the round of every live island that pushes (by count:
//          present / expected, spread over the present pushes by their samples), so a round
//          merged without a late island moves the state by that share and the late push adds
//          its own when it lands: a split round sums to the full round's mean;
//   full   the pushes present are the whole round (their weights sum to 1): each part of a
//          split round takes a full step, as if it were the whole round.
enum class PartialMerge { share, full };
const char* partial_merge_name(PartialMerge m);

struct SyncerOptions {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0: ephemeral (the chosen port is written to DIR/port)
  std::filesystem::path state_dir;
  std::string run_secret;          // the secret file's bytes
  std::string run_name = "yeto";
  Timeouts timeouts;
  std::uint32_t quorum = 1;
  std::uint32_t inner_steps = 64;  // the run's H (sync.inner_steps): a learner's push period before its pushes show it
  MergeRule merge = MergeRule::mean;  // sync.merge
  PartialMerge partial_merge = PartialMerge::share;  // sync.partial_merge
  double outer_lr = 1.0;        // with the mean merge: plain averaging (sync.outer_lr)
  double outer_momentum = 0.0;
  std::uint32_t max_staleness = 8;
  bool heloco = true;
  HelocoParams heloco_params;
  std::uint64_t checkpoint_every = 1;
  Downlink downlink = Downlink::q4;
  std::uint32_t quant_block = 64;  // block of the quantised downlink (sync.quant_block, as the pushes)
  std::size_t max_frame = 1024ull << 20;
  std::uint64_t budget_outer_steps = 0;
  std::uint64_t budget_samples = 0;
  double budget_seconds = 0;
  // The run's islands (sync.islands): the learners-done final cut waits until this many
  // distinct learners have joined, or until expect_window_s after the syncer started.
  std::uint32_t expected_learners = 1;
  double expect_window_s = 60.0;
  // Peers that have not authenticated yet ("strangers"): at most max_pending at a time and
  // max_pending_per_address from one address (the oldest is dropped to make room), accepted at
  // no more than accept_rate connections per second; the cap shrinks to what the process's
  // file-descriptor limit leaves after the syncer's own files and the expected learners.
  std::uint32_t max_pending = 64;
  std::uint32_t max_pending_per_address = 16;
  double accept_rate = 1000;
  // Refused strangers are logged and taped one by one up to reject_log_burst per
  // reject_log_interval_s; the rest are counted into one summary line and record per interval.
  std::uint32_t reject_log_burst = 20;
  double reject_log_interval_s = 10;
  // The tape is rotated at a checkpoint once it exceeds this many bytes (0: never): tape.jsonl
  // becomes tape.1.jsonl (older ones shift up, tape_keep are kept) and the new tape starts with a
  // `tape_rotated` record carrying every fragment's version.
  std::uint64_t tape_max_bytes = 256ull << 20;
  std::uint32_t tape_keep = 4;
  // Merges of fragments of at least offload_bytes (4 bytes a value), and the sealing and
  // opening of frames of at least as many bytes, run on a pool of worker_threads threads (0: one
  // per core) instead of the I/O thread, so one large fragment never holds up the others'
  // rounds (sync.worker_threads, sync.offload_kb). Smaller work stays on the I/O thread.
  // With checkpoint_every = 1 every merge's checkpoint (the fragment's data file and the
  // manifest) is written on checkpoint writer threads whatever the fragment's size.
  // offload_bytes = SIZE_MAX keeps everything on the I/O thread, the checkpoint included
  // (sync_loopback_bench's baseline: the design before the pools); 0 sends everything to the
  // pool (tests).
  std::uint32_t worker_threads = 0;
  std::size_t offload_bytes = 1u << 20;
  // The threads of that bulk work (merges, bulk frames, large fragments' data files) run this
  // many nice steps below the I/O thread (Linux, per thread; sync.bulk_nice), so they take the
  // cores the I/O thread, the small fragments' checkpoint and the manifest leave; 0: same
  // priority.
  int bulk_nice = 10;
  void validate() const;
};

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string run_secret;
  std::string run_name = "yeto";
  std::string learner_id;
  std::uint32_t inner_steps = 64;  // H (sync.inner_steps)
  float alpha = 1.0f;
  // Keep the island's own progress across merges (sync.carry, host/sync/carry.hpp): a new
  // global state G' becomes G' + the progress it does not count yet, and a fragment has one
  // push outstanding at a time (a push that falls due meanwhile waits for its merge). alpha
  // is then not used: nothing the island trained is blended away.
  bool carry = true;
  Uplink uplink = Uplink::q4;      // sync.uplink
  std::uint32_t quant_block = 64;
  Timeouts timeouts;
  std::size_t max_frame = 1024ull << 20;
  double backoff_initial_s = 0.05;
  double backoff_max_s = 2.0;
  std::filesystem::path events;    // JSON-lines progress events; empty: none
  // Island rank 0 of a multi-rank island: applying the final cut does not acknowledge it;
  // SyncClient::acknowledge_final() does, once every rank of the island has applied it.
  bool defer_final_ack = false;
  void validate() const;
};

// "HOST:PORT" -> host, port; throws UsageError.
void parse_host_port(const std::string& s, std::string& host, std::uint16_t& port);

Timeouts timeouts_from_config(const config::Config& cfg);
SyncerOptions syncer_options_from_config(const config::Config& cfg);
ClientOptions client_options_from_config(const config::Config& cfg);

}  // namespace yeto::sync
