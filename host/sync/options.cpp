#include "sync/options.hpp"

#include <sstream>

#include "config/config.hpp"
#include "core/error.hpp"

namespace yeto::sync {

void Timeouts::validate() const {
  struct Level {
    const char* key;
    double v;
  };
  const Level levels[] = {{"sync.heartbeat_s", heartbeat_s},
                          {"sync.learner_timeout_s", learner_timeout_s},
                          {"sync.grace_max_s", grace_max_s},
                          {"sync.round_deadline_s", round_deadline_s},
                          {"sync.reconnect_budget_s", reconnect_budget_s}};
  std::ostringstream problems;
  for (const auto& l : levels)
    if (!(l.v > 0)) problems << "\n  " << l.key << " = " << l.v << " must be positive";
  for (std::size_t i = 0; i + 1 < std::size(levels); ++i)
    if (!(levels[i].v < levels[i + 1].v))
      problems << "\n  " << levels[i].key << " = " << levels[i].v << " must be shorter than " << levels[i + 1].key
               << " = " << levels[i + 1].v;
  if (grace_min_s < 0 || grace_min_s > grace_max_s)
    problems << "\n  sync.grace_min_s = " << grace_min_s << " must lie in [0, sync.grace_max_s = " << grace_max_s << "]";
  if (grace_factor < 0) problems << "\n  sync.grace_factor must not be negative";
  if (!(grace_fraction > 0) || grace_fraction > kGraceFractionMax)
    problems << "\n  sync.grace_fraction = " << grace_fraction << " must lie in (0, " << kGraceFractionMax << "]";
  if (!(final_timeout_s > heartbeat_s))
    problems << "\n  sync.final_timeout_s = " << final_timeout_s << " must be longer than sync.heartbeat_s";
  const std::string p = problems.str();
  if (!p.empty())
    throw UsageError("inconsistent sync timeouts (heartbeat_s < learner_timeout_s < grace_max_s < round_deadline_s < "
                     "reconnect_budget_s):" + p);
}

void SyncerOptions::validate() const {
  timeouts.validate();
  if (state_dir.empty()) throw UsageError("the syncer needs --state-dir DIR");
  if (quorum < 1) throw UsageError("sync.quorum must be at least 1");
  if (!(outer_lr > 0)) throw UsageError("sync.outer_lr must be positive");
  if (outer_momentum < 0 || outer_momentum >= 1) throw UsageError("sync.outer_momentum must lie in [0, 1)");
  if (checkpoint_every < 1) throw UsageError("sync.checkpoint_every must be at least 1");
  if (quant_block < 8 || quant_block > (1u << 24)) throw UsageError("sync.quant_block must lie in [8, 2^24]");
  if (heloco_params.block < 1) throw UsageError("sync.heloco_block must be at least 1");
  if (expected_learners < 1) throw UsageError("sync.islands must be at least 1");
  if (expect_window_s < 0) throw UsageError("sync.join_timeout_s must not be negative");
  if (max_pending < 1) throw UsageError("sync.max_pending_peers must be at least 1");
  if (max_pending_per_address < 1) throw UsageError("sync.max_pending_per_address must be at least 1");
  if (!(accept_rate > 0)) throw UsageError("sync.accept_rate must be positive");
  if (!(reject_log_interval_s > 0)) throw UsageError("the reject log interval must be positive");
  if (bulk_nice < 0 || bulk_nice > 19) throw UsageError("sync.bulk_nice must lie in [0, 19]");
}

void ClientOptions::validate() const {
  timeouts.validate();
  if (learner_id.empty() || learner_id.size() > 128) throw UsageError("the learner id must have 1 to 128 characters");
  if (inner_steps < 1) throw UsageError("sync.inner_steps must be at least 1");
  if (!(alpha > 0.0f) || alpha > 1.0f) throw UsageError("sync.alpha must lie in (0, 1]");
  if (quant_block < 8) throw UsageError("sync.quant_block must be at least 8");
  if (port == 0) throw UsageError("the syncer address needs a port (HOST:PORT)");
}

void parse_host_port(const std::string& s, std::string& host, std::uint16_t& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw UsageError("expected HOST:PORT, got '" + s + "'");
  host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string p = s.substr(colon + 1);
  long v = -1;
  try {
    std::size_t used = 0;
    v = std::stol(p, &used);
    if (used != p.size()) v = -1;
  } catch (...) {
    v = -1;
  }
  if (v < 0 || v > 65535) throw UsageError("bad port in '" + s + "': use 0-65535");
  port = static_cast<std::uint16_t>(v);
}

const char* downlink_name(Downlink d) {
  switch (d) {
    case Downlink::q4: return "q4";
    case Downlink::f32: return "f32";
    case Downlink::q2: return "q2";
  }
  return "unknown";
}
const char* partial_merge_name(PartialMerge m) { return m == PartialMerge::share ? "share" : "full"; }
const char* uplink_name(Uplink u) { return u == Uplink::q2 ? "q2" : "q4"; }

Timeouts timeouts_from_config(const config::Config& c) {
  Timeouts t;
  t.heartbeat_s = c.get_number("sync.heartbeat_s");
  t.learner_timeout_s = c.get_number("sync.learner_timeout_s");
  t.grace_min_s = c.get_number("sync.grace_min_s");
  t.grace_max_s = c.get_number("sync.grace_max_s");
  t.grace_factor = c.get_number("sync.grace_factor");
  t.grace_fraction = c.get_number("sync.grace_fraction");
  if (!c.get_bool("sync.carry") && t.grace_fraction >= 1) {
    // Without carry a learner's next push must not arrive while its previous one still waits
    // in a round (it would replace it, and its samples would count once): the bound stays
    // below a period (the schema's default is then kGraceFractionNoCarry, the design's before carry).
    std::ostringstream m;
    m << "sync.grace_fraction = " << t.grace_fraction << " (" << c.entry("sync.grace_fraction").where
      << ") needs sync.carry = true: without carry an island's next push would reach the syncer while its previous "
         "one still waits in the round; set it below 1 or turn sync.carry on";
    throw UsageError(m.str());
  }
  t.round_deadline_s = c.get_number("sync.round_deadline_s");
  t.reconnect_budget_s = c.get_number("sync.reconnect_budget_s");
  t.final_timeout_s = c.get_number("sync.final_timeout_s");
  return t;
}

SyncerOptions syncer_options_from_config(const config::Config& c) {
  SyncerOptions o;
  o.run_name = c.get_string("sync.run_id");
  o.timeouts = timeouts_from_config(c);
  o.quorum = static_cast<std::uint32_t>(c.get_int("sync.quorum"));
  o.inner_steps = static_cast<std::uint32_t>(c.get_int("sync.inner_steps"));
  const std::string merge = c.get_string("sync.merge");
  if (merge == "mean") o.merge = MergeRule::mean;
  else if (merge == "rda") o.merge = MergeRule::rda;
  else throw UsageError("sync.merge must be mean or rda, not '" + merge + "'");
  const std::string partial = c.get_string("sync.partial_merge");
  if (partial == "share") o.partial_merge = PartialMerge::share;
  else if (partial == "full") o.partial_merge = PartialMerge::full;
  else throw UsageError("sync.partial_merge must be share or full, not '" + partial + "'");
  o.outer_lr = c.get_number("sync.outer_lr");
  o.outer_momentum = c.get_number("sync.outer_momentum");
  o.max_staleness = static_cast<std::uint32_t>(c.get_int("sync.max_staleness"));
  o.heloco = c.get_bool("sync.heloco");
  o.heloco_params.block = static_cast<std::uint32_t>(c.get_int("sync.heloco_block"));
  o.checkpoint_every = static_cast<std::uint64_t>(c.get_int("sync.checkpoint_every"));
  const std::string downlink = c.get_string("sync.downlink");
  if (downlink == "q4") o.downlink = Downlink::q4;
  else if (downlink == "q2") o.downlink = Downlink::q2;
  else if (downlink == "f32") o.downlink = Downlink::f32;
  else throw UsageError("sync.downlink must be q4, q2 or f32, not '" + downlink + "'");
  o.quant_block = static_cast<std::uint32_t>(c.get_int("sync.quant_block"));
  o.max_frame = static_cast<std::size_t>(c.get_int("sync.max_frame_mb")) << 20;
  o.budget_outer_steps = static_cast<std::uint64_t>(c.get_int("sync.budget_outer_steps"));
  o.budget_samples = static_cast<std::uint64_t>(c.get_int("sync.budget_samples"));
  o.budget_seconds = c.get_number("sync.budget_seconds");
  o.expected_learners = static_cast<std::uint32_t>(c.get_int("sync.islands"));
  o.expect_window_s = c.get_number("sync.join_timeout_s");
  o.max_pending = static_cast<std::uint32_t>(c.get_int("sync.max_pending_peers"));
  o.max_pending_per_address = static_cast<std::uint32_t>(c.get_int("sync.max_pending_per_address"));
  o.accept_rate = c.get_number("sync.accept_rate");
  o.reject_log_burst = static_cast<std::uint32_t>(c.get_int("sync.reject_log_burst"));
  o.tape_max_bytes = static_cast<std::uint64_t>(c.get_number("sync.tape_max_mb") * 1048576.0);
  o.tape_keep = static_cast<std::uint32_t>(c.get_int("sync.tape_keep"));
  o.worker_threads = static_cast<std::uint32_t>(c.get_int("sync.worker_threads"));
  o.offload_bytes = static_cast<std::size_t>(c.get_int("sync.offload_kb")) << 10;
  o.bulk_nice = static_cast<int>(c.get_int("sync.bulk_nice"));
  return o;
}

ClientOptions client_options_from_config(const config::Config& c) {
  ClientOptions o;
  o.run_name = c.get_string("sync.run_id");
  o.timeouts = timeouts_from_config(c);
  o.inner_steps = static_cast<std::uint32_t>(c.get_int("sync.inner_steps"));
  o.alpha = static_cast<float>(c.get_number("sync.alpha"));
  o.carry = c.get_bool("sync.carry");
  const std::string uplink = c.get_string("sync.uplink");
  if (uplink == "q4") o.uplink = Uplink::q4;
  else if (uplink == "q2") o.uplink = Uplink::q2;
  else throw UsageError("sync.uplink must be q4 or q2, not '" + uplink + "'");
  o.quant_block = static_cast<std::uint32_t>(c.get_int("sync.quant_block"));
  o.max_frame = static_cast<std::size_t>(c.get_int("sync.max_frame_mb")) << 20;
  if (!c.get_string("sync.syncer").empty()) parse_host_port(c.get_string("sync.syncer"), o.host, o.port);
  return o;
}

}  // namespace yeto::sync
