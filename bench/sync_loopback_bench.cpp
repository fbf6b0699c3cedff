// End-to-end outer-step latency and traffic on loopback: an in-process syncer and L learner
// clients (threads, each with its own TCP connection) on P trainable parameters. Each learner
// changes its weights a little per inner step; every H inner steps it pushes its q4
// pseudo-gradient; the syncer merges when all L have pushed and broadcasts the new state. The
// same run is made twice, side by side: with the exact float32 downlink (sync.downlink = f32)
// and with the q4 downlink (the default: q4 updates of the public state). Latency = push queued
// -> merged global applied, from the clients' progress events. Traffic: bytes each learner sent
// and received per inner step (frames as on the wire, handshake and catch-up included), against
// a data-parallel float32 ring all-reduce of the same parameters every step, which sends
// 2(L-1)/L x 4P bytes per learner and receives as many.
//   sync_loopback_bench [params=50000000] [learners=4] [rounds=3] [inner_steps=10] [keep]
//
// Fragment isolation: the round latency of a small fragment alone, next to a large fragment
// whose merges run on the syncer's worker lanes (the default), and next to the same large
// fragment with all the syncer's work on its I/O thread (the baseline), in one process; a
// checkpoint at every merge (the default) in each arm.
// The syncer's bulk lanes run at nice +sync.bulk_nice and the learners' threads at nice +19 (they
// stand in for other machines), and the pool arm is repeated without either priority; `io` adds
// the arm with everything on the I/O thread.
//   sync_loopback_bench fragments [large=50000000] [learners=4] [steps=200] [inner_steps=10] [small=65536]
//                               [keep] [io] [learner-nice=19]
//
// Checkpoint isolation: the time a small fragment's checkpoint takes (its data file, then a
// manifest, each written and fsynced as the syncer does after a merge) alone, and while a large
// fragment's data file is written over and over next to it, once written back in chunks as it
// is written (sync::kFragmentWriteBack, the syncer's default) and once left to the final fsync
// (the baseline).
//   sync_loopback_bench checkpoint [large=50000000] [small=65536] [rounds=30]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "sync/client.hpp"
#include "sync/lanes.hpp"
#include "sync/quant.hpp"
#include "sync/state.hpp"
#include "sync/syncer.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;

