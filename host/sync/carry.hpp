#pragma once
// Keeping an island's own progress across merges (sync.carry).
//
// Without it a learner overwrites a fragment with each new global state, and the steps it
// trained between its push and the merge's arrival are lost (on a busy fleet a fifth of an
// island's steps or more). With it the learner sets θ ← G' + (θ − ref): the new global state
// plus its progress that G' does not yet count. ref is the learner's θ when it made the push
// that G' holds, or the public state it held before G' when G' holds none of its pushes (then
// the pushed-but-unmerged progress stays in θ and the snapshot moves with it). One push per
// fragment is outstanding at a time, so no progress is pushed twice; the syncer says which
// version holds a learner's push (`merged`, protocol 6). A push that went out on a connection
// that has since ended, with no note, is taken as lost: its progress stays in θ and goes with
// the next push (a syncer that restarted has lost it; one that merged it while the learner was
// away counts that progress twice, as two pushes of one base do without carry).
#include <cstdint>
#include <span>
#include <vector>

namespace yeto::sync {

// local[k] = global[k] + (local[k] − ref[k]), and exactly global[k] where local[k] == ref[k]
// (no progress: the learner holds the global bytes, signed zeros included).
void carry_onto(std::span<const float> global, std::span<const float> ref, std::span<float> local);

// What the learner's connection learned about its outstanding push of one fragment.
struct CarryNotes {
  std::uint64_t merged_version = 0;    // a `merged` note: the version that holds a push of ours,
  std::uint64_t merged_push_base = 0;  // and the base version of that push
  bool refused = false;                // the syncer did not accept our last push of it
  bool sent = false;                   // the outstanding push went out,
  std::uint64_t sent_epoch = 0;        // on this connection (they are numbered from 1)
};

enum class CarryCase {
  none,      // no push outstanding: carry everything since the public state
  included,  // the new state holds our outstanding push: carry what came after it
  pending,   // it does not (yet): carry everything, the snapshot moves along
  refused,   // the syncer refused the push: carry everything, the push is over
  lost,      // the push's connection ended before a note came: carry everything, push again
};
const char* carry_case_name(CarryCase c);

// How a new global state `version` meets the outstanding push (of base `push_base`), given the
// connection's notes and the current connection's epoch.
CarryCase carry_case(bool outstanding, std::uint64_t push_base, const CarryNotes& notes, std::uint64_t link_epoch,
                     std::uint64_t version);

// One fragment's carry state on the training thread.
class FragmentCarry {
 public:
  bool outstanding() const { return outstanding_; }
  std::uint64_t push_base() const { return push_base_; }
  // A push of base `base_version` was made from these values of the fragment.
  void pushed(std::uint64_t base_version, std::span<const float> values);
  // The push ended without a new state (refused, lost): its progress stays in θ, to be pushed again.
  void drop();
  // Applies the new global state `global` (version `version`) to `local`, the fragment's values,
  // where `held` is the public state the learner held until now. Returns the case applied.
  CarryCase apply(std::span<const float> global, std::uint64_t version, std::span<const float> held,
                  const CarryNotes& notes, std::uint64_t link_epoch, std::span<float> local);

 private:
  bool outstanding_ = false;
  std::uint64_t push_base_ = 0;
  std::vector<float> snapshot_;
};

}  // namespace yeto::sync
