// The syncer's threads besides its I/O thread, as lanes: a lane is a set of threads taking posted
// jobs in order, at a scheduling priority of its own. Bulk work (a large fragment's merge, the
// sealing and opening of bulk frames, a large fragment's data file) runs on lanes lowered by
// sync.bulk_nice, so it takes the cores only when the latency-critical threads (the I/O thread, a
// small fragment's data file, the manifest) leave them; a small fragment's data file has a lane of
// its own, never behind a large one's. docs/DESIGN.md, "Threads".
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace yeto::sync {

// The calling thread's nice value (Linux: its own, per thread; elsewhere 0).
int thread_nice();
// Lowers the calling thread's priority by `steps` nice steps (at most to 19). Linux only (a thread
// may always lower its own priority, unprivileged); elsewhere, and for steps <= 0, nothing. Returns
// false (and logs a warning) when the kernel refused.
bool lower_thread_priority(int steps);

class WorkLane {
 public:
  // `threads` threads (at least one), named `name` (at most 15 characters show), each lowering its
  // own priority by `nice` steps before it takes any job.
  WorkLane(std::string name, unsigned threads, int nice);
  ~WorkLane();
  WorkLane(const WorkLane&) = delete;
  WorkLane& operator=(const WorkLane&) = delete;

  template <class F>
  void post(F&& f) {
    boost::asio::post(ctx_, std::forward<F>(f));
  }
  // Runs the jobs already posted (and those they post), then ends the threads. Idempotent.
  void join();
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }
  int nice() const { return nice_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int nice_ = 0;
  boost::asio::io_context ctx_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::vector<std::thread> threads_;
};

// The syncer's lanes. `workers` threads per bulk lane (0: one per core); `bulk_nice`: how far
// the bulk lanes are lowered; `offload_bytes`: the size from which a fragment's data file is bulk.
struct SyncerLanes {
  SyncerLanes(unsigned workers, int bulk_nice, std::size_t offload_bytes);
  ~SyncerLanes() { join(); }

  WorkLane merges;          // bulk: merges of fragments of offload_bytes or more
  WorkLane frames;          // bulk: sealing and opening of frames of offload_bytes or more
  WorkLane bulk_files;      // bulk: data files of such fragments, releasing their old buffers
  WorkLane small_files;     // one thread, not lowered: data files of smaller fragments
  WorkLane manifest;        // one thread, not lowered: the manifest, one write at a time
  std::size_t offload_bytes;

  // The lane that writes a fragment's data file of `bytes` (4 bytes a value).
  WorkLane& data_file(std::size_t bytes) { return bytes >= offload_bytes ? bulk_files : small_files; }
  // Joined in this order when the syncer goes: the jobs of the first read the state.
  void join();
};

}  // namespace yeto::sync
