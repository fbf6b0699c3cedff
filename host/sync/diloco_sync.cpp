#include "sync/diloco_sync.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/metrics.hpp"
#include "island/collectives.hpp"
#include "sync/clock.hpp"
#include "sync/tape.hpp"

namespace yeto::sync {

DilocoOptions diloco_options_from_config(const config::Config& cfg) {
  DilocoOptions o;
  o.client = client_options_from_config(cfg);
  o.fragments = static_cast<std::uint32_t>(cfg.get_int("sync.fragments"));
  o.pattern = parse_pattern(cfg.get_string("sync.fragment_pattern"));
  o.join_timeout_s = cfg.get_number("sync.join_timeout_s");
  o.max_steps = cfg.get_int("train.max_steps");
  return o;
}

struct DilocoSync::Impl {
  DilocoOptions o;
  Layout layout;
  std::unique_ptr<SyncClient> client;
  std::unique_ptr<JsonlWriter> events;
  // Per tensor: written in place (contiguous float32 on the CPU) or staged through `stage`.
  std::vector<bool> direct;
  std::vector<std::vector<float>> stage;
  std::vector<std::span<float>> spans;
  std::int64_t last_samples = -1;
  DilocoStats st;
  bool failed_logged = false;
  island::Collectives* ranks = nullptr;  // null: one rank
  bool lead = true;                     // owns the client: one rank, or island rank 0
  bool started = false;
  bool stop_flag = false;               // islands: rank 0's stop decision at the last step boundary

  explicit Impl(DilocoOptions opts) : o(std::move(opts)), ranks(o.ranks) {
    if (ranks && ranks->world_size() < 2) ranks = nullptr;
    lead = !ranks || ranks->rank() == 0;
    if (!lead) return;  // other ranks never talk to the syncer
    o.client.defer_final_ack = ranks != nullptr;
    o.client.validate();
    if (!o.client.events.empty()) events = std::make_unique<JsonlWriter>(o.client.events);
  }

  // ---- the island's lock-step decision, broadcast from rank 0

  // Doubles broadcast from rank 0 (the receiving ranks pass `n` zeros). Every value is an
  // integer below 2^53 or a float32 alpha, so double carries them exactly.
  void bcast(std::vector<double>& v) { v = island::broadcast_values(*ranks, std::move(v)); }

  void bcast(std::vector<float>& v) {
    at::Tensor t = at::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, at::kFloat).clone();
    ranks->broadcast(t, 0);
    const float* d = t.data_ptr<float>();
    std::copy(d, d + v.size(), v.begin());
  }

  // Rank 0: what this step boundary decided (r) -> every rank. Others: receive it and apply
  // the same blends. Returns the fragments applied here (for staging back).
  void share_step(StepResult& r, bool stop_now, const learner::Trainable& trainable, bool staged_in) {
    std::vector<double> head = {static_cast<double>(r.applied.size()), r.finished ? 1.0 : 0.0, r.failed ? 1.0 : 0.0,
                                stop_now ? 1.0 : 0.0};
    bcast(head);
    const auto n = static_cast<std::size_t>(head[0]);
    stop_flag = head[3] > 0.5;
    if (!lead) {
      r.finished = head[1] > 0.5;
      r.failed = head[2] > 0.5;
    }
    if (n == 0) return;
    std::vector<double> meta(3 * n, 0.0);
    if (lead)
      for (std::size_t k = 0; k < n; ++k) {
        meta[3 * k] = r.applied[k].fragment;
        meta[3 * k + 1] = static_cast<double>(r.applied[k].version);
        meta[3 * k + 2] = static_cast<double>(r.applied[k].alpha);
      }
    bcast(meta);
    if (lead) {
      for (auto& a : r.applied) bcast(a.data);
      st.broadcasts += n;
      return;
    }
    // The same blend rank 0 did, on the same (bit-identical) tensors.
    if (!staged_in && any_staged()) stage_in(trainable);
    std::set<std::uint32_t> touched;
    for (std::size_t k = 0; k < n; ++k) {
      AppliedFragment a;
      a.fragment = static_cast<std::uint32_t>(meta[3 * k]);
      a.version = static_cast<std::uint64_t>(meta[3 * k + 1]);
      a.alpha = static_cast<float>(meta[3 * k + 2]);
      if (a.fragment >= layout.fragments.size())
        throw Error("outer sync: island rank 0 broadcast fragment " + std::to_string(a.fragment) + " of " +
                    std::to_string(layout.fragments.size()) + "; the ranks disagree on the fragment layout");
      a.data.assign(layout.fragments[a.fragment].numel, 0.0f);
      bcast(a.data);
      apply_fragment(layout, a.fragment, a.data, spans, a.alpha);
      for (std::uint32_t i : layout.fragments[a.fragment].tensors) touched.insert(i);
      r.applied.push_back(std::move(a));
    }
    stage_out(trainable, touched);
    st.broadcasts += n;
  }

