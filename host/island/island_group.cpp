#include "island/island_group.hpp"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// NCCL exists only in a CUDA build of LibTorch with c10d's NCCL backend. YETO_HAVE_C10D_NCCL
// comes from cmake/YetoDependencies.cmake (CUDA LibTorch that ships ProcessGroupNCCL.hpp);
// the CPU-only build compiles none of it.
#if defined(YETO_HAVE_C10D_NCCL) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define YETO_DIST_NCCL 1
#else
#define YETO_DIST_NCCL 0
#endif

#include <chrono>
#include <cstdlib>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/error.hpp"

namespace yeto::island {
namespace {

// LibTorch 2.x split the process group into a front (c10d::ProcessGroup) and the backend that
// runs the collectives (c10d::Backend); ProcessGroupGloo / ProcessGroupNCCL derive from the
// latter there and from ProcessGroup in 1.13. Their collective signatures are the same, so
// this alias is the only version difference of the area.
#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

using ms = std::chrono::milliseconds;

ms millis(double seconds) { return ms(static_cast<std::int64_t>(seconds * 1000.0)); }

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

std::string what_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

struct IslandGroup::Impl {
  IslandEnv env;
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<C10dGroup> pg;
  at::Device device = at::kCPU;  // where the backend wants its tensors

  void run(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      throw Error(std::string("island ") + what + " failed on " + env.describe() + ": " + what_of(e) +
                  " (a peer rank exited or timed out; see its log)");
    }
  }
};

IslandGroup::IslandGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IslandGroup::~IslandGroup() = default;

int IslandGroup::rank() const { return impl_->env.rank; }
int IslandGroup::world_size() const { return impl_->env.world_size; }
const std::string& IslandGroup::backend_name() const { return impl_->backend; }
const IslandEnv& IslandGroup::env() const { return impl_->env; }

std::unique_ptr<IslandGroup> IslandGroup::connect(const IslandEnv& env, const GroupOptions& options) {
  if (!env.distributed()) throw Error("island process group: WORLD_SIZE is 1; there is nothing to join");
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string who = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  const double budget = options.rendezvous_timeout_s;
  const auto deadline = std::chrono::steady_clock::now() + millis(budget);

  // 1. The store: rank 0 serves it, the others connect (retrying until the timeout).
  try {
    c10d::TCPStoreOptions so;
    so.port = env.master_port;
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = false;  // counted below, with a clearer error than the store's own
    so.timeout = millis(budget);
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    throw Error("island rendezvous at " + where + " (MASTER_ADDR:MASTER_PORT) failed for " + who + ": " + what_of(e) +
                (env.rank == 0 ? "; is the port already in use? choose another MASTER_PORT"
                               : "; is rank 0 running with the same MASTER_ADDR and MASTER_PORT?") +
                " (train.rendezvous_timeout_s = " + std::to_string(budget) + " s)");
  }
  auto& store = *impl->store;
  try {
    // 2. Every rank must agree on WORLD_SIZE, and each rank number is claimed once.
    if (env.rank == 0) store.set("yeto/world_size", bytes(std::to_string(env.world_size)));
    const std::string theirs = text(store.get("yeto/world_size"));
    if (theirs != std::to_string(env.world_size)) {
      const std::string msg = "WORLD_SIZE=" + std::to_string(env.world_size) + " on " + who + " but WORLD_SIZE=" +
                              theirs + " on rank 0 of the island at " + where +
                              "; start every rank of an island with the same WORLD_SIZE (train.island_ranks)";
      store.set("yeto/abort", bytes(msg));
      throw UsageError(msg);
    }
    if (store.add("yeto/rank/" + std::to_string(env.rank), 1) > 1) {
      const std::string msg = "RANK=" + std::to_string(env.rank) + " was claimed by two processes of the island at " +
                              where + "; give every rank a distinct RANK in [0, WORLD_SIZE)";
      store.set("yeto/abort", bytes(msg));
      throw UsageError(msg);
    }
    // 3. Wait until all ranks joined (or one reported a mismatch).
    store.add("yeto/joined", 1);
    for (;;) {
      const std::int64_t joined = store.add("yeto/joined", 0);
      if (joined >= env.world_size) break;
      if (store.check({"yeto/abort"}))
        throw UsageError("island at " + where + ": another rank refused to join: " + text(store.get("yeto/abort")));
      if (std::chrono::steady_clock::now() > deadline)
        throw Error("island rendezvous at " + where + ": only " + std::to_string(joined) + " of WORLD_SIZE=" +
                    std::to_string(env.world_size) + " ranks joined within train.rendezvous_timeout_s = " +
                    std::to_string(budget) + " s; start the missing ranks or check their WORLD_SIZE/MASTER_PORT");
      std::this_thread::sleep_for(ms(20));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("island rendezvous at " + where + " failed for " + who + ": " + what_of(e) +
                " (train.rendezvous_timeout_s = " + std::to_string(budget) + " s)");
  }

  // 4. The process group.
  Backend b = options.backend;
  if (b == Backend::automatic) b = (YETO_DIST_NCCL && at::hasCUDA()) ? Backend::nccl : Backend::gloo;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("yeto-island", impl->store);
  try {
    if (b == Backend::nccl) {
#if YETO_DIST_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = millis(options.collective_timeout_s);
      impl->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, env.rank, env.world_size, o);
      impl->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
      impl->backend = "nccl";
#else
      throw UsageError("the NCCL backend is not in this build (LibTorch without CUDA/NCCL); use Gloo");
#endif
    } else {
      auto o = c10d::ProcessGroupGloo::Options::create(millis(options.collective_timeout_s));
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(env.master_addr))
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr));
      else
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      impl->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size, o);
      impl->backend = "gloo";
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("island process group at " + where + " (" + who + "): " + what_of(e));
  }
  spdlog::info("island: {} joined ({} backend)", env.describe(), impl->backend);
  return std::unique_ptr<IslandGroup>(new IslandGroup(std::move(impl)));
}

