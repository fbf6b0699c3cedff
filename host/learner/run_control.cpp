#include "learner/run_control.hpp"

#include <csignal>
#include <system_error>

namespace yeto::learner {
namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_term {};
struct sigaction g_old_int {};

extern "C" void on_stop_signal(int sig) { g_signal = sig; }

}  // namespace

RunControl::RunControl(std::filesystem::path run_dir, bool handle_signals)
    : run_dir_(std::move(run_dir)), handle_signals_(handle_signals) {
  g_signal = 0;
  if (!handle_signals_) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

RunControl::~RunControl() {
  if (!handle_signals_) return;
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

Request RunControl::poll() {
  if (g_signal != 0) return Request::save_quit;
  std::error_code ec;
  if (std::filesystem::exists(run_dir_ / "save_quit", ec)) {
    std::filesystem::remove(run_dir_ / "save_quit", ec);
    return Request::save_quit;
  }
  if (std::filesystem::exists(run_dir_ / "save", ec)) {
    std::filesystem::remove(run_dir_ / "save", ec);
    return Request::save;
  }
  return Request::none;
}

int RunControl::signal_received() const { return static_cast<int>(g_signal); }

}  // namespace yeto::learner