namespace {

struct Result {
  double wall = 0;
  std::vector<double> latency;
  double sent_per_step = 0, received_per_step = 0;  // per learner per inner step, whole run
  // The same between the first and the last merge a learner applied: without the handshake, the
  // initial catch-up and the final cut.
  double steady_sent_per_step = 0, steady_received_per_step = 0;
  std::uint64_t updates = 0, fragments = 0;
};

constexpr const char* kSecret = "bench-secret-0123456789abcdef";

// The syncer of one bench run: quorum = every learner, generous timeouts (on a small shared
// machine one 50 M-parameter broadcast takes seconds), only the final checkpoint (the bench
// measures the merge and network path).
ys::SyncerOptions bench_syncer_options(const fs::path& dir, int learners) {
  ys::SyncerOptions so;
  so.state_dir = dir / "state";
  so.run_secret = kSecret;
  so.quorum = static_cast<std::uint32_t>(learners);
  so.timeouts.heartbeat_s = 1;
  so.timeouts.learner_timeout_s = 120;
  so.timeouts.grace_max_s = 150;
  so.timeouts.round_deadline_s = 200;
  so.timeouts.reconnect_budget_s = 400;
  so.timeouts.final_timeout_s = 300;
  so.checkpoint_every = 1u << 30;
  return so;
}

// The port the syncer wrote into its state dir once it listens.
std::uint16_t wait_for_port(const fs::path& state_dir) {
  for (;;) {
    std::ifstream in(state_dir / "port");
    int p = 0;
    if (in >> p) return static_cast<std::uint16_t>(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Learner l's client, with the syncer's timeouts and its progress events in DIR/bench-<l>.jsonl.
ys::ClientOptions bench_client_options(const ys::SyncerOptions& so, std::uint16_t port, int l, std::uint32_t H,
                                       const fs::path& dir) {
  ys::ClientOptions o;
  o.port = port;
  o.run_secret = kSecret;
  o.learner_id = "bench-" + std::to_string(l);
  o.inner_steps = H;
  o.timeouts = so.timeouts;
  o.events = dir / (o.learner_id + ".jsonl");
  return o;
}

Result run(ys::Downlink downlink, std::uint64_t params, int learners, int rounds, std::uint32_t H, const fs::path& dir) {
  fs::create_directories(dir);
  ys::SyncerOptions so = bench_syncer_options(dir, learners);
  so.downlink = downlink;
  so.budget_outer_steps = static_cast<std::uint64_t>(rounds);
  ys::Syncer syncer(so);
  std::thread st([&] { syncer.run(); });
  const std::uint16_t port = wait_for_port(so.state_dir);

  // Five tensors sharing the parameters, one fragment (the whole adapter syncs at once).
  std::vector<ys::TensorSpec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({"t" + std::to_string(i), params / 5 + (i == 0 ? params % 5 : 0)});
  const auto layout = ys::build_layout(specs, 1, ys::FragmentPattern::binpack);

  std::vector<ys::ClientStats> stats(learners);
  // Per learner: the client's counters when it applied its first and its last merge.
  std::vector<std::optional<ys::ClientStats>> first(learners), last(learners);
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < learners; ++l)
    ts.emplace_back([&, l] {
      const ys::ClientOptions o = bench_client_options(so, port, l, H, dir);
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
        if (!r.applied.empty() && r.applied.front().version > 0) {
          (first[l] ? last[l] : first[l]) = c.stats();
        }
      }
      c.close(30);
      stats[l] = c.stats();
    });
  for (auto& t : ts) t.join();
  st.join();
  Result r;
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int l = 0; l < learners; ++l) {
    std::ifstream in(dir / ("bench-" + std::to_string(l) + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "applied" && j.contains("round_latency_s")) r.latency.push_back(j["round_latency_s"].get<double>());
    }
  }
  std::sort(r.latency.begin(), r.latency.end());
  std::uint64_t sent = 0, recv = 0, steps = 0;
  for (const auto& s : stats) {
    sent += s.bytes_sent;
    recv += s.bytes_received;
    steps += s.steps;
    r.updates += s.updates_received;
    r.fragments += s.fragments_received;
  }
  r.sent_per_step = static_cast<double>(sent) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  r.received_per_step = static_cast<double>(recv) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  sent = recv = steps = 0;
  for (int l = 0; l < learners; ++l) {
    if (!first[l] || !last[l]) continue;
    sent += last[l]->bytes_sent - first[l]->bytes_sent;
    recv += last[l]->bytes_received - first[l]->bytes_received;
    steps += last[l]->steps - first[l]->steps;
  }
  r.steady_sent_per_step = static_cast<double>(sent) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  r.steady_received_per_step = static_cast<double>(recv) / static_cast<double>(std::max<std::uint64_t>(steps, 1));
  return r;
}

// ---------------------------------------------------------------- fragment isolation

struct Latencies {
  // The small fragment's rounds: from the moment the learner that completed the round had
  // written its push to the socket to the merge going out (the syncer's own delay, including
  // any time the push waited unread), per merge.
  std::vector<double> tape;
  std::vector<double> tape_overlap;  // the same, of the rounds in flight while a large merge was computed
  // The same split in two: written -> read by the syncer (its push record), read -> merge record.
  std::vector<double> to_read, read_to_merge;
  double load_before = 0, load_after = 0;  // the machine's 1-minute load average
  std::vector<double> client;  // the learners' latency of the small fragment (push queued -> merge applied)
  std::size_t small_merges = 0, large_merges = 0, small_during_large = 0;
  // Small merges the grace window or the deadline closed (a learner had not pushed): their wait is
  // the pacing's, not the syncer's delay, and they are left out of `tape` (at the end of a run
  // the learners finish their steps at different times).
  std::size_t small_paced = 0;
  double large_merge_s = 0;    // the large fragment's merge computation, median (s)
  double wall = 0;
};

double load_average() {
  double l[1] = {0};
  return ::getloadavg(l, 1) == 1 ? l[0] : 0.0;
}

// `large` == 0: the small fragment alone. offload: the syncer's default (bulk work on its worker
// lanes); otherwise everything on its I/O thread. bulk_nice: the syncer's sync.bulk_nice;
// learner_nice: nice steps each learner's threads (its training loop and its client's thread) run
// below the syncer, standing in for the other machines the learners run on in a deployment.
Latencies run_fragments(std::uint64_t large, std::uint64_t small, int learners, int steps, std::uint32_t H,
                        bool offload, int bulk_nice, int learner_nice, const fs::path& dir) {
  fs::create_directories(dir);
  const double load_before = load_average();
  ys::SyncerOptions so = bench_syncer_options(dir, learners);
  so.bulk_nice = bulk_nice;
  so.expected_learners = static_cast<std::uint32_t>(learners);
  // A checkpoint at every merge, as a run has by default (sync.checkpoint_every = 1): with the
  // pools it is written on the syncer's checkpoint writers, a fragment's values only when that
  // fragment merged; with everything on the I/O thread, there.
  so.checkpoint_every = 1;
  if (!offload) so.offload_bytes = SIZE_MAX;
  ys::Syncer syncer(so);
  std::thread st([&] { syncer.run(); });
  const std::uint16_t port = wait_for_port(so.state_dir);
  // binpack: the large tensor is fragment 0, the small one fragment 1 (or the only fragment).
  std::vector<ys::TensorSpec> specs;
  if (large > 0) specs.push_back({"large", large});
  specs.push_back({"small", small});
  const auto layout = ys::build_layout(specs, static_cast<std::uint32_t>(specs.size()), ys::FragmentPattern::binpack);
  const std::uint32_t small_p = large > 0 ? 1 : 0;
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < learners; ++l)
    ts.emplace_back([&, l] {
      // Before the client starts: its communication thread inherits this thread's nice value.
      ys::lower_thread_priority(learner_nice);
      const ys::ClientOptions o = bench_client_options(so, port, l, H, dir);
      std::vector<std::vector<float>> t;
      for (const auto& s : specs) t.emplace_back(s.numel, 0.0f);
      std::vector<std::span<float>> ms(t.begin(), t.end());
      std::vector<std::span<const float>> cs(t.begin(), t.end());
      ys::SyncClient c(o, layout);
      c.start(cs);
      if (!c.wait_for_global(ms, 300)) return;
      for (int step = 1; step <= steps; ++step) {
        for (auto& v : t)
          for (std::size_t k = 0; k < v.size(); k += 4096) v[k] += 1e-3f * static_cast<float>(l + 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const auto r = c.step(ms, 8);
        if (r.finished || r.failed) break;
      }
      c.finish_local(static_cast<std::uint64_t>(steps), static_cast<std::uint64_t>(steps) * 8);
      c.wait_for_final(ms, 300);
      c.close(30);
    });
  for (auto& t : ts) t.join();
  st.join();
  Latencies r;
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.load_before = load_before;
  r.load_after = load_average();
  // The syncer's tape: the small fragment's rounds, and whether the large fragment's merge was
  // being computed while each was open.
  struct Span {
    double from, to;
  };
  std::vector<Span> small_rounds, large_merges;
  std::vector<double> large_s;
  // When each learner's small push (by base version) began to be written to its socket (its
  // completion is seen only once the learner's thread runs again, which a niced learner on a
  // busy machine may do after the syncer has read the push).
  std::map<std::pair<std::string, std::uint64_t>, std::vector<double>> sent_at;
  for (int l = 0; l < learners; ++l) {
    std::ifstream in(dir / ("bench-" + std::to_string(l) + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "push" && j["fragment"].get<std::uint32_t>() == small_p)
        sent_at[{j["learner"].get<std::string>(), j["base_version"].get<std::uint64_t>()}].push_back(
            j["write_started"].get<double>());
    }
  }
  {
    std::ifstream in(so.state_dir / "tape.jsonl");
    double last_sent = -1;  // the latest send among the small pushes since the previous small merge
    double last_read = -1;  // when the syncer read that push
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "push" && j["fragment"].get<std::uint32_t>() == small_p) {
        const auto it = sent_at.find({j["learners"][0].get<std::string>(), j["base_version"].get<std::uint64_t>()});
        // A learner may push twice on one base (the merge had not reached it yet): the send that
        // this record read is the latest one before it.
        const double read = j["time"].get<double>();
        double sent = -1;
        if (it != sent_at.end())
          for (double x : it->second)
            if (x <= read) sent = std::max(sent, x);
        if (sent > last_sent) {
          last_sent = sent;
          last_read = read;
        }
        continue;
      }
      if (j["event"] != "merge" || j["reason"] == "learners_done") continue;
      const double t = j["time"].get<double>();
      if (j["fragment"].get<std::uint32_t>() == small_p) {
        if (j["reason"] != "all_live") ++r.small_paced;
        else if (last_sent > 0) {
          r.tape.push_back(t - last_sent);
          r.to_read.push_back(last_read - last_sent);
          r.read_to_merge.push_back(t - last_read);
          small_rounds.push_back({last_sent, t});
        }
        last_sent = -1;
        last_read = -1;
      } else {
        large_s.push_back(j.value("merge_s", 0.0));
        large_merges.push_back({t - large_s.back(), t});
      }
    }
  }
  r.small_merges = small_rounds.size();
  r.large_merges = large_merges.size();
  for (const auto& s : small_rounds)
    for (const auto& m : large_merges)
      if (s.from < m.to && m.from < s.to) {
        ++r.small_during_large;
        r.tape_overlap.push_back(s.to - s.from);
        break;
      }
  std::sort(r.tape_overlap.begin(), r.tape_overlap.end());
  std::sort(large_s.begin(), large_s.end());
  r.large_merge_s = large_s.empty() ? 0.0 : large_s[large_s.size() / 2];
  for (int l = 0; l < learners; ++l) {
    std::ifstream in(dir / ("bench-" + std::to_string(l) + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "applied" && j.contains("round_latency_s") && j["fragment"].get<std::uint32_t>() == small_p)
        r.client.push_back(j["round_latency_s"].get<double>());
    }
  }
  std::sort(r.tape.begin(), r.tape.end());
  std::sort(r.to_read.begin(), r.to_read.end());
  std::sort(r.read_to_merge.begin(), r.read_to_merge.end());
  std::sort(r.client.begin(), r.client.end());
  return r;
}

