// Runs an engine's client (sbatch, squeue, sky, kubectl) and captures what it prints. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace yeto::fleet {

struct ClientResult {
  int exit_code = -1;  // 128 + signal when killed; 127 when the program could not be started
  std::string out;
  std::string err;
};

// Runs argv[0] (looked up on PATH, no shell) with `env` added to this process's environment.
ClientResult run_client(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// True when `program` is an executable on PATH (or an executable path).
bool on_path(const std::string& program);

}  // namespace yeto::fleet
