// The learner's view of outer synchronisation (DiLoCo). The inner loop calls it after every
// optimizer step; an implementation talks to the syncer in the background (island rank 0),
// blends returned global fragments into the trainable tensors at step boundaries, and never
// makes the inner loop wait on the network. A run without a syncer has none.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace yeto::learner {

// Canonical trainable tensors (float32 masters), in canonical-name order.
using Trainable = std::vector<std::pair<std::string, at::Tensor>>;

class OuterSync {
 public:
  virtual ~OuterSync() = default;
  // Before the first step: pull the current global state (a learner joining or rejoining
  // catches up here) and overwrite `trainable` with it under no_grad.
  virtual void start(const Trainable& trainable) = 0;
  // After optimizer step `step` (1-based) with `samples` samples seen in total: push
  // pseudo-gradients of the fragments due, apply any global fragments that arrived
  // (alpha-blend, under no_grad). Must not block on the network.
  virtual void after_step(std::int64_t step, std::int64_t samples, const Trainable& trainable) = 0;
  // True once the syncer announced the budget cutoff (the learner then stops stepping).
  virtual bool stop_requested() const = 0;
  // Terminal handshake: wait for the authoritative final cut, overwrite `trainable` with it
  // and acknowledge. Returns false when no final cut could be obtained (logged).
  virtual bool finish(const Trainable& trainable) = 0;
};

}  // namespace yeto::learner