namespace {

// The tensor a collective runs on: `t` itself when it is contiguous on the backend's
// device, else a staged copy.
at::Tensor staged(const at::Tensor& t, at::Device device) {
  if (t.device() == device && t.is_contiguous()) return t;
  return t.to(device, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

}  // namespace

void IslandGroup::allreduce(at::Tensor& tensor, ReduceOp op) {
  at::NoGradGuard ng;
  std::vector<at::Tensor> v = {staged(tensor, impl_->device)};
  c10d::AllreduceOptions o;
  o.reduceOp = op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  impl_->run(impl_->pg->allreduce(v, o), "all-reduce");
  if (!v[0].is_same(tensor)) tensor.copy_(v[0]);
}

void IslandGroup::broadcast(at::Tensor& tensor, int root) {
  at::NoGradGuard ng;
  std::vector<at::Tensor> v = {staged(tensor, impl_->device)};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  impl_->run(impl_->pg->broadcast(v, o), "broadcast");
  if (!v[0].is_same(tensor)) tensor.copy_(v[0]);
}

void IslandGroup::all_gather(const at::Tensor& shard, at::Tensor& out) {
  at::NoGradGuard ng;
  const int world = impl_->env.world_size;
  const std::int64_t n = shard.numel();
  if (out.numel() != n * world || out.scalar_type() != shard.scalar_type())
    throw Error("island all-gather on " + impl_->env.describe() + ": " + std::to_string(out.numel()) +
                " output elements for shards of " + std::to_string(n) + " x " + std::to_string(world) + " ranks");
  at::Tensor in = staged(shard.view({-1}), impl_->device);
  at::Tensor dst = staged(out.view({-1}), impl_->device);
#if YETO_DIST_NCCL
  if (impl_->backend == "nccl") {
    // NCCL gathers into one flat buffer directly.
    impl_->run(impl_->pg->_allgather_base(dst, in), "all-gather");
    if (dst.data_ptr() != out.data_ptr()) out.view({-1}).copy_(dst);
    return;
  }
#endif
  // Gloo: one broadcast per rank, each in place into its slice of `out`. (Gloo's allgather
  // gathers into a flat temporary of the whole output and copies out of it: one more block's
  // weights of peak memory per gather.)
  dst.narrow(0, static_cast<std::int64_t>(impl_->env.rank) * n, n).copy_(in);
  for (int r = 0; r < world; ++r) {
    std::vector<at::Tensor> v = {dst.narrow(0, r * n, n)};
    c10d::BroadcastOptions o;
    o.rootRank = r;
    impl_->run(impl_->pg->broadcast(v, o), "all-gather");
  }
  if (dst.data_ptr() != out.data_ptr()) out.view({-1}).copy_(dst);
}

void IslandGroup::barrier() {
  // A one-element all-reduce: a barrier every backend implements the same way.
  at::Tensor t = at::zeros({1}, at::kFloat);
  allreduce(t);
}

}  // namespace yeto::island
