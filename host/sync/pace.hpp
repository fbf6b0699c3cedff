// How long a fragment's round waits for the learners that have not pushed into it yet: from
// each learner's own push rhythm, the syncer predicts when its next push of the fragment
// arrives, and a round waits for a learner expected within a bound, never longer.
//
// Per learner (in memory only; pure: every time is passed in, so tests drive it with a
// simulated clock):
//   spi   seconds per inner step, an average over the intervals between two consecutive pushes
//         of the same fragment divided by the inner steps the later push covers (exact: a push
//         carries the steps since the learner's previous push of that fragment);
//   H     the inner steps of its latest such push, at most the run's sync.inner_steps (its push
//         period in steps; before any, sync.inner_steps): a carrying learner's push that waited
//         for a merge covers more steps, but its period stays H (see period());
//   dev   the average error of those predictions (what its rhythm jitters by);
//   L[p]  when its last push of fragment p arrived.
// Its next push of p is expected at e = L[p] + H·spi, give or take the slack
// s = max(grace_factor·dev, kSlackFloor·H·spi, resolution_s).
//
// No push waits in a round longer than its learner's bound, clamp(max(grace_fraction × H·spi,
// resolution_s), grace_min_s, grace_max_s) (grace_max_s until its rate is known): the round's
// deadline is the earliest arrival + bound of its pushes. Until then it waits for every active
// learner that has not pushed and is expected:
//   - it has no prediction yet (no push of this fragment since it joined, or no rate yet): up to
//     the deadline;
//   - e − s ≤ deadline (due before the deadline): up to e + s, or up to the deadline once it is
//     late (past e + s: a learner rendering validation samples or writing a checkpoint), but not
//     once it is late by more than its own period (stalled or dead),
// and at least grace_min_s after the round's first push. A learner that is dead, stalled or much
// slower is not expected (its next push is further away than the deadline, or it missed it by a
// period) or waited for up to the deadline: it never delays the others by more than their
// bound. A learner that runs at the others' speed is expected and waited for, whatever the phase
// between them, as long as it is within the bound: with the default grace_fraction of one half,
// of the two gaps between two equal islands' pushes (which add up to a period) one always is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace yeto::sync {

struct PaceOptions {
  double grace_min_s = 0.0;
  double grace_max_s = 300.0;
  double grace_factor = 3.0;     // slack = grace_factor x a learner's prediction error
  double grace_fraction = 0.6;  // the bound: this fraction of a learner's push period
  std::uint32_t inner_steps = 64;  // H before a learner's pushes show its own
  // The syncer's time resolution (it decides on pushes and on ticks of heartbeat_s / 4, and frames
  // arrive with the scheduling jitter of a busy machine): bounds and slacks are at least this.
  double resolution_s = 0;
};

// The slack is at least this fraction of the learner's push period (a learner whose pushes
// arrive like clockwork is still waited for when a push is a little late).
inline constexpr double kSlackFloor = 0.1;

struct RoundPush {
  std::string id;
  double at = 0;  // when it arrived
};

struct RoundWait {
  bool merge = false;        // the round may merge now
  double bound = 0;          // the most it waits after its first push: deadline - first (s)
  double until = 0;          // when it will merge unless every active learner pushes first
  std::vector<std::string> expected;  // the missing learners it waits for
};

class Pacer {
 public:
  explicit Pacer(PaceOptions o = {}) : o_(o) {}

  // A push of fragment p covering inner_steps steps arrived at time t.
  void on_push(const std::string& id, std::uint32_t p, std::uint64_t inner_steps, double t);
  // The learner (re)joined: its step counter may have restarted, so its pushes' arrival times
  // start afresh (its rate and jitter are kept).
  void on_join(const std::string& id);

  // The decision for a round of fragment p that holds the pushes `in_round` (at least the quorum;
  // the earliest arrived at `first`); `active` are the learners it could wait for.
  RoundWait decide(std::uint32_t p, const std::vector<RoundPush>& in_round, const std::vector<std::string>& active,
                   double first, double now) const;
  // The most a push of this learner waits in a round (s).
  double bound(const std::string& id) const;

  // The learner's push period H·spi (s); < 0 when its rate is not known yet.
  double period(const std::string& id) const;
  // When its next push of fragment p is expected; < 0 when there is no prediction.
  double expected_at(const std::string& id, std::uint32_t p) const;
  // The slack around that prediction; < 0 when there is none.
  double slack(const std::string& id) const;

 private:
  struct Learner {
    double spi = -1;        // seconds per inner step
    double dev = -1;        // mean |arrival - prediction|
    std::uint64_t h = 0;    // inner steps between two pushes of a fragment
    std::map<std::uint32_t, double> last;  // fragment -> arrival of the last push
  };
  PaceOptions o_;
  std::map<std::string, Learner> l_;
};

}  // namespace yeto::sync
