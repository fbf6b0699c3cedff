// The syncer's lanes (sync/lanes.hpp): the bulk lanes run at sync.bulk_nice below the thread that
// made them and the latency-critical ones do not (read back with getpriority, in the lanes and in
// a syncer's own threads); a small fragment's data file and the manifest are written on lanes of
// their own, so they are written while a large fragment's data file is held. A connection's queue:
// where a small fragment's new state goes (overtake_position).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sys/resource.h>
#endif

#include "support/temp_dir.hpp"
#include "sync/lanes.hpp"
#include "sync/outqueue.hpp"
#include "sync/syncer.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;

namespace {

// The nice values of a lane's threads: one job per thread, each held until all have started, so
// every thread of the lane runs exactly one.
std::vector<int> lane_nices(ys::WorkLane& lane) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> seen;
    unsigned left = 0;  // jobs still running
  };
  auto sh = std::make_shared<Shared>();
  const unsigned n = lane.threads();
  sh->left = n;
  for (unsigned i = 0; i < n; ++i)
    lane.post([sh, n] {
      std::unique_lock lk(sh->mu);
      sh->seen.push_back(ys::thread_nice());
      sh->cv.notify_all();
      sh->cv.wait(lk, [&] { return sh->seen.size() == n; });
      --sh->left;
      sh->cv.notify_all();
    });
  std::unique_lock lk(sh->mu);
  sh->cv.wait(lk, [&] { return sh->left == 0; });
  return sh->seen;
}

// A job that holds its lane's thread until released.
struct Hold {
  std::promise<void> started, release;
  std::shared_future<void> released{release.get_future().share()};
  void occupy(ys::WorkLane& lane) {
    lane.post([this] {
      started.set_value();
      released.wait();
    });
    started.get_future().wait();
  }
};

}  // namespace

TEST(SyncLanes, BulkLanesRunLoweredAndTheLatencyCriticalOnesDoNot) {
#ifndef __linux__
  GTEST_SKIP() << "thread priorities are set on Linux only";
#else
  const int base = ys::thread_nice();
  if (base > 12) GTEST_SKIP() << "the test runs at nice " << base << ": no room to lower a lane by 7";
  ys::SyncerLanes lanes(2, 7, 1u << 20);
  for (ys::WorkLane* lane : {&lanes.merges, &lanes.frames, &lanes.bulk_files}) {
    EXPECT_EQ(lane->threads(), 2u) << lane->name();
    for (int n : lane_nices(*lane)) EXPECT_EQ(n, base + 7) << lane->name();
  }
  for (ys::WorkLane* lane : {&lanes.small_files, &lanes.manifest}) {
    EXPECT_EQ(lane->threads(), 1u) << lane->name();
    for (int n : lane_nices(*lane)) EXPECT_EQ(n, base) << lane->name();
  }
  EXPECT_EQ(ys::thread_nice(), base) << "making the lanes changed the caller's priority";
  // Clamped at 19.
  ys::WorkLane lowest("sync-test", 1, 40);
  EXPECT_EQ(lane_nices(lowest), std::vector<int>{19});
#endif
}

