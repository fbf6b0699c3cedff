// micro_batch_size = auto: run real forward/backward probes at growing micro batch sizes and
// keep the largest that fits: on CUDA until the allocator runs out of memory, on the CPU
// while the process's peak resident memory stays within train.memory_budget_mb (0: 80 % of
// the memory available at start). With shape buckets, up to eight distinct shapes are probed
// and the smallest size that fits all of them wins. Candidates divide the requested effective
// batch (micro_batch_size x gradient_accumulation with micro = 1, i.e. gradient_accumulation),
// so accumulation is rebalanced to keep it. Torch-free: the probe itself is a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace yeto::learner {

struct ProbeShape {
  std::string label;               // "1x64x64"
  std::vector<std::size_t> rows;   // rows of that shape (repeated cyclically to fill a probe)
};

struct ProbeRequest {
  std::int64_t effective_batch = 1;
  std::int64_t budget_mb = 0;      // 0: 80 % of MemAvailable
  std::vector<ProbeShape> shapes;  // at most 8 are probed
};

struct MicroBatchDecision {
  std::int64_t micro_batch_size = 1;
  std::int64_t gradient_accumulation = 1;
  std::string log;                 // what was probed and why this size
};

// Memory probes: the process's peak RSS since the last reset, in MiB.
void reset_peak_rss();
double peak_rss_since_reset_mb();
double available_memory_mb();

// `probe(rows)` runs one forward/backward on those rows; it throws on out-of-memory (any
// exception whose message mentions "out of memory" counts as not fitting; others propagate).
// `peak_mb` defaults to peak_rss_since_reset_mb (reset before every probe).
MicroBatchDecision choose_micro_batch(const ProbeRequest& request,
                                      const std::function<void(const std::vector<std::size_t>&)>& probe,
                                      const std::function<double()>& peak_mb = {},
                                      const std::function<void()>& reset_peak = {});

}  // namespace yeto::learner