double quantile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

int fragments_main(int argc, char** argv) {
  const std::uint64_t large = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 50'000'000ull;
  const int learners = argc > 3 ? std::atoi(argv[3]) : 4;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 200;
  const std::uint32_t H = argc > 5 ? static_cast<std::uint32_t>(std::atoi(argv[5])) : 10;
  const std::uint64_t small = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 65'536ull;
  bool keep = false, io_arm = false;
  int learner_nice = 19;
  for (int i = 7; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "keep") keep = true;
    else if (a == "io") io_arm = true;
    else if (a.rfind("learner-nice=", 0) == 0) learner_nice = std::atoi(a.c_str() + 13);
    else {
      std::fprintf(stderr, "sync_loopback_bench fragments: unknown option %s (keep, io, learner-nice=N)\n", a.c_str());
      return 2;
    }
  }
  const int bulk_nice = ys::SyncerOptions{}.bulk_nice;
  const fs::path dir = fs::temp_directory_path() / ("yeto-sync-frag-bench-" + std::to_string(::getpid()));
  const Latencies alone = run_fragments(0, small, learners, steps, H, true, bulk_nice, learner_nice, dir / "alone");
  const Latencies pool = run_fragments(large, small, learners, steps, H, true, bulk_nice, learner_nice, dir / "pool");
  // The same without any priorities: the syncer's bulk lanes and the learners at the I/O thread's.
  const Latencies flat = run_fragments(large, small, learners, steps, H, true, 0, 0, dir / "flat");
  Latencies inline_io;
  if (io_arm) inline_io = run_fragments(large, small, learners, steps, H, false, 0, 0, dir / "io");
  if (keep) std::printf("run directories (tapes, learners' events) kept in %s\n", dir.c_str());
  else fs::remove_all(dir);
  std::printf("sync fragment isolation: %d learners, a small fragment of %llu values next to a large one of %llu, "
              "H = %u, %d inner steps (20 ms) per learner\n",
              learners, static_cast<unsigned long long>(small), static_cast<unsigned long long>(large), H, steps);
  std::printf("  priorities: the syncer's bulk lanes at nice +%d (sync.bulk_nice) and the learners' threads at nice "
              "+%d (they stand in for other machines) in the first two arms; none in the others\n",
              bulk_nice, learner_nice);
  std::printf("  %-38s %6s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n", "arm", "wall_s", "load", "merges",
              "overlap", "ovl_med", "tape_med", "tape_mean", "tape_p90", "to_read", "to_merge", "cli_med", "cli_mean", "cli_p90",
              "large_s");
  const auto row = [&](const char* name, const Latencies& r) {
    std::printf("  %-38s %6.1f %4.1f-%-4.1f %3zu+%zu/%-3zu %8zu %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %8.3f\n",
                name, r.wall, r.load_before, r.load_after, r.small_merges, r.small_paced, r.large_merges, r.small_during_large,
                quantile(r.tape_overlap, 0.5), quantile(r.tape, 0.5), mean(r.tape), quantile(r.tape, 0.9), quantile(r.to_read, 0.5),
                quantile(r.read_to_merge, 0.5), quantile(r.client, 0.5), mean(r.client), quantile(r.client, 0.9),
                r.large_merge_s);
  };
  row("small alone", alone);
  row("small + large, lanes, priorities", pool);
  row("small + large, lanes, no priorities", flat);
  if (io_arm) row("small + large, all on the I/O thread", inline_io);
  const auto ratio = [&](const char* name, const Latencies& r) {
    std::printf("    %-32s syncer %.2fx; %.2fx (rounds overlapping a large merge: %.2fx)   learners %.2fx; %.2fx\n",
                name, quantile(r.tape, 0.5) / quantile(alone.tape, 0.5), mean(r.tape) / mean(alone.tape),
                quantile(r.tape_overlap, 0.5) / quantile(alone.tape, 0.5),
                quantile(r.client, 0.5) / quantile(alone.client, 0.5), mean(r.client) / mean(alone.client));
  };
  std::printf("  small fragment's latency with the large one / alone (median; mean):\n");
  ratio("lanes, priorities:", pool);
  ratio("lanes, no priorities:", flat);
  if (io_arm) ratio("I/O thread only:", inline_io);
  std::printf("  (load: 1-minute load average before-after the arm; merges: small merges closed by their last push\n"
              "   + closed by the grace window or deadline (not in tape) / large merges; overlap:\n"
              "   small rounds whose last push was in flight while a large merge was being computed, ovl_med: their\n"
              "   median tape; tape: the\n"
              "   syncer's delay on the small fragment's round, from the learner beginning to write the completing\n"
              "   push to its socket to the merge record (broadcast queued right after), split (medians) into\n"
              "   to_read: written -> read by the syncer, and to_merge: read -> merge record; cli: push queued ->\n"
              "   merge applied at the learner,\n"
              "   including the wait for the other learners' pushes; large_s: the large merge's computation, median)\n");
  return 0;
}

}  // namespace

