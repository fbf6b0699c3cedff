// Test driver: trains the tinyden test plugin with the generic learner as a separate process, so
// tests can interrupt it for real. Usage:
//   learner_tinyden_driver CONFIG RUN_DIR [--kill-at-step N | --term-at-step N]
// --kill-at-step N: SIGKILL itself right after optimizer step N (before step N's checkpoint
// or metrics record); --term-at-step N: SIGTERM itself there (graceful stop).
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "core/error.hpp"
#include "learner/outer_sync.hpp"
#include "learner/trainer.hpp"
#include "tinyden_model.hpp"

namespace {

class SignalAtStep final : public yeto::learner::OuterSync {
 public:
  SignalAtStep(std::int64_t step, int sig) : step_(step), sig_(sig) {}
  void start(const yeto::learner::Trainable&) override {}
  void after_step(std::int64_t step, std::int64_t, const yeto::learner::Trainable&) override {
    if (step == step_) std::raise(sig_);
  }
  bool stop_requested() const override { return false; }
  bool finish(const yeto::learner::Trainable&) override { return true; }

 private:
  std::int64_t step_;
  int sig_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::cerr << "usage: learner_tinyden_driver CONFIG RUN_DIR [--kill-at-step N | --term-at-step N]\n";
    return 2;
  }
  try {
    const auto cfg = yeto::config::Config::resolve(std::filesystem::path(argv[1]), {});
    yeto::learner::RunOptions options;
    options.run_dir = argv[2];
    std::unique_ptr<SignalAtStep> hook;
    if (argc == 5) {
      const std::string flag = argv[3];
      hook = std::make_unique<SignalAtStep>(std::atoll(argv[4]), flag == "--kill-at-step" ? SIGKILL : SIGTERM);
    }
    auto m = yeto::learner::test::open_tinyden_model();
    const auto r = yeto::learner::train(*m.model, cfg, options, hook.get());
    std::cout << "steps " << r.steps << " stopped_early " << r.stopped_early << "\n";
    return 0;
  } catch (const yeto::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  }
}
