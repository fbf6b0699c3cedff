// Test driver: one rank of a learner island training the tinyden test plugin with the generic
// learner, joined to its island through the torchrun-style environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT; train.shard = "ddp" or "fsdp") -- what `yeto-host learner` does, with
// the tinyden test plugin instead of a model repository; a config whose model.id names a
// repository trains that model through learner::run (its pipeline, sharded under fsdp). Usage:
//   island_driver CONFIG RUN_DIR --out PREFIX [--syncer HOST:PORT --secret FILE --id ID
//                      --island I --islands N] [--save-quit-at STEP] [--step-ms MS]
//                      [--joined-marker FILE] [--start-after FILE]
// Every rank writes PREFIX.rank<r>.trace (one line per step: "step <n> applied <total>
// sha256 <hex of the trainable bytes>", then "final ...") and PREFIX.rank<r>.bin (its final
// trainable tensors, canonical order, raw float32) -- outside RUN_DIR, which only rank 0 writes.
// --save-quit-at: rank 0 drops RUN_DIR/save_quit after that step (every rank then stops).
// --kill-rank-at: every rank but rank 0 kills itself (SIGKILL) after that step.
// --step-ms: sleep after each step, so that a syncer's merges return while the island trains.
// --joined-marker: rank 0 writes FILE once the outer sync's start() returned (joined);
// --start-after: wait (at most 60 s) for FILE before starting -- orders islands in tests.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "island/env.hpp"
#include "island/island_group.hpp"
#include "island/run_island.hpp"
#include "learner/learner.hpp"
#include "learner/outer_sync.hpp"
#include "learner/trainer.hpp"
#include "sync/diloco_sync.hpp"
#include "tinyden_model.hpp"

namespace {

namespace fs = std::filesystem;

std::string bytes_of(const yeto::learner::Trainable& t) {
  std::string b;
  for (const auto& [name, x] : t) {
    const at::Tensor c = x.detach().to(at::kFloat).contiguous();
    b.append(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()) * 4);
  }
  return b;
}

// Records the trainable tensors after every step boundary (after the outer sync's blend).
class Tracing final : public yeto::learner::OuterSync {
 public:
  Tracing(yeto::sync::DilocoSync* inner, fs::path trace, fs::path run_dir, std::int64_t save_quit_at, bool lead,
          int step_ms, fs::path joined_marker)
      : inner_(inner), trace_(std::move(trace)), run_dir_(std::move(run_dir)), save_quit_at_(save_quit_at), lead_(lead),
        step_ms_(step_ms), joined_marker_(std::move(joined_marker)) {}
  void start(const yeto::learner::Trainable& t) override {
    if (inner_) inner_->start(t);
    if (lead_ && !joined_marker_.empty()) yeto::atomic_write(joined_marker_, "joined\n");
    line("start", t);
  }
  void after_step(std::int64_t step, std::int64_t samples, const yeto::learner::Trainable& t) override {
    if (step_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
    if (inner_) inner_->after_step(step, samples, t);
    line("step " + std::to_string(step), t);
    if (lead_ && step == save_quit_at_) yeto::atomic_write(run_dir_ / "save_quit", "");
    if (!lead_ && step == kill_at) ::kill(::getpid(), SIGKILL);
  }
  std::int64_t kill_at = -1;  // --kill-rank-at
  bool stop_requested() const override { return inner_ && inner_->stop_requested(); }
  bool finish(const yeto::learner::Trainable& t) override {
    const bool ok = inner_ ? inner_->finish(t) : true;
    line("final", t);
    final_bytes = bytes_of(t);
    return ok;
  }
  std::string final_bytes;  // the trainable bytes finish() ended on

 private:
  void line(const std::string& what, const yeto::learner::Trainable& t) {
    const auto applied = inner_ ? inner_->stats().fragments_applied : 0;
    std::ofstream(trace_, std::ios::app) << what << " applied " << applied << " sha256 "
                                         << yeto::sha256_hex(bytes_of(t)) << "\n";
  }
  yeto::sync::DilocoSync* inner_;
  fs::path trace_, run_dir_;
  std::int64_t save_quit_at_;
  bool lead_;
  int step_ms_;
  fs::path joined_marker_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: island_driver CONFIG RUN_DIR --out PREFIX [--syncer H:P --secret F --id ID --island I "
                 "--islands N] [--save-quit-at STEP]\n";
    return 2;
  }
  std::map<std::string, std::string> a = {{"out", ""},    {"syncer", ""},  {"secret", ""},      {"id", ""},
                                          {"island", "0"}, {"islands", "1"}, {"save-quit-at", "-1"},
                                          {"step-ms", "0"}, {"joined-marker", ""}, {"start-after", ""},
                                          {"kill-rank-at", "-1"}};
  for (int i = 3; i < argc; ++i) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc || !a.count(k.substr(2))) {
      std::cerr << "island_driver: bad argument " << k << "\n";
      return 2;
    }
    a[k.substr(2)] = argv[++i];
  }
  try {
    if (!a["start-after"].empty()) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!fs::exists(a["start-after"]) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto cfg = yeto::config::Config::resolve(fs::path(argv[1]), {});
    const auto island = yeto::island::open_run_island(cfg, yeto::island::island_env());
    const int rank = island ? island->rank() : 0;
    const int k = island ? island->world_size() : 1;
    yeto::learner::RunOptions ro;
    ro.run_dir = argv[2];
    ro.console = false;
    ro.island = std::stoi(a["island"]);
    ro.islands = std::stoi(a["islands"]);
    ro.logical_rank = ro.island + static_cast<std::int64_t>(ro.islands) * rank;
    ro.world = ro.islands * k;
    ro.ranks = island.get();
    std::unique_ptr<yeto::sync::DilocoSync> sync;
    if (!a["syncer"].empty()) {
      auto o = yeto::sync::diloco_options_from_config(cfg);
      yeto::sync::parse_host_port(a["syncer"], o.client.host, o.client.port);
      o.client.run_secret = yeto::read_file(a["secret"]);
      o.client.learner_id = a["id"];
      o.client.events = ro.run_dir / "sync_events.jsonl";
      o.ranks = island.get();
      sync = std::make_unique<yeto::sync::DilocoSync>(std::move(o));
    }
    const std::string prefix = a["out"] + ".rank" + std::to_string(rank);
    Tracing tracing(sync.get(), prefix + ".trace", ro.run_dir, std::stoll(a["save-quit-at"]), rank == 0,
                    std::stoi(a["step-ms"]), a["joined-marker"]);
    tracing.kill_at = std::stoll(a["kill-rank-at"]);
    yeto::learner::RunResult r;
    std::string final_bytes;
    if (!cfg.get_string("model.id").empty()) {
      r = yeto::learner::run(cfg, ro, &tracing);
      final_bytes = tracing.final_bytes;
    } else {
      auto m = yeto::learner::test::open_tinyden_model();
      r = yeto::learner::train(*m.model, cfg, ro, &tracing);
      final_bytes = bytes_of(m.model->trainable());
    }
    if (!final_bytes.empty()) yeto::atomic_write(prefix + ".bin", final_bytes);
    std::cout << "steps " << r.steps << " stopped_early " << r.stopped_early << " loss " << r.last_loss << "\n";
    if (sync && !r.stopped_early && !sync->stats().finished) return 6;
    return 0;
  } catch (const yeto::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    // A rank lost in a collective inside autograd's backward (a gather of a sharded block).
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
