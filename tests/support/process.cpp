#include "support/process.hpp"

#include "core/subprocess.hpp"

#ifndef YETO_HOST_BIN
#error "YETO_HOST_BIN must name the yeto-host binary under test"
#endif

namespace yeto::test {

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd,
                          const std::map<std::string, std::string>& env) {
  auto c = yeto::run_captured(argv, env, cwd);
  return {c.exit_code, std::move(c.out), std::move(c.err)};
}

ProcessResult run_host(const std::vector<std::string>& args, const std::string& cwd,
                       const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {YETO_HOST_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, cwd, env);
}

}  // namespace yeto::test
