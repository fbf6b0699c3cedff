// How a running training is told to save or stop: SIGTERM / SIGINT (save, then stop), and
// the signal files `save` (checkpoint now, keep going) and `save_quit` (checkpoint, then stop)
// dropped into the run directory. Torch-free.
#pragma once

#include <filesystem>

namespace yeto::learner {

enum class Request { none, save, save_quit };

class RunControl {
 public:
  // Installs SIGTERM/SIGINT handlers (restored by the destructor).
  explicit RunControl(std::filesystem::path run_dir, bool handle_signals = true);
  ~RunControl();
  RunControl(const RunControl&) = delete;
  RunControl& operator=(const RunControl&) = delete;

  // What to do at this step boundary. A signal file is removed once seen.
  Request poll();
  // The signal that asked to stop (0 when none).
  int signal_received() const;

 private:
  std::filesystem::path run_dir_;
  bool handle_signals_;
};

}  // namespace yeto::learner
