// Runs a program (no shell) and captures what it prints. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace yeto {

struct Captured {
  int exit_code = -1;  // 128 + signal when killed; 127 when the program could not be started
  std::string out;
  std::string err;
};

// Runs argv[0] (looked up on the child's PATH, `env`'s when it sets one, unless it holds a '/')
// with `env` added to this process's
// environment (replacing variables of the same name), stdin from /dev/null, in `cwd` when not
// empty, and waits for it. The copies of the environment made for the child are zeroed once it
// has started (they may hold a secret). Never throws for a program that cannot start: exit 127
// with the reason in `err`.
Captured run_captured(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                      const std::string& cwd = "");

// True when `program` is an executable on PATH (or an executable path).
bool on_path(const std::string& program);

}  // namespace yeto
