// Errors raised inside the host. Every user-facing failure is a yeto::Error carrying the
// process exit code it maps to and, where known, where the bad input was (file, line,
// column, row, key, tensor). main() prints the message and exits with the code; nothing
// below main() terminates the process.
#pragma once

#include <stdexcept>
#include <string>

namespace yeto {

// Process exit codes. Stable: scripts and tests rely on them.
enum class ExitCode : int {
  ok = 0,
  failure = 1,          // a run or command failed (I/O, numerics, a peer)
  usage = 2,            // bad command line or run configuration
  not_available = 3,    // the command exists but its machinery is not in this build
  // Plugin trust refusals (sdk loader): each reason has its own code.
  plugin_unsigned = 20,
  plugin_bad_signature = 21,
  plugin_unknown_key = 22,
  plugin_revoked_key = 23,
  plugin_abi_mismatch = 24,
  plugin_torch_mismatch = 25,
  plugin_no_entry = 26,
  plugin_license = 27,
  plugin_not_found = 28,
  plugin_manifest = 29,
  // Data and model input.
  bad_input = 30,       // a model, dataset or tensor file is invalid
  not_found = 31,       // a model, revision, dataset or file does not exist
  parity_failed = 40,   // check-parity found an output out of tolerance
  interrupted = 130,
};

// Where a problem was found. Empty fields are left out of the rendered text.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const;  // "file:line:column", "file:line", "file" or ""
};

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, ExitCode code = ExitCode::failure)
      : std::runtime_error(std::move(message)), code_(code) {}
  ExitCode code() const noexcept { return code_; }
  int exit_code() const noexcept { return static_cast<int>(code_); }

 private:
  ExitCode code_;
};

// A bad command line or run configuration: exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(std::string message) : Error(std::move(message), ExitCode::usage) {}
};

// Prefixes a location ("run.toml:3:7: ") when one is known.
std::string with_location(const Location& where, const std::string& message);

}  // namespace yeto
