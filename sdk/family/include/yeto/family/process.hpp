// Running an external program from a plugin, for a family whose sampling is another program (the
// AlphaFold 3 guard runs the official run_alphafold.py). Torch-free: its own library
// (yeto_family_process, YetoSDK::family_process), which the family kit links.
//
// The program runs without a shell (argv as given), stdin from /dev/null, stdout and stderr
// appended to one log file, in a working directory of its own; the call waits for it. Only
// `generate` should use it: a plugin starts no long-lived processes.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace yeto::family {

struct ProcessOptions {
  std::vector<std::string> argv;           // argv[0]: a path, or a name looked up on the child's PATH
  std::map<std::string, std::string> env;  // set in the child's environment (replacing a variable of the name)
  std::vector<std::string> unset_env;      // removed from the child's environment; a name ending in '*' is a prefix
  std::filesystem::path cwd;               // empty: this process's working directory
  std::filesystem::path log;               // stdout and stderr are appended here (created); required
};

struct ProcessResult {
  bool started = false;  // false: the program could not be started (`error` says why)
  int exit_status = -1;  // the program's exit status when it exited
  int signal = 0;        // the signal that ended it, else 0
  std::string error;     // why it could not start or be waited for
  bool ok() const { return started && signal == 0 && exit_status == 0; }
};

// Runs the program and waits for it. Never throws for the program itself (a missing program, a
// failure, a signal: the result says which); throws std::invalid_argument for an empty argv or
// no log path and std::runtime_error when the log file cannot be opened.
ProcessResult run_process(const ProcessOptions& options);

// "exit status 3", "killed by signal 9 (Killed)", "could not start: ..." for messages.
std::string describe(const ProcessResult& result);

// The environment the child would get (NAME=value, sorted), for the log's header and tests.
std::vector<std::string> child_environment(const ProcessOptions& options);

// The last `lines` lines of a text file ("" when it cannot be read), for error messages that
// point at a log.
std::string tail_lines(const std::filesystem::path& file, std::size_t lines);

}  // namespace yeto::family
