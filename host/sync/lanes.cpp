#include "sync/lanes.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#ifdef __linux__
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace yeto::sync {

int thread_nice() {
#ifdef __linux__
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int n = ::getpriority(PRIO_PROCESS, tid);  // -1 is a valid nice value: errno tells
  return errno == 0 ? n : 0;
#else
  return 0;
#endif
}

bool lower_thread_priority(int steps) {
#ifdef __linux__
  if (steps <= 0) return true;
  // On Linux PRIO_PROCESS with a thread id sets that thread's nice value alone (NPTL threads are
  // tasks of their own); raising it needs no privilege.
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  const int target = std::min(19, thread_nice() + steps);
  if (::setpriority(PRIO_PROCESS, tid, target) != 0) {
    spdlog::warn("syncer: cannot lower a bulk thread's priority to nice {}: {}; it runs at the I/O thread's",
                 target, std::strerror(errno));
    return false;
  }
  return true;
#else
  (void)steps;
  return true;
#endif
}

WorkLane::WorkLane(std::string name, unsigned threads, int nice)
    : name_(std::move(name)), nice_(std::max(0, nice)), guard_(boost::asio::make_work_guard(ctx_)) {
  threads = std::max(1u, threads);
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i)
    threads_.emplace_back([this] {
#ifdef __linux__
      ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
#endif
      lower_thread_priority(nice_);
      ctx_.run();
    });
}

WorkLane::~WorkLane() { join(); }

void WorkLane::join() {
  guard_.reset();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

namespace {
unsigned per_core(unsigned workers) { return workers ? workers : std::max(1u, std::thread::hardware_concurrency()); }
}  // namespace

SyncerLanes::SyncerLanes(unsigned workers, int bulk_nice, std::size_t offload)
    : merges("sync-merge", per_core(workers), bulk_nice),
      frames("sync-frames", per_core(workers), bulk_nice),
      bulk_files("sync-ckpt-bulk", per_core(workers), bulk_nice),
      small_files("sync-ckpt-small", 1, 0),
      manifest("sync-manifest", 1, 0),
      offload_bytes(offload) {}

void SyncerLanes::join() {
  frames.join();
  merges.join();
  bulk_files.join();
  small_files.join();
  manifest.join();
}

}  // namespace yeto::sync
