// The process group of one learner island: every rank of the island, joined through a c10d
// TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 serves it) and a c10d process group (Gloo on
// the CPU; NCCL for CUDA tensors when LibTorch was built with it): the Collectives of an
// island of several ranks (collectives.hpp). The learner uses it to average LoRA gradients
// (train.shard = "ddp") and DilocoSync to broadcast what rank 0 received from the syncer.
// Include only where LibTorch is already in use.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "island/collectives.hpp"
#include "island/env.hpp"

namespace yeto::island {

enum class Backend { automatic, gloo, nccl };

struct GroupOptions {
  // Every rank must have joined within this time (train.rendezvous_timeout_s), else the
  // ranks that did come fail with an error that says how many joined.
  double rendezvous_timeout_s = 300;
  // Upper bound on one collective (a rank waits this long for a peer, e.g. for rank 0 waiting
  // on the syncer's final cut).
  double collective_timeout_s = 1800;
  // automatic: NCCL when this build has it and CUDA is usable, Gloo otherwise.
  Backend backend = Backend::automatic;
};

class IslandGroup final : public Collectives {
 public:
  // Joins the island's rendezvous and builds the process group. Throws yeto::Error naming
  // the rendezvous address on a timeout, a WORLD_SIZE that differs from rank 0's, a RANK
  // that two processes claim, or a port rank 0 cannot bind. Needs env.world_size > 1.
  static std::unique_ptr<IslandGroup> connect(const IslandEnv& env, const GroupOptions& options = {});
  ~IslandGroup() override;
  IslandGroup(const IslandGroup&) = delete;
  IslandGroup& operator=(const IslandGroup&) = delete;

  int rank() const override;
  int world_size() const override;
  const std::string& backend_name() const;  // "gloo" or "nccl"
  const IslandEnv& env() const;

  // In place, over one contiguous tensor (any device; staged to the backend's device).
  void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
  void broadcast(at::Tensor& tensor, int root = 0) override;
  void barrier() override;
  void all_gather(const at::Tensor& shard, at::Tensor& out) override;

 private:
  struct Impl;
  explicit IslandGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace yeto::island
