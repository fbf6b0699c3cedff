// End-to-end outer-step latency on loopback: an in-process syncer and L learner clients
// (threads, each with its own TCP connection) on P trainable parameters. Each learner
// changes its weights a little per inner step; every H inner steps it pushes its q4
// pseudo-gradient; the syncer merges when all L have pushed and broadcasts the new fragment
// (exact float32). Latency = push queued -> merged global applied, from the clients' progress
// events. Also prints bytes per learner per inner step next to what data-parallel ring
// all-reduce of float32 gradients would send per step.
//   sync_loopback_bench [params=50000000] [learners=4] [rounds=3] [inner_steps=10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "sync/client.hpp"
#include "sync/quant.hpp"
#include "sync/syncer.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  const std::uint64_t params = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 50'000'000ull;
  const int learners = argc > 2 ? std::atoi(argv[2]) : 4;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::uint32_t H = argc > 4 ? static_cast<std::uint32_t>(std::atoi(argv[4])) : 10;
  const fs::path dir = fs::temp_directory_path() / ("yeto-sync-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string secret = "bench-secret-0123456789abcdef";

  ys::SyncerOptions so;
  so.state_dir = dir / "state";
  so.run_secret = secret;
  so.quorum = static_cast<std::uint32_t>(learners);
  // Generous timeouts: on a small shared machine one 50 M-parameter broadcast takes seconds.
  so.timeouts.heartbeat_s = 1;
  so.timeouts.learner_timeout_s = 120;
  so.timeouts.grace_max_s = 150;
  so.timeouts.round_deadline_s = 200;
  so.timeouts.reconnect_budget_s = 400;
  so.timeouts.final_timeout_s = 300;
  so.checkpoint_every = 1u << 30;  // only the final checkpoint: measure the network path
  so.budget_outer_steps = static_cast<std::uint64_t>(rounds);
  ys::Syncer syncer(so);
  std::thread st([&] { syncer.run(); });
  std::uint16_t port = 0;
  while (port == 0) {
    std::ifstream in(so.state_dir / "port");
    int p = 0;
    if (in >> p) port = static_cast<std::uint16_t>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Five tensors sharing the parameters, one fragment (the whole adapter syncs at once).
  std::vector<ys::TensorSpec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({"t" + std::to_string(i), params / 5 + (i == 0 ? params % 5 : 0)});
  const auto layout = ys::build_layout(specs, 1, ys::FragmentPattern::binpack);

  std::vector<ys::ClientStats> stats(learners);
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < learners; ++l)
    ts.emplace_back([&, l] {
      ys::ClientOptions o;
      o.port = port;
      o.run_secret = secret;
      o.learner_id = "bench-" + std::to_string(l);
      o.inner_steps = H;
      o.timeouts = so.timeouts;
      o.events = dir / (o.learner_id + ".jsonl");
      std::vector<std::vector<float>> t;
      for (const auto& s : specs) t.emplace_back(s.numel, 0.0f);
      std::vector<std::span<float>> ms(t.begin(), t.end());
      std::vector<std::span<const float>> cs(t.begin(), t.end());
      ys::SyncClient c(o, layout);
      c.start(cs);
      if (!c.wait_for_global(ms, 120)) return;
      for (std::uint64_t step = 1; step < 100000; ++step) {
        for (auto& v : t)
          for (std::size_t k = 0; k < v.size(); k += 4096) v[k] += 1e-3f * static_cast<float>(l + 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const auto r = c.step(ms, 8);
        if (r.finished || r.failed) break;
      }
      c.close(30);
      stats[l] = c.stats();
    });
  for (auto& t : ts) t.join();
  st.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<double> lat;
  for (int l = 0; l < learners; ++l) {
    std::ifstream in(dir / ("bench-" + std::to_string(l) + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "applied" && j.contains("round_latency_s")) lat.push_back(j["round_latency_s"].get<double>());
    }
  }
  std::sort(lat.begin(), lat.end());
  std::printf("sync loopback: %d learners x %llu params, H = %u, %d outer steps, %.1f s wall\n", learners,
              static_cast<unsigned long long>(params), H, rounds, wall);
  if (!lat.empty())
    std::printf("  outer-step latency (push queued -> merged global applied): median %.3f s, max %.3f s (%zu samples)\n",
                lat[lat.size() / 2], lat.back(), lat.size());
  std::uint64_t sent = 0, recv = 0, steps = 0;
  for (const auto& s : stats) {
    sent += s.bytes_sent;
    recv += s.bytes_received;
    steps += s.steps;
  }
  const double per_step_sent = static_cast<double>(sent) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  const double per_step_recv = static_cast<double>(recv) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  const double q4_push = static_cast<double>(ys::q4_encoded_bytes(params, 64));
  const double allreduce = 2.0 * (learners - 1) / learners * 4.0 * static_cast<double>(params);
  std::printf("  bytes per learner per inner step: sent %.3g (q4 push every H steps: %.3g), received %.3g\n",
              per_step_sent, q4_push / H, per_step_recv);
  std::printf("  data-parallel ring all-reduce of f32 gradients: %.3g sent per learner per step\n", allreduce);
  std::printf("  ratio all-reduce / sync sent: %.1fx (steady state, q4 + H: %.1fx); received incl. f32 broadcast: %.1fx\n",
              allreduce / per_step_sent, allreduce / (q4_push / H), allreduce / per_step_recv);
  if (argc > 5 && std::string(argv[5]) == "keep") std::printf("  kept %s\n", dir.c_str());
  else fs::remove_all(dir);
  return 0;
}
