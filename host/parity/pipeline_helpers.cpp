#include "parity/pipeline_helpers.hpp"

#include <map>
#include <mutex>

namespace yeto::parity {
namespace {

struct HelperTable {
  std::mutex mu;
  std::map<std::string, py::Function> fns;
  CaseHelperProvider provider;
};

HelperTable& helpers() {
  static HelperTable t;
  return t;
}

void run_pipeline_helpers(const CaseContext& ctx, CaseResult& result) {
  py::Interpreter interp(ctx);
  CaseHelperProvider provider;
  {
    std::lock_guard<std::mutex> lock(helpers().mu);
    for (const auto& [name, fn] : helpers().fns) interp.define_function(name, fn);
    provider = helpers().provider;
  }
  if (provider)
    for (auto& [name, fn] : provider(ctx)) interp.define_function(name, std::move(fn));
  interp.run_calls(result);
}

}  // namespace

void register_pipeline_helper(const std::string& name, py::Function fn) {
  std::lock_guard<std::mutex> lock(helpers().mu);
  helpers().fns[name] = std::move(fn);
}

void set_pipeline_helper_provider(CaseHelperProvider provider) {
  std::lock_guard<std::mutex> lock(helpers().mu);
  helpers().provider = std::move(provider);
}

std::vector<std::string> registered_pipeline_helpers() {
  std::lock_guard<std::mutex> lock(helpers().mu);
  std::vector<std::string> out;
  for (const auto& [name, _] : helpers().fns) out.push_back(name);
  return out;
}

void register_pipeline_helpers_kind() { register_kind("pipeline_helpers", run_pipeline_helpers); }

}  // namespace yeto::parity
