#include "core/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/strings.hpp"

extern char** environ;

namespace yeto {

namespace {

// The executable `program` resolves to on the colon-separated `path` ("" when none does); a
// program with a '/' is itself (relative to the child's working directory; spawning reports it).
std::string find_on(const std::string& program, const char* path) {
  if (program.find('/') != std::string::npos) return program;
  if (path == nullptr) return "";
  for (const auto& dir : split(path, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + program;
    if (::access(p.c_str(), X_OK) == 0 && !std::filesystem::is_directory(p)) return p;
  }
  return "";
}

}  // namespace

bool on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  return !find_on(program, std::getenv("PATH")).empty();
}

Captured run_captured(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                      const std::string& cwd) {
  Captured r;
  if (argv.empty()) return r;
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos && env.count(kv.substr(0, eq)) != 0) continue;
    envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return r;
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  pid_t pid = 0;
  // The program is looked up on the child's PATH (`env` may set it), as a shell would.
  const auto path_it = env.find("PATH");
  const std::string program = find_on(argv[0], path_it != env.end() ? path_it->second.c_str() : std::getenv("PATH"));
  const int rc = program.empty() ? ENOENT : ::posix_spawn(&pid, program.c_str(), &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  // Scrub the copies of the environment (it may hold the run secret).
  for (auto& e : envs) std::memset(e.data(), 0, e.size());
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    r.exit_code = 127;
    r.err = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return r;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace yeto
