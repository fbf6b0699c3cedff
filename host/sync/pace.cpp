#include "sync/pace.hpp"

#include <algorithm>
#include <cmath>

namespace yeto::sync {

void Pacer::on_push(const std::string& id, std::uint32_t p, std::uint64_t inner_steps, double t) {
  Learner& l = l_[id];
  const auto it = l.last.find(p);
  if (it != l.last.end() && inner_steps > 0 && t > it->second) {
    if (l.spi > 0) {
      // The prediction this push answers: its previous push plus its period at the rate so far.
      const double predicted = it->second + static_cast<double>(inner_steps) * l.spi;
      const double err = std::abs(t - predicted);
      l.dev = l.dev < 0 ? err : 0.75 * l.dev + 0.25 * err;
    }
    const double spi = (t - it->second) / static_cast<double>(inner_steps);
    l.spi = l.spi < 0 ? spi : 0.75 * l.spi + 0.25 * spi;
    l.h = inner_steps;
  }
  l.last[p] = t;
}

void Pacer::on_join(const std::string& id) { l_[id].last.clear(); }

double Pacer::period(const std::string& id) const {
  const auto it = l_.find(id);
  if (it == l_.end() || it->second.spi < 0) return -1;
  // At most the run's H: a carrying learner's push that waited for a merge covers more steps,
  // but its period is still H steps; taking the longer push for it would stretch the learner's
  // bound with every wait, until its rounds waited for the slowest island whatever its speed.
  std::uint64_t h = it->second.h ? it->second.h : o_.inner_steps;
  if (o_.inner_steps) h = std::min(h, static_cast<std::uint64_t>(o_.inner_steps));
  return static_cast<double>(h) * it->second.spi;
}

double Pacer::expected_at(const std::string& id, std::uint32_t p) const {
  const auto it = l_.find(id);
  if (it == l_.end()) return -1;
  const auto last = it->second.last.find(p);
  const double per = period(id);
  if (last == it->second.last.end() || per < 0) return -1;
  return last->second + per;
}

double Pacer::slack(const std::string& id) const {
  const auto it = l_.find(id);
  const double per = period(id);
  if (it == l_.end() || per < 0) return -1;
  const double dev = std::max(it->second.dev, 0.0);
  return std::max({o_.grace_factor * dev, kSlackFloor * per, o_.resolution_s});
}

double Pacer::bound(const std::string& id) const {
  const double per = period(id);
  const double b = per > 0 ? std::max(o_.grace_fraction * per, o_.resolution_s) : o_.grace_max_s;
  return std::clamp(b, o_.grace_min_s, o_.grace_max_s);
}

RoundWait Pacer::decide(std::uint32_t p, const std::vector<RoundPush>& in_round,
                        const std::vector<std::string>& active, double first, double now) const {
  RoundWait w;
  double deadline = -1;
  for (const auto& x : in_round) {
    const double d = x.at + bound(x.id);
    if (deadline < 0 || d < deadline) deadline = d;
  }
  if (deadline < 0) deadline = first + bound("");
  deadline = std::max(deadline, first + o_.grace_min_s);
  w.bound = deadline - first;
  w.until = first + o_.grace_min_s;
  for (const auto& id : active) {
    if (std::any_of(in_round.begin(), in_round.end(), [&](const RoundPush& x) { return x.id == id; })) continue;
    const double e = expected_at(id, p);
    double until = deadline;
    if (e >= 0) {
      const double s = slack(id);
      // Not due before the deadline, or late by more than its own period (stalled or dead).
      if (e - s > deadline || now > e + std::max(s, period(id))) continue;
      // Due: until its expected arrival plus slack; late already (validation, a checkpoint, a
      // slow link): up to the deadline.
      if (now <= e + s) until = std::min(e + s, deadline);
    }
    w.expected.push_back(id);
    w.until = std::max(w.until, until);
  }
  w.merge = now >= w.until;
  return w;
}

}  // namespace yeto::sync
