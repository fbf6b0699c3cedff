// sync.carry on hand-computed vectors: θ ← G' + (θ − ref), and which ref each case takes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "sync/carry.hpp"

namespace ys = yeto::sync;

namespace {
bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

TEST(Carry, NoProgressLeavesExactlyTheGlobalBytes) {
  const std::vector<float> global = {1.5f, -0.0f, 3.0f, 1e-30f};
  std::vector<float> local = {7.0f, 0.0f, -2.0f, 4.0f};
  const std::vector<float> ref = local;
  ys::carry_onto(global, ref, local);
  EXPECT_TRUE(same_bytes(local, global));  // -0.0 stays -0.0 (global + 0.0 would be +0.0)
  std::vector<float> moved = {7.5f, 0.25f, -2.0f, 4.0f};
  ys::carry_onto(global, ref, moved);
  EXPECT_EQ(moved, (std::vector<float>{2.0f, 0.25f, 3.0f, 1e-30f}));
  std::vector<float> shorter = {1.0f};
  EXPECT_THROW(ys::carry_onto(global, ref, shorter), yeto::Error);
}

TEST(Carry, ANoteForThePushCarriesOnlyWhatCameAfterIt) {
  const std::vector<float> held = {0.0f, 0.0f};
  std::vector<float> theta = {1.0f, 2.0f};
  ys::FragmentCarry c;
  c.pushed(3, theta);
  EXPECT_TRUE(c.outstanding());
  theta = {1.5f, 2.5f};  // trained on while the merge was on its way
  ys::CarryNotes n;
  n.merged_version = 4;
  n.merged_push_base = 3;
  n.sent = true;
  n.sent_epoch = 1;
  EXPECT_EQ(c.apply(std::vector<float>{10.0f, 20.0f}, 4, held, n, 1, theta), ys::CarryCase::included);
  EXPECT_EQ(theta, (std::vector<float>{10.5f, 20.5f}));
  EXPECT_FALSE(c.outstanding());
}

TEST(Carry, AMergeWithoutThePushKeepsEverythingAndMovesTheSnapshot) {
  std::vector<float> theta = {1.0f, 2.0f};
  ys::FragmentCarry c;
  c.pushed(3, theta);
  theta = {1.5f, 2.5f};
  ys::CarryNotes none;
  none.sent = true;
  none.sent_epoch = 1;
  const std::vector<float> g1 = {10.0f, 20.0f};
  EXPECT_EQ(c.apply(g1, 4, std::vector<float>{0.0f, 0.0f}, none, 1, theta), ys::CarryCase::pending);
  EXPECT_EQ(theta, (std::vector<float>{11.5f, 22.5f}));  // the other islands' merge, and all of ours
  EXPECT_TRUE(c.outstanding());
  theta = {12.5f, 23.5f};
  // A note of a later version than the state at hand, and one for another push, change nothing.
  ys::CarryNotes later = none;
  later.merged_version = 6;
  later.merged_push_base = 3;
  ys::CarryNotes other = none;
  other.merged_version = 5;
  other.merged_push_base = 2;
  EXPECT_EQ(ys::carry_case(true, 3, later, 1, 5), ys::CarryCase::pending);
  EXPECT_EQ(ys::carry_case(true, 3, later, 2, 5), ys::CarryCase::pending);  // noted: not lost with its connection
  EXPECT_EQ(ys::carry_case(true, 3, other, 1, 5), ys::CarryCase::pending);
  ys::CarryNotes ours = none;
  ours.merged_version = 5;
  ours.merged_push_base = 3;
  EXPECT_EQ(c.apply(std::vector<float>{100.0f, 200.0f}, 5, g1, ours, 1, theta), ys::CarryCase::included);
  // The snapshot moved with g1: what comes after the push is 1.5 in each value.
  EXPECT_EQ(theta, (std::vector<float>{101.5f, 201.5f}));
}

TEST(Carry, ARefusedPushKeepsItsProgressForTheNext) {
  std::vector<float> theta = {1.0f, 2.0f};
  ys::FragmentCarry c;
  c.pushed(3, theta);
  ys::CarryNotes n;
  n.refused = true;
  EXPECT_EQ(c.apply(std::vector<float>{10.0f, 20.0f}, 4, std::vector<float>{0.0f, 0.0f}, n, 1, theta),
            ys::CarryCase::refused);
  EXPECT_EQ(theta, (std::vector<float>{11.0f, 22.0f}));
  EXPECT_FALSE(c.outstanding());
  c.pushed(4, theta);
  c.drop();  // refused with no new state
  EXPECT_FALSE(c.outstanding());
  EXPECT_EQ(ys::carry_case(false, 0, n, 1, 9), ys::CarryCase::none);
}

TEST(Carry, APushWhoseConnectionEndedWithoutANoteIsTakenAsLost) {
  std::vector<float> theta = {1.0f, 2.0f};
  ys::FragmentCarry c;
  c.pushed(3, theta);
  theta = {1.5f, 2.5f};
  ys::CarryNotes n;
  n.sent = true;
  n.sent_epoch = 1;
  EXPECT_EQ(ys::carry_case(true, 3, n, 1, 4), ys::CarryCase::pending);  // same connection: not yet
  EXPECT_EQ(c.apply(std::vector<float>{10.0f, 20.0f}, 4, std::vector<float>{0.0f, 0.0f}, n, 2, theta),
            ys::CarryCase::lost);
  EXPECT_EQ(theta, (std::vector<float>{11.5f, 22.5f}));  // everything kept, to be pushed again
  EXPECT_FALSE(c.outstanding());
  // A note that came on the new connection still says it merged.
  ys::CarryNotes noted = n;
  noted.merged_version = 4;
  noted.merged_push_base = 3;
  EXPECT_EQ(ys::carry_case(true, 3, noted, 2, 4), ys::CarryCase::included);
  EXPECT_EQ(ys::carry_case(true, 3, noted, 2, 3), ys::CarryCase::pending);  // noted, its version not here yet
  // Not sent yet (still queued when the connection ended): pending, it goes on the next one.
  ys::CarryNotes queued;
  EXPECT_EQ(ys::carry_case(true, 3, queued, 2, 4), ys::CarryCase::pending);
}
