#include "fleet/client.hpp"

#include "core/subprocess.hpp"

namespace yeto::fleet {

bool on_path(const std::string& program) { return yeto::on_path(program); }

ClientResult run_client(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  auto c = run_captured(argv, env);
  return {c.exit_code, std::move(c.out), std::move(c.err)};
}

}  // namespace yeto::fleet