TEST(SyncLanes, ASmallFragmentsDataFileIsWrittenWhileEveryBulkThreadIsHeld) {
  const std::size_t offload = 1u << 20;
  ys::SyncerLanes lanes(2, 0, offload);
  EXPECT_EQ(&lanes.data_file(offload), &lanes.bulk_files);
  EXPECT_EQ(&lanes.data_file(50'000'000 * sizeof(float)), &lanes.bulk_files);
  EXPECT_EQ(&lanes.data_file(offload - 1), &lanes.small_files);
  EXPECT_EQ(&lanes.data_file(65'536 * sizeof(float)), &lanes.small_files);
  // Every bulk thread held by a large fragment's job (its data file, a merge, a frame being
  // opened), and one more large data file queued behind them.
  std::vector<std::unique_ptr<Hold>> holds;
  for (ys::WorkLane* lane : {&lanes.bulk_files, &lanes.merges, &lanes.frames})
    for (unsigned i = 0; i < lane->threads(); ++i) {
      holds.push_back(std::make_unique<Hold>());
      holds.back()->occupy(*lane);
    }
  std::promise<void> queued_large;
  lanes.data_file(offload).post([&] { queued_large.set_value(); });
  // A small fragment's data file, then the manifest naming it: both run while the large jobs are held.
  std::promise<void> small_written, manifest_written;
  lanes.data_file(65'536 * sizeof(float)).post([&] {
    small_written.set_value();
    lanes.manifest.post([&] { manifest_written.set_value(); });
  });
  // Not a timing bound: a lane shared with the held jobs would never run these until released.
  EXPECT_EQ(small_written.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(manifest_written.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto large_future = queued_large.get_future();
  EXPECT_EQ(large_future.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the queued large data file ran while every bulk thread was held";
  for (auto& h : holds) h->release.set_value();
  large_future.wait();
  lanes.join();  // the held jobs end before their Holds go
}

#ifdef __linux__
namespace {
// The nice values of this process's threads, by thread name (/proc/self/task/TID/comm).
std::map<std::string, std::vector<int>> nices_by_thread_name() {
  std::map<std::string, std::vector<int>> out;
  for (const auto& e : fs::directory_iterator("/proc/self/task")) {
    std::ifstream in(e.path() / "comm");
    std::string name;
    std::getline(in, name);
    errno = 0;
    const int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(std::stoi(e.path().filename().string())));
    if (errno == 0) out[name].push_back(n);
  }
  return out;
}
}  // namespace
#endif

TEST(SyncLanes, ASyncersBulkThreadsRunAtItsBulkNice) {
#ifndef __linux__
  GTEST_SKIP() << "thread priorities are set on Linux only";
#else
  const int base = ys::thread_nice();
  if (base > 14) GTEST_SKIP() << "the test runs at nice " << base << ": no room to lower a lane by 5";
  for (const int bulk_nice : {5, 0}) {
    yeto::test::TempDir tmp;
    ys::SyncerOptions so;
    so.state_dir = tmp / "state";
    so.run_secret = "lanes-test-secret-0123456789abcdef";
    so.worker_threads = 2;
    so.bulk_nice = bulk_nice;
    ys::Syncer syncer(so);
    // The lanes' threads lower themselves as they start: wait until each is seen at its nice.
    std::map<std::string, std::vector<int>> seen;
    const auto settled = [&] {
      seen = nices_by_thread_name();
      for (const char* bulk : {"sync-merge", "sync-frames", "sync-ckpt-bulk"})
        if (seen[bulk] != std::vector<int>(2, base + bulk_nice)) return false;
      return seen["sync-ckpt-small"] == std::vector<int>{base} && seen["sync-manifest"] == std::vector<int>{base};
    };
    for (int i = 0; i < 500 && !settled(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (const char* bulk : {"sync-merge", "sync-frames", "sync-ckpt-bulk"})
      EXPECT_EQ(seen[bulk], std::vector<int>(2, base + bulk_nice)) << bulk << " with bulk_nice " << bulk_nice;
    EXPECT_EQ(seen["sync-ckpt-small"], std::vector<int>{base}) << "bulk_nice " << bulk_nice;
    EXPECT_EQ(seen["sync-manifest"], std::vector<int>{base}) << "bulk_nice " << bulk_nice;
    EXPECT_EQ(ys::thread_nice(), base);
  }
#endif
}

TEST(SyncLanes, BulkNiceOutOfRangeIsRefused) {
  yeto::test::TempDir tmp;
  ys::SyncerOptions so;
  so.state_dir = tmp / "state";
  so.run_secret = "lanes-test-secret-0123456789abcdef";
  so.bulk_nice = 20;
  EXPECT_THROW(ys::Syncer{so}, std::exception);
  so.bulk_nice = -1;
  EXPECT_THROW(ys::Syncer{so}, std::exception);
}

namespace {
struct Queued {
  ys::MsgType type;
  std::uint32_t fragment;
  std::size_t bytes;
};
std::size_t position(const std::deque<Queued>& q, std::uint32_t p) {
  return ys::overtake_position(q, p, 1000, [](const Queued& f) { return f.bytes; });
}
}  // namespace

TEST(SyncOutQueue, ASmallFragmentsStateGoesAheadOfOtherFragmentsBulkStateOnly) {
  using ys::MsgType;
  // The front is never passed, even when it is another fragment's bulk update.
  EXPECT_EQ(position({}, 1), 0u);
  EXPECT_EQ(position({{MsgType::update, 0, 5000}}, 1), 1u);
  // Behind the front: two bulk states of fragment 0 waiting are passed.
  EXPECT_EQ(position({{MsgType::update, 0, 5000}, {MsgType::update, 0, 5000}, {MsgType::fragment, 0, 5000}}, 1), 1u);
  // Not a frame of the same fragment (its base must arrive first), nor a small one, nor a control
  // frame or a raw frame.
  EXPECT_EQ(position({{MsgType::update, 0, 5000}, {MsgType::update, 1, 5000}, {MsgType::update, 0, 5000}}, 1), 2u);
  EXPECT_EQ(position({{MsgType::update, 0, 5000}, {MsgType::update, 2, 999}, {MsgType::update, 0, 5000}}, 1), 2u);
  EXPECT_EQ(position({{MsgType::update, 0, 5000}, {MsgType::final_cut, ys::kNoFragment, 5000},
                      {MsgType::fragment, 0, 5000}},
                     1),
            2u);
  EXPECT_EQ(position({{MsgType::update, 0, 5000}, {MsgType::fragment, ys::kNoFragment, 5000}}, 1), 2u);
}
