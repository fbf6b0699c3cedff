// `yeto-host check-parity CASE_DIR...`: runs recorded reference cases against this build.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/parity_kinds.hpp"
#include "app/plugin_parity_kinds.hpp"
#include "core/error.hpp"
#include "parity/parity.hpp"

namespace yeto::app {
namespace {

namespace fs = std::filesystem;
using parity::CaseResult;
using parity::Comparison;

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

std::string tol(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A case directory, or a directory of case directories (each with a case.json).
std::vector<fs::path> expand(const std::vector<std::string>& args) {
  std::vector<fs::path> out;
  for (const auto& a : args) {
    const fs::path p(a);
    if (!fs::exists(p)) throw Error("check-parity: " + a + " does not exist", ExitCode::not_found);
    if (fs::is_directory(p) && !fs::exists(p / "case.json")) {
      std::vector<fs::path> sub;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_directory() && fs::exists(e.path() / "case.json")) sub.push_back(e.path());
      if (sub.empty())
        throw Error("check-parity: " + a + " has no case.json and no case directories under it", ExitCode::not_found);
      std::sort(sub.begin(), sub.end());
      out.insert(out.end(), sub.begin(), sub.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

nlohmann::json to_json(const CaseResult& r) {
  nlohmann::json j = {{"case", r.case_name}, {"kind", r.kind}, {"supported", r.supported},
                      {"pass", r.pass()},   {"error", r.error}};
  j["comparisons"] = nlohmann::json::array();
  for (const auto& c : r.comparisons)
    j["comparisons"].push_back({{"name", c.name}, {"max_abs", c.max_abs}, {"max_rel", c.max_rel}, {"atol", c.atol},
                                {"rtol", c.rtol}, {"pass", c.pass}, {"note", c.note}});
  return j;
}

int run_check_parity(CommandContext& ctx) {
  register_all_parity_kinds();
  // Plugins load with the command's plugin settings: one whose licence must be acknowledged only
  // when plugins.accept_licenses lists it.
  set_parity_plugin_settings(ctx.config());
  const bool json = ctx.has("json");
  const bool failures_only = ctx.has("failures-only");
  const std::vector<fs::path> dirs = expand(ctx.positionals());
  int passed = 0, failed = 0, unsupported = 0;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& dir : dirs) {
    const CaseResult r = parity::run_case(dir);
    const bool any_fail = !r.error.empty() && r.supported;
    std::size_t n_fail = 0;
    for (const auto& c : r.comparisons) n_fail += c.pass ? 0 : 1;
    if (json) all.push_back(to_json(r));
    if (!json) {
      std::cout << "case " << r.case_name << " (" << (r.kind.empty() ? "?" : r.kind) << ") " << dir.string() << "\n";
      for (const auto& c : r.comparisons) {
        if (failures_only && c.pass) continue;
        std::cout << "  " << (c.pass ? "PASS" : "FAIL") << "  " << c.name << "  max_abs " << sci(c.max_abs)
                  << " (atol " << tol(c.atol) << ")  max_rel " << sci(c.max_rel) << " (rtol " << tol(c.rtol) << ")";
        if (!c.note.empty()) std::cout << "  -- " << c.note;
        std::cout << "\n";
      }
    }
    std::string verdict;
    if (n_fail > 0 || any_fail) {
      ++failed;
      verdict = "FAIL";
    } else if (!r.supported) {
      ++unsupported;
      verdict = "UNSUPPORTED";
    } else if (r.comparisons.empty()) {
      ++failed;
      verdict = "FAIL";
    } else {
      ++passed;
      verdict = "PASS";
    }
    if (!json) {
      std::cout << "  => " << verdict << " (" << (r.comparisons.size() - n_fail) << "/" << r.comparisons.size()
                << " outputs within tolerance)";
      if (!r.error.empty()) std::cout << ": " << r.error;
      else if (r.comparisons.empty()) std::cout << ": no outputs were compared";
      std::cout << "\n";
    }
  }
  if (json) {
    std::cout << nlohmann::json({{"cases", all},
                                 {"passed", passed},
                                 {"failed", failed},
                                 {"unsupported", unsupported}})
                     .dump(2)
              << "\n";
  } else {
    std::cout << "summary: " << dirs.size() << " case(s): " << passed << " passed, " << failed << " failed, "
              << unsupported << " unsupported\n";
  }
  if (failed > 0) return static_cast<int>(ExitCode::parity_failed);
  if (unsupported > 0) return static_cast<int>(ExitCode::not_available);
  return 0;
}

}  // namespace

void register_check_parity_command(Registry& r) {
  Command c;
  c.name = "check-parity";
  c.summary = "Check this build against recorded reference outputs (fixture case dirs).";
  c.description =
      "Runs each parity case directory (case.json + inputs/expected safetensors, in the fixtures format) "
      "through this build's implementation of the case's class and compares every output listed in the "
      "case's `compare` table: PASS when |actual - expected| <= atol + rtol * |expected| everywhere "
      "(integer outputs exactly). A directory without case.json runs every case directory under it.\n\n"
      "Exit status: 0 when every case passes, 40 when any output is out of tolerance or a case fails to "
      "run, 3 when a case's kind or class has no implementation in this build. A plugin whose licence must be "
      "acknowledged is used only when plugins.accept_licenses lists it; plugins.* come from --config / --set.";
  c.positionals = "CASE_DIR...";
  c.min_positionals = 1;
  c.max_positionals = -1;
  c.options = {{"json", "", "print the results as JSON", false, 0},
               {"failures-only", "", "list only the outputs that fail", false, 0}};
  c.run_config = true;  // plugins.* (--set or --config)
  c.run = run_check_parity;
  r.add(std::move(c));
}

}  // namespace yeto::app