ys::FragmentState filled_fragment(std::uint64_t n) {
  std::vector<float> v(n);
  for (std::uint64_t k = 0; k < n; ++k) v[k] = 1e-3f * static_cast<float>(k % 977);
  ys::FragmentState f;
  f.params = ys::make_floats(v);
  f.momentum = ys::make_floats(v);
  f.pub = ys::make_floats(std::move(v));
  return f;
}

// Seconds per small checkpoint (data file + manifest) over `rounds`, 50 ms apart; with `large`
// > 0 a thread writes the large fragment's data file over and over meanwhile.
std::vector<double> small_checkpoints(const fs::path& dir, std::uint64_t large, std::size_t write_back,
                                      std::uint64_t small, int rounds) {
  fs::create_directories(dir);
  const ys::FragmentState big = large ? filled_fragment(large) : ys::FragmentState{};
  ys::FragmentState little = filled_fragment(small);
  std::atomic<bool> stop{false};
  std::atomic<int> large_files{0};
  std::thread writer;
  if (large)
    writer = std::thread([&] {
      ys::FragmentState f = big;
      while (!stop) {
        ++f.version;
        ys::save_fragment_data(dir, 0, f, write_back);
        fs::remove(dir / ys::fragment_data_name(0, f.version));
        ++large_files;
      }
    });
  // Let the large file's write begin before timing.
  std::this_thread::sleep_for(std::chrono::milliseconds(large ? 500 : 0));
  std::vector<double> t;
  const std::string manifest(600, 'm');
  for (int i = 0; i < rounds; ++i) {
    ++little.version;
    const auto t0 = std::chrono::steady_clock::now();
    ys::save_fragment_data(dir, 1, little);
    yeto::atomic_write(dir / "checkpoint.bin", manifest);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    fs::remove(dir / ys::fragment_data_name(1, little.version));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  if (writer.joinable()) writer.join();
  if (large) std::printf("  (%d large data files of %.0f MB written meanwhile)\n", large_files.load(), large * 12.0 / 1e6);
  fs::remove_all(dir);
  std::sort(t.begin(), t.end());
  return t;
}

int checkpoint_main(int argc, char** argv) {
  const std::uint64_t large = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 50'000'000ull;
  const std::uint64_t small = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 65'536ull;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 30;
  const fs::path dir = fs::temp_directory_path() / ("yeto-sync-ckpt-bench-" + std::to_string(::getpid()));
  const auto alone = small_checkpoints(dir / "alone", 0, 0, small, rounds);
  const auto chunked = small_checkpoints(dir / "chunked", large, ys::kFragmentWriteBack, small, rounds);
  const auto at_end = small_checkpoints(dir / "at-end", large, 0, small, rounds);
  std::printf("sync checkpoint isolation: a small fragment's checkpoint (%llu values: data file + manifest, "
              "each fsynced) alone and next to a large fragment's data file (%llu values) being written\n",
              static_cast<unsigned long long>(small), static_cast<unsigned long long>(large));
  std::printf("  %-44s %9s %9s %9s %9s %9s\n", "arm", "median_s", "mean_s", "p90_s", "max_s", "med/alone");
  for (const auto& [name, t] : {std::pair<const char*, const std::vector<double>&>{"small alone", alone},
                                {"+ large, written back every 8 MiB (default)", chunked},
                                {"+ large, written back at its fsync", at_end}})
    std::printf("  %-44s %9.4f %9.4f %9.4f %9.4f %9.2f\n", name, quantile(t, 0.5), mean(t), quantile(t, 0.9),
                t.empty() ? 0.0 : t.back(), quantile(t, 0.5) / quantile(alone, 0.5));
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "fragments") return fragments_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "checkpoint") return checkpoint_main(argc, argv);
  const std::uint64_t params = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 50'000'000ull;
  const int learners = argc > 2 ? std::atoi(argv[2]) : 4;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::uint32_t H = argc > 4 ? static_cast<std::uint32_t>(std::atoi(argv[4])) : 10;
  const bool keep = argc > 5 && std::string(argv[5]) == "keep";
  const fs::path dir = fs::temp_directory_path() / ("yeto-sync-bench-" + std::to_string(::getpid()));
  const Result f32 = run(ys::Downlink::f32, params, learners, rounds, H, dir / "f32");
  const Result q4 = run(ys::Downlink::q4, params, learners, rounds, H, dir / "q4");

  // A float32 ring all-reduce of the parameters every inner step: 2(L-1)/L x 4P sent per learner,
  // and as many received.
  const double allreduce_one_way = 2.0 * (learners - 1) / learners * 4.0 * static_cast<double>(params);
  const double allreduce = 2.0 * allreduce_one_way;
  const double q4_bytes = static_cast<double>(ys::q4_encoded_bytes(params, 64));
  std::printf("sync loopback: %d learners x %llu params, H = %u, %d outer steps per run\n", learners,
              static_cast<unsigned long long>(params), H, rounds);
  std::printf("  float32 ring all-reduce every step, per learner per step: sent %.4g + received %.4g = %.4g bytes\n",
              allreduce_one_way, allreduce_one_way, allreduce);
  std::printf("  steady state per learner per step: q4 push %.4g (q4(P)/H), f32 broadcast %.4g (4P/H), q4 update %.4g\n",
              q4_bytes / H, 4.0 * static_cast<double>(params) / H, q4_bytes / H);
  std::printf("  %-9s %-7s %8s %12s %12s %12s %12s %10s %9s %9s %8s %8s\n", "downlink", "span", "wall_s",
              "latency_med", "sent/step", "recv/step", "both/step", "x_allred", "sent_x", "recv_x", "updates", "full");
  for (const auto& [name, r] : {std::pair<const char*, const Result&>{"f32", f32}, {"q4", q4}}) {
    for (const bool steady : {false, true}) {
      const double sent = steady ? r.steady_sent_per_step : r.sent_per_step;
      const double recv = steady ? r.steady_received_per_step : r.received_per_step;
      std::printf("  %-9s %-7s %8.1f %12.3f %12.4g %12.4g %12.4g %10.1f %9.1f %9.1f %8llu %8llu\n", name,
                  steady ? "steady" : "run", r.wall, r.latency.empty() ? 0.0 : r.latency[r.latency.size() / 2], sent,
                  recv, sent + recv, allreduce / (sent + recv), allreduce_one_way / sent, allreduce_one_way / recv,
                  static_cast<unsigned long long>(r.updates), static_cast<unsigned long long>(r.fragments));
    }
  }
  std::printf("  q4 / f32 downlink, received per learner: %.2fx less over the run, %.2fx less in the steady state;\n"
              "  both ways: %.2fx less over the run, %.2fx less in the steady state\n",
              f32.received_per_step / q4.received_per_step, f32.steady_received_per_step / q4.steady_received_per_step,
              (f32.sent_per_step + f32.received_per_step) / (q4.sent_per_step + q4.received_per_step),
              (f32.steady_sent_per_step + f32.steady_received_per_step) /
                  (q4.steady_sent_per_step + q4.steady_received_per_step));
  std::printf("  (x_allred: all-reduce bytes both ways / the learner's bytes both ways; sent_x, recv_x: per direction.\n"
              "   run: the whole run, with the handshake, the initial catch-up and the final cut (float32, once each);\n"
              "   steady: from the first to the last merge each learner applied)\n");
  if (keep) std::printf("  kept %s\n", dir.c_str());
  else fs::remove_all(dir);
  return 0;
}
