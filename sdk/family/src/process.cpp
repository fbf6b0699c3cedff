#include "yeto/family/process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace yeto::family {
namespace {

bool removed(const std::string& name, const ProcessOptions& o) {
  for (const auto& u : o.unset_env) {
    if (!u.empty() && u.back() == '*' ? name.compare(0, u.size() - 1, u, 0, u.size() - 1) == 0 : name == u) return true;
  }
  return o.env.count(name) != 0;
}

// The executable `program` names on the colon-separated `path` ("" when none): a name with a '/'
// is itself.
std::string find_program(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) return program;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + program;
    std::error_code ec;
    if (::access(p.c_str(), X_OK) == 0 && !std::filesystem::is_directory(p, ec)) return p;
  }
  return "";
}

}  // namespace

std::vector<std::string> child_environment(const ProcessOptions& options) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos || removed(kv.substr(0, eq), options)) continue;
    out.push_back(kv);
  }
  for (const auto& [k, v] : options.env) out.push_back(k + "=" + v);
  std::sort(out.begin(), out.end());
  return out;
}

ProcessResult run_process(const ProcessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) throw std::invalid_argument("run_process: no program given");
  if (options.log.empty()) throw std::invalid_argument("run_process: no log file given");
  ProcessResult r;
  std::vector<std::string> envs = child_environment(options);
  std::string path;
  for (const auto& kv : envs)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  const std::string program = find_program(options.argv[0], path);
  if (program.empty()) {
    r.error = "'" + options.argv[0] + "' is not an executable on the PATH";
    return r;
  }
  std::error_code ec;
  if (!options.cwd.empty() && !std::filesystem::is_directory(options.cwd, ec)) {
    r.error = "working directory " + options.cwd.string() + " does not exist";
    return r;
  }
  const int log = ::open(options.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open the log " + options.log.string() + ": " + std::strerror(errno));
  std::vector<char*> args, envp;
  std::vector<std::string> argv = options.argv;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log, 1);
  posix_spawn_file_actions_adddup2(&fa, log, 2);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, options.cwd.c_str());
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, program.c_str(), &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(log);
  for (auto& e : envs) std::fill(e.begin(), e.end(), '\0');  // the copies may hold a secret
  if (rc != 0) {
    r.error = "cannot start " + program + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      r.error = std::string("waiting for ") + program + ": " + std::strerror(errno);
      return r;
    }
  }
  if (WIFEXITED(status)) {
    r.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

std::string describe(const ProcessResult& r) {
  if (!r.started) return "could not start: " + r.error;
  if (r.signal != 0) return "killed by signal " + std::to_string(r.signal) + " (" + ::strsignal(r.signal) + ")";
  if (r.exit_status < 0) return r.error.empty() ? "no exit status" : r.error;
  return "exit status " + std::to_string(r.exit_status) + (r.error.empty() ? "" : " (" + r.error + ")");
}

std::string tail_lines(const std::filesystem::path& file, std::size_t lines) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t start = end;
  for (std::size_t n = 0; n < lines && start > 0;) {
    --start;
    if (text[start] == '\n' && ++n == lines) {
      ++start;
      break;
    }
  }
  return text.substr(start, end - start);
}

}  // namespace yeto::family