  void event(const std::string& name, nlohmann::json extra = nlohmann::json::object()) {
    if (!events) return;
    nlohmann::json j = {{"event", name}, {"time", unix_now()}, {"learner", o.client.learner_id}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    events->write(j);
  }

  ~Impl() {
    // The final cut was applied in after_step() but finish() was not called: still wait
    // (bounded) until the syncer has our acknowledgement.
    if (client && st.finished) client->close(o.client.timeouts.final_timeout_s);
  }

  static bool in_place(const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  }

  // Checks `trainable` against the layout and points `spans` at the tensors (or their stage).
  void bind(const learner::Trainable& trainable) {
    if (trainable.size() != layout.tensors.size())
      throw Error("outer sync: the learner passed " + std::to_string(trainable.size()) + " trainable tensors, " +
                  std::to_string(layout.tensors.size()) + " at start()");
    direct.resize(trainable.size());
    stage.resize(trainable.size());
    spans.resize(trainable.size());
    for (std::size_t i = 0; i < trainable.size(); ++i) {
      const auto& [name, t] = trainable[i];
      const auto& spec = layout.tensors[i];
      if (name != spec.name || !t.defined() || static_cast<std::uint64_t>(t.numel()) != spec.numel)
        throw Error("outer sync: trainable tensor " + std::to_string(i) + " is '" + name + "' (" +
                    (t.defined() ? std::to_string(t.numel()) : std::string("undefined")) + " values), expected '" +
                    spec.name + "' (" + std::to_string(spec.numel) + ") as at start()");
      direct[i] = in_place(t);
      if (direct[i]) {
        stage[i].clear();
        spans[i] = std::span<float>(t.data_ptr<float>(), spec.numel);
      } else {
        stage[i].resize(spec.numel);
        spans[i] = std::span<float>(stage[i]);
      }
    }
  }

  bool any_staged() const {
    for (bool d : direct)
      if (!d) return true;
    return false;
  }

  void stage_in(const learner::Trainable& trainable) {
    at::NoGradGuard ng;
    for (std::size_t i = 0; i < trainable.size(); ++i)
      if (!direct[i]) {
        const at::Tensor& t = trainable[i].second;
        at::from_blob(stage[i].data(), t.sizes(), at::kFloat).copy_(t.detach());
      }
  }

  void stage_out(const learner::Trainable& trainable, const std::set<std::uint32_t>& tensors) {
    at::NoGradGuard ng;
    for (std::uint32_t i : tensors)
      if (!direct[i]) {
        at::Tensor t = trainable[i].second;
        t.copy_(at::from_blob(stage[i].data(), t.sizes(), at::kFloat));
      }
  }

  std::set<std::uint32_t> all_tensors() const {
    std::set<std::uint32_t> s;
    for (std::uint32_t i = 0; i < layout.tensors.size(); ++i) s.insert(i);
    return s;
  }

  std::vector<std::span<const float>> const_spans() const { return {spans.begin(), spans.end()}; }

  void start(const learner::Trainable& trainable) {
    if (started) throw Error("outer sync: start() called twice");
    if (trainable.empty()) throw UsageError("outer sync: there are no trainable tensors to synchronise");
    std::vector<TensorSpec> specs;
    for (const auto& [name, t] : trainable) {
      if (!t.defined() || t.scalar_type() != at::kFloat)
        throw Error("outer sync: trainable tensor '" + name + "' must be float32 (the masters the optimizer updates)");
      specs.push_back({name, static_cast<std::uint64_t>(t.numel())});
    }
    if (o.fragments > specs.size())
      throw UsageError("sync.fragments = " + std::to_string(o.fragments) + " exceeds the " +
                       std::to_string(specs.size()) + " trainable tensors (a fragment would be empty); lower it");
    layout = build_layout(std::move(specs), o.fragments, o.pattern);
    bind(trainable);
    stage_in(trainable);
    started = true;
    if (!lead) {
      // Rank 0 joins; this rank takes the state it starts from.
      std::vector<double> head = {0.0};
      bcast(head);
      st.joined = head[0] > 0.5;
      island::broadcast_tensors(*ranks, trainable, 0);
      if (st.joined) st.fragments_applied += layout.fragments.size();
      return;
    }
    client = std::make_unique<SyncClient>(o.client, layout);
    const auto cs = const_spans();
    client->start(cs);
    st.joined = client->wait_for_global(spans, o.join_timeout_s);
    if (st.joined) {
      stage_out(trainable, all_tensors());
      st.fragments_applied += layout.fragments.size();
      event("joined", {{"fragments", layout.fragments.size()}, {"numel", layout.total_numel()},
                       {"fingerprint", layout.fingerprint()}});
    } else if (client->gave_up()) {
      spdlog::error("outer sync {}: no global state from {}:{}: the sync client gave up (see above)",
                    o.client.learner_id, o.client.host, o.client.port);
      event("join_deferred", {{"join_timeout_s", o.join_timeout_s}, {"gave_up", true}});
    } else {
      spdlog::warn("outer sync {}: no global state from {}:{} within {} s (sync.join_timeout_s); training on the "
                   "local weights until it arrives",
                   o.client.learner_id, o.client.host, o.client.port, o.join_timeout_s);
      event("join_deferred", {{"join_timeout_s", o.join_timeout_s}});
    }
    if (ranks) {
      std::vector<double> head = {st.joined ? 1.0 : 0.0};
      bcast(head);
      island::broadcast_tensors(*ranks, trainable, 0);
    }
  }

  void after_step(std::int64_t step, std::int64_t samples, const learner::Trainable& trainable) {
    if (!started) throw Error("outer sync: after_step() before start()");
    if (st.finished) return;  // every rank knows: the final cut was shared at that boundary
    if (!lead) {
      ++st.steps;
      bind(trainable);
      StepResult r;
      share_step(r, false, trainable, false);
      st.fragments_applied += r.applied.size();
      if (r.finished) {
        st.finished = true;
        ranks->barrier();  // rank 0 acknowledges the final cut once every rank holds it
      }
      return;
    }
    if (last_samples < 0) last_samples = step > 0 ? samples - samples / step : 0;  // resumed runs: one step's share
    const std::int64_t delta = std::max<std::int64_t>(0, samples - last_samples);
    last_samples = samples;
    ++st.steps;
    bind(trainable);
    bool staged = false;
    const std::int64_t steps_left = o.max_steps > 0 ? std::max<std::int64_t>(0, o.max_steps - step) : -1;
    const StepResult r = client->step(spans, static_cast<std::uint64_t>(delta), [&] {
      if (any_staged()) {
        stage_in(trainable);
        staged = true;
      }
    }, steps_left);
    if (staged) ++st.staged_steps;
    if (ranks) {
      const bool stop_now = r.finished || client->final_cut_available() || client->gave_up();
      StepResult shared = r;  // its fragment data travel to the other ranks
      share_step(shared, stop_now, trainable, staged);
      if (r.finished) {
        ranks->barrier();
        client->acknowledge_final();
      }
    }
    if (!r.applied.empty()) {
      std::set<std::uint32_t> touched;
      for (const auto& a : r.applied)
        for (std::uint32_t i : layout.fragments[a.fragment].tensors) touched.insert(i);
      if (staged) stage_out(trainable, touched);
      st.fragments_applied += r.applied.size();
    }
    if (r.finished) st.finished = true;
    if (r.failed && !failed_logged) {
      failed_logged = true;
      spdlog::error("outer sync {}: the sync client gave up (the syncer refused this learner, see above, or was "
                    "unreachable for sync.reconnect_budget_s = {} s); stopping",
                    o.client.learner_id, o.client.timeouts.reconnect_budget_s);
    }
  }

  // Islands, after rank 0's wait for the final cut: every rank overwrites its tensors with it
  // (or learns there is none), then rank 0 acknowledges.
  bool share_final(bool applied, const learner::Trainable& trainable) {
    std::vector<double> head = {applied ? 1.0 : 0.0};
    bcast(head);
    applied = head[0] > 0.5;
    if (!applied) return false;
    island::broadcast_tensors(*ranks, trainable, 0);
    ranks->barrier();
    if (lead) client->acknowledge_final();
    return true;
  }

  bool finish(const learner::Trainable& trainable) {
    if (!started) return false;
    if (!lead) {
      if (st.finished) return true;
      st.finished = share_final(false, trainable);
      if (st.finished) st.fragments_applied += layout.fragments.size();
      return st.finished;
    }
    if (!st.finished) {
      bind(trainable);
      // With carry, what was trained since the last push (a push due at the last step may be
      // waiting for a merge) goes to the syncer before `done`; the rounds never wait longer than
      // round_deadline_s. This rank's carried merges are overwritten by the final cut below.
      bool staged = false;
      StepResult rest;
      client->push_remaining(spans, o.client.timeouts.round_deadline_s, [&] {
        if (any_staged() && !staged) {
          stage_in(trainable);
          staged = true;
        }
      }, &rest);
      if (staged && !rest.applied.empty()) stage_out(trainable, all_tensors());
      if (!rest.pushed.empty()) event("pushed_remaining", {{"fragments", rest.pushed}, {"merges_carried", rest.applied.size()}});
      client->finish_local(st.steps, static_cast<std::uint64_t>(std::max<std::int64_t>(last_samples, 0)));
      const double started = steady_now();
      bool applied = false;
      while (!applied) {
        applied = client->wait_for_final(spans, 1.0);
        if (applied || client->gave_up()) break;
        if (o.final_wait_s > 0 && steady_now() - started > o.final_wait_s) break;
      }
      if (applied) {
        stage_out(trainable, all_tensors());
        st.fragments_applied += layout.fragments.size();
      }
      if (ranks) share_final(applied, trainable);
      if (!applied) {
        spdlog::error("outer sync {}: no final cut from the syncer; the island keeps its local weights",
                      o.client.learner_id);
        event("final_missing", {{"gave_up", client->gave_up()}});
        client->close(1.0);
        return false;
      }
      st.finished = true;
    }
    client->close(o.client.timeouts.final_timeout_s);
    const ClientStats cs = client->stats();
    event("finished", {{"steps", st.steps}, {"fragments_applied", st.fragments_applied},
                       {"bytes_sent", cs.bytes_sent}, {"bytes_received", cs.bytes_received},
                       {"pushes_sent", cs.pushes_sent}, {"pushes_accepted", cs.pushes_accepted}});
    return true;
  }
};

DilocoSync::DilocoSync(DilocoOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
DilocoSync::~DilocoSync() = default;

void DilocoSync::start(const learner::Trainable& trainable) { impl_->start(trainable); }

void DilocoSync::after_step(std::int64_t step, std::int64_t samples, const learner::Trainable& trainable) {
  impl_->after_step(step, samples, trainable);
}

bool DilocoSync::stop_requested() const {
  // An island stops on rank 0's decision at the last step boundary, the same on every rank.
  if (impl_->ranks) return impl_->stop_flag || impl_->st.finished;
  return impl_->client && (impl_->st.finished || impl_->client->final_cut_available() || impl_->client->gave_up());
}

bool DilocoSync::finish(const learner::Trainable& trainable) { return impl_->finish(trainable); }

DilocoStats DilocoSync::stats() const {
  DilocoStats s = impl_->st;
  if (impl_->client) s.client = impl_->client->stats();
  return s;
}

}  // namespace yeto::sync
