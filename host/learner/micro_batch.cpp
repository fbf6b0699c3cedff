#include "learner/micro_batch.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace yeto::learner {
namespace {

double status_field_mb(const char* path, const std::string& field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream ss(line.substr(field.size() + 1));
      double kb = 0;
      ss >> kb;
      return kb / 1024.0;
    }
  }
  return 0.0;
}

}  // namespace

void reset_peak_rss() {
  // Linux: writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS.
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

double peak_rss_since_reset_mb() { return status_field_mb("/proc/self/status", "VmHWM"); }

double available_memory_mb() { return status_field_mb("/proc/meminfo", "MemAvailable"); }

MicroBatchDecision choose_micro_batch(const ProbeRequest& request,
                                      const std::function<void(const std::vector<std::size_t>&)>& probe,
                                      const std::function<double()>& peak_mb, const std::function<void()>& reset_peak) {
  const auto measure = peak_mb ? peak_mb : peak_rss_since_reset_mb;
  const auto reset = reset_peak ? reset_peak : reset_peak_rss;
  const std::int64_t effective = std::max<std::int64_t>(1, request.effective_batch);
  const double budget = request.budget_mb > 0 ? static_cast<double>(request.budget_mb)
                                              : 0.8 * (available_memory_mb() + measure());
  std::vector<std::int64_t> candidates;
  for (std::int64_t b = 1; b <= effective; ++b)
    if (effective % b == 0) candidates.push_back(b);

  std::ostringstream log;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", budget);
  log << "budget " << buf << " MiB, effective batch " << effective << ";";
  std::int64_t chosen = effective;
  std::size_t probed = 0;
  for (const auto& shape : request.shapes) {
    if (probed++ >= 8 || shape.rows.empty()) break;
    std::int64_t best = 0;
    for (const auto b : candidates) {
      if (b > chosen) break;  // a smaller shape cannot raise the minimum
      std::vector<std::size_t> rows;
      for (std::int64_t i = 0; i < b; ++i) rows.push_back(shape.rows[static_cast<std::size_t>(i) % shape.rows.size()]);
      reset();
      bool fits = true;
      double peak = 0;
      try {
        probe(rows);
        peak = measure();
        fits = peak <= budget;
      } catch (const std::exception& e) {
        const std::string what = e.what();
        if (what.find("out of memory") == std::string::npos) throw;
        fits = false;
      }
      std::snprintf(buf, sizeof buf, "%.0f", peak);
      log << " " << shape.label << " x" << b << (fits ? " ok" : " too big") << " (" << buf << " MiB)";
      if (!fits) break;
      best = b;
    }
    chosen = std::min(chosen, std::max<std::int64_t>(best, 1));
    if (best == 0) log << " [even 1 exceeds the budget; using 1]";
  }
  MicroBatchDecision d;
  d.micro_batch_size = chosen;
  d.gradient_accumulation = effective / chosen;
  log << " -> micro_batch_size " << d.micro_batch_size << ", gradient_accumulation " << d.gradient_accumulation;
  d.log = log.str();
  return d;
}

}  // namespace yeto::learner
