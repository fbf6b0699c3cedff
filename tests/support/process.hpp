// Runs a program and captures its output, for tests that drive yeto-host as a user would.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace yeto::test {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal number when killed by a signal
  std::string out;
  std::string err;
  std::string all() const { return out + err; }
};

// Runs `argv[0]` with arguments (no shell), optionally in `cwd` and with extra environment
// variables, waits for it, and returns its exit code and output.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd = "",
                          const std::map<std::string, std::string>& env = {});

// Runs the yeto-host built with this test.
ProcessResult run_host(const std::vector<std::string>& args, const std::string& cwd = "",
                       const std::map<std::string, std::string>& env = {});

}  // namespace yeto::test
