#include <utility>  // before Boost.Asio: its awaitable.hpp uses std::exchange (toolchain gotcha 3)

#include "sync/client.hpp"

#include <boost/asio.hpp>
#include <boost/asio/redirect_error.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "sync/carry.hpp"
#include "sync/clock.hpp"
#include "sync/merge.hpp"
#include "sync/protocol.hpp"
#include "sync/tape.hpp"

namespace yeto::sync {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

DeltaEncoding uplink_encoding(Uplink u) { return u == Uplink::q2 ? DeltaEncoding::q2 : DeltaEncoding::q4; }

struct RawPush {
  std::uint32_t fragment = 0;
  std::uint64_t base_version = 0;
  std::uint64_t samples = 0;
  std::uint32_t inner_steps = 0;
  std::vector<float> delta;    // float32 pseudo-gradient, quantised by the communication thread,
  std::optional<Push> encoded;  // or the push already quantised (sync.carry: on the training thread)
  std::uint64_t numel() const { return encoded ? encoded->numel : delta.size(); }
};

struct Link {  // one TCP connection to the syncer
  explicit Link(asio::io_context& io) : sock(io), wake(io), beat(io) {
    wake.expires_at(asio::steady_timer::time_point::max());
  }
  tcp::socket sock;
  asio::steady_timer wake, beat;
  std::optional<Session> session;
  bool closed = false;
  bool done_sent = false;  // this connection has told the syncer that we are done
  // Welcomed with InitAsk::pending: the syncer may still ask this connection for `init`.
  bool init_pending = false;
  void close() {
    closed = true;
    boost::system::error_code ec;
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
    wake.cancel();
    beat.cancel();
  }
};

class ClientError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A refusal that no retry can fix (the run secrets or the layouts differ, or the syncer refused
// this learner's initial state).
class RefusedError : public ClientError {
 public:
  using ClientError::ClientError;
};
}  // namespace

struct SyncClient::Impl {
  ClientOptions o;
  Layout layout;
  Key key;
  std::uint64_t run_id;
  std::unique_ptr<JsonlWriter> events;

  // shared between the threads (mu)
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<FragmentMsg>> latest;
  std::optional<FinalCut> final_cut;
  std::map<std::uint32_t, RawPush> push_queue;  // newest pseudo-gradient per fragment
  std::deque<std::pair<MsgType, std::string>> control;
  std::vector<float> initial;                   // all tensors, canonical order (for INIT)
  ClientStats st;
  bool failed = false, stopping = false, final_ack_sent = false, final_ack_queued = false;
  bool final_applied = false;  // apply_final() ran (its ack may be deferred)
  std::array<unsigned char, 32> final_digest{};  // of what apply_final() left in the tensors
  bool ended_after_final = false;  // the syncer closed the connection after our final ack
  std::optional<Heartbeat> local_done;          // finish_local() was called: send `done` once per connection
  std::map<std::uint32_t, std::uint64_t> sent_base;  // base version of the last push sent per fragment
  std::vector<CarryNotes> notes;  // sync.carry: what the connections learned of each fragment's outstanding push

  // training thread only
  std::vector<std::vector<float>> base;
  std::vector<std::uint64_t> base_version;
  std::vector<bool> have_base;
  std::vector<std::uint64_t> samples_since, steps_since;
  std::vector<double> pushed_at;
  std::vector<std::uint64_t> pushed_base;
  std::vector<FragmentCarry> carry;  // sync.carry: the outstanding push and its snapshot
  std::vector<bool> deferred;        // sync.carry: a push fell due while one was outstanding
  std::vector<bool> pushed_once;     // sync.carry: the fragment has pushed since start (its pushes go
                                     // every H steps from its last one; the first on the staggered grid)
  std::vector<std::uint64_t> out_samples, out_steps;  // sync.carry: what the outstanding push covered
  std::uint64_t step_no = 0;

  // communication thread
  // The public state of every fragment as this connection has delivered it (full fragments,
  // then q4 updates on top of exactly their base version); reset with every connection.
  std::vector<std::optional<FragmentMsg>> held;
  // What this connection's `holds` claimed per fragment (taken as held[p] once the syncer's
  // `holding` accepts it), and whether any connection has delivered fragment p yet (until then
  // the learner claims its own initial values as version 0).
  std::vector<std::optional<FragmentMsg>> claimed;
  std::vector<bool> delivered;
  asio::io_context io{1};
  std::shared_ptr<Link> link;
  std::thread thread;

  Impl(ClientOptions opts, Layout l) : o(std::move(opts)), layout(std::move(l)) {
    o.validate();
    key = run_key_from_secret(o.run_secret);
    run_id = run_id_from_name(o.run_name);
    const std::size_t f = layout.fragments.size();
    latest.resize(f);
    held.resize(f);
    claimed.resize(f);
    delivered.assign(f, false);
    base.resize(f);
    notes.resize(f);
    carry.resize(f);
    deferred.assign(f, false);
    pushed_once.assign(f, false);
    out_samples.assign(f, 0);
    out_steps.assign(f, 0);
    base_version.assign(f, 0);
    have_base.assign(f, false);
    samples_since.assign(f, 0);
    steps_since.assign(f, 0);
    pushed_at.assign(f, -1);
    pushed_base.assign(f, 0);
    if (!o.events.empty()) events = std::make_unique<JsonlWriter>(o.events);
  }

  void event(const std::string& name, json extra = json::object()) {
    if (!events) return;
    json j = {{"event", name}, {"time", unix_now()}, {"learner", o.learner_id}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    events->write(j);
  }

  void notify() {
    asio::post(io, [this] {
      if (link) link->wake.cancel();
    });
  }

  // ---------------------------------------------------------------- comm thread

  // The `init` payload: every trainable tensor's initial values, exact.
  std::string init_payload() const {
    Init in;
    in.pattern = layout.pattern;
    in.fragments = static_cast<std::uint32_t>(layout.fragments.size());
    in.tensors = layout.tensors;
    in.params = initial;
    return in.encode();
  }
  // Claims fragment p at version 0 with this learner's initial values.
  void claim_initial(std::size_t p) {
    std::vector<std::span<const float>> spans;
    std::size_t at = 0;
    for (const auto& t : layout.tensors) {
      spans.emplace_back(initial.data() + at, t.numel);
      at += t.numel;
    }
    claimed[p] = FragmentMsg{static_cast<std::uint32_t>(p), 0, pack_fragment(layout, static_cast<std::uint32_t>(p), spans)};
  }

  static awaitable<Frame> read_frame(Link& l, FrameDecoder& dec, std::vector<char>& buf, std::uint64_t& received) {
    for (;;) {
      if (auto f = dec.next()) co_return std::move(*f);
      boost::system::error_code ec;
      const std::size_t n = co_await l.sock.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
      if (ec) throw ClientError("connection lost: " + ec.message());
      received += n;
      dec.feed(buf.data(), n);
    }
  }

  awaitable<void> write_raw(Link& l, const std::string& bytes) {
    boost::system::error_code ec;
    co_await asio::async_write(l.sock, asio::buffer(bytes), asio::redirect_error(use_awaitable, ec));
    if (ec) throw ClientError("send failed: " + ec.message());
    std::lock_guard lk(mu);
    st.bytes_sent += bytes.size();
  }

  awaitable<void> writer(std::shared_ptr<Link> l) {
    try {
      while (!l->closed) {
        std::optional<std::pair<MsgType, std::string>> ctl;
        std::optional<RawPush> push;
        {
          std::lock_guard lk(mu);
          if (!control.empty()) {
            ctl = std::move(control.front());
            control.pop_front();
          } else if (!push_queue.empty()) {
            // The smallest fragment's push first: a small fragment's round never waits for a large
            // fragment's push to be encoded, sent and opened ahead of it (the syncer reads a
            // connection's frames in order).
            auto next = push_queue.begin();
            for (auto it = push_queue.begin(); it != push_queue.end(); ++it)
              if (it->second.numel() < next->second.numel()) next = it;
            push = std::move(next->second);
            push_queue.erase(next);
            sent_base[push->fragment] = push->base_version;
            notes[push->fragment].sent = true;
            notes[push->fragment].sent_epoch = st.connects;
          } else if (local_done && !l->done_sent) {
            // Only after every queued push: the syncer must see our last pseudo-gradients first.
            ctl.emplace(MsgType::done, local_done->encode());
            l->done_sent = true;
          }
        }
        if (ctl) {
          const std::string frame = l->session->seal(ctl->first, run_id, ctl->second);
          co_await write_raw(*l, frame);
          if (ctl->first == MsgType::init) {
            {
              std::lock_guard lk(mu);
              ++st.inits_sent;
              st.init_bytes += frame.size();
            }
            event("init_sent", {{"bytes", frame.size()}, {"numel", layout.total_numel()}});
          }
          if (ctl->first == MsgType::final_ack) {
            std::lock_guard lk(mu);
            final_ack_sent = true;
            cv.notify_all();
          }
          continue;
        }
        if (push) {
          // Quantised here, off the training thread.
          const Push m = push->encoded ? std::move(*push->encoded)
                                       : Push::from_delta_quantised(uplink_encoding(o.uplink), push->fragment,
                                                                    push->base_version, push->samples,
                                                                    push->inner_steps, push->delta, o.quant_block);
          const std::string frame = l->session->seal(MsgType::push, run_id, m.encode());
          // When the write began as well as (the event's time) when it completed: the completion
          // is seen only when this thread runs again, which on a busy machine can be after the
          // syncer has read the frame.
          const double write_started = unix_now();
          try {
            co_await write_raw(*l, frame);
          } catch (const ClientError&) {
            // Not on the wire (the connection ended): with carry the push is then over as lost.
            event("push_unsent", {{"fragment", push->fragment}, {"base_version", push->base_version},
                                  {"inner_steps", push->inner_steps}});
            throw;
          }
          {
            std::lock_guard lk(mu);
            ++st.pushes_sent;
          }
          event("push", {{"fragment", push->fragment}, {"base_version", push->base_version},
                         {"samples", push->samples}, {"inner_steps", push->inner_steps}, {"bytes", frame.size()},
                         {"f32_bytes", push->numel() * 4}, {"write_started", write_started}});
          continue;
        }
        boost::system::error_code ec;
        co_await l->wake.async_wait(asio::redirect_error(use_awaitable, ec));
      }
    } catch (const std::exception& e) {
      event("send_error", {{"reason", e.what()}});
      l->close();
    }
  }

  awaitable<void> heartbeat(std::shared_ptr<Link> l) {
    while (!l->closed) {
      l->beat.expires_after(secs(o.timeouts.heartbeat_s));
      boost::system::error_code ec;
      co_await l->beat.async_wait(asio::redirect_error(use_awaitable, ec));
      if (l->closed) break;
      {
        std::lock_guard lk(mu);
        control.emplace_back(MsgType::heartbeat, Heartbeat{st.steps, 0}.encode());
      }
      l->wake.cancel();
    }
  }

  awaitable<void> session(bool& connected) {
    auto l = std::make_shared<Link>(io);
    link = l;
    tcp::resolver resolver(io);
    boost::system::error_code ec;
    auto eps = co_await resolver.async_resolve(o.host, std::to_string(o.port), asio::redirect_error(use_awaitable, ec));
    if (ec) throw ClientError("cannot resolve " + o.host + ": " + ec.message());
    co_await asio::async_connect(l->sock, eps, asio::redirect_error(use_awaitable, ec));
    if (ec) throw ClientError("cannot connect: " + ec.message());
    l->sock.set_option(tcp::no_delay(true), ec);
    FrameDecoder dec(run_id, kControlCap);
    std::vector<char> buf(1 << 16);
    std::uint64_t received = 0;
    Frame f = co_await read_frame(*l, dec, buf, received);
    if (f.type != MsgType::challenge) throw ClientError("expected a challenge, got " + std::string(msg_name(f.type)));
    const Challenge ch = Challenge::decode(f.payload);
    Hello h;
    h.learner_id = o.learner_id;
    h.client_nonce = random_nonce();
    h.layout_fp = layout.fingerprint();
    co_await write_raw(*l, h.seal(key, run_id, ch.server_nonce));  // id and fingerprint sealed
    f = co_await read_frame(*l, dec, buf, received);
    if (f.type == MsgType::error) {
      const ErrorMsg e = ErrorMsg::decode(f.payload);
      if (e.code == kErrorAuthentication)
        throw RefusedError("authentication failed: the syncer at " + o.host + ":" + std::to_string(o.port) +
                           " holds another run secret than this learner (both must read the same run secret file)");
      if (e.code == kErrorLayoutMismatch)
        throw RefusedError("the syncer at " + o.host + ":" + std::to_string(o.port) +
                           " refused this learner: layout mismatch (its trainable tensors, fragments or fragment "
                           "pattern differ from the run's)");
      throw ClientError("syncer refused: " + e.message);
    }
    if (f.type != MsgType::welcome) throw ClientError("expected welcome, got " + std::string(msg_name(f.type)));
    const Welcome w = Welcome::decode(f.payload);
    if (!mac_ok(key, Welcome::signed_text(run_id, ch.server_nonce, h.client_nonce), w.tag.data()))
      throw RefusedError("authentication failed: the syncer at " + o.host + ":" + std::to_string(o.port) +
                         " does not hold this learner's run secret (wrong run secret file, or another run's syncer)");
    l->session.emplace(session_key(key, ch.server_nonce, h.client_nonce), 'L', 'S');
    dec.set_max_frame(o.max_frame);
    connected = true;
    {
      std::lock_guard lk(mu);
      st.connected = true;
      ++st.connects;
      st.bytes_received += received;
      // Heartbeats and pushes of a dead connection are meaningless now.
      control.clear();
      if (w.init == InitAsk::send) control.emplace_front(MsgType::init, init_payload());
      if (final_ack_queued && !final_ack_sent && final_cut) control.emplace_back(MsgType::final_ack, FinalAck{final_cut->digest}.encode());
    }
    // A new connection starts from what the syncer sends or accepts: nothing of an earlier one
    // (or of a syncer that restarted behind it) is a base for its updates unless the syncer
    // matches the claim against its own public state. The claim: what the last connection
    // delivered, else (nothing delivered yet) the initial values as version 0.
    for (std::size_t p = 0; p < held.size(); ++p) {
      claimed[p] = std::move(held[p]);
      held[p].reset();
      if (!claimed[p] && !delivered[p]) claim_initial(p);
    }
    if (w.init == InitAsk::send) {
      // The syncer's state will be what this `init` carries, which is what its `holding` accepts.
      for (std::size_t p = 0; p < claimed.size(); ++p) claim_initial(p);
    } else {
      // Into a run with state, or one whose state another learner was asked for: the claim is
      // answered once the state exists.
      l->init_pending = w.init == InitAsk::pending;
      Holds claims;
      for (const auto& c : claimed) {
        FragmentClaim fc;
        fc.version = c ? c->version : kNoClaim;
        if (c) fc.digest = fragment_digest(c->version, c->data);
        claims.claims.push_back(fc);
      }
      std::lock_guard lk(mu);
      control.emplace_front(MsgType::holds, claims.encode());
    }
    event("connected", {{"init", init_ask_name(w.init)}, {"versions", w.versions}});
    asio::co_spawn(io, writer(l), asio::detached);
    asio::co_spawn(io, heartbeat(l), asio::detached);
    try {
      for (;;) {
        received = 0;
        Frame m = co_await read_frame(*l, dec, buf, received);
        const std::string p = l->session->open(std::move(m));  // decrypted in place (takes m.payload)
        {
          std::lock_guard lk(mu);
          st.bytes_received += received;
        }
        switch (m.type) {
          case MsgType::fragment: {
            FragmentMsg fm = FragmentMsg::decode(p);
            if (fm.fragment >= layout.fragments.size() || fm.data.size() != layout.fragments[fm.fragment].numel)
              throw ClientError("syncer sent a fragment of the wrong shape");
            held[fm.fragment] = fm;
            delivered[fm.fragment] = true;
            std::lock_guard lk(mu);
            ++st.fragments_received;
            latest[fm.fragment] = std::move(fm);
            cv.notify_all();
            break;
          }
          case MsgType::update: {
            const UpdateMsg u = UpdateMsg::decode(p);
            if (u.fragment >= layout.fragments.size() || u.numel != layout.fragments[u.fragment].numel)
              throw ClientError("syncer sent an update of the wrong shape");
            auto& mine = held[u.fragment];
            if (!mine || mine->version != u.base_version)
              throw ClientError("update of fragment " + std::to_string(u.fragment) + " to version " +
                                std::to_string(u.version) + " applies on top of version " +
                                std::to_string(u.base_version) + ", but this connection holds " +
                                (mine ? "version " + std::to_string(mine->version) : std::string("none")) +
                                ": reconnecting for the full fragment");
            try {
              u.apply_to(mine->data);
            } catch (...) {
              mine.reset();
              throw;
            }
            mine->version = u.version;
            if (public_crc(mine->data) != u.crc) {
              mine.reset();
              event("update_mismatch", {{"fragment", u.fragment}, {"version", u.version}});
              throw ClientError("update of fragment " + std::to_string(u.fragment) + " to version " +
                                std::to_string(u.version) +
                                " does not reproduce the syncer's public state (CRC differs): reconnecting for the "
                                "full fragment");
            }
            std::lock_guard lk(mu);
            ++st.updates_received;
            latest[u.fragment] = *mine;
            cv.notify_all();
            break;
          }
          case MsgType::push_ack: {
            const PushAck a = PushAck::decode(p);
            json ev = {{"fragment", a.fragment}, {"status", push_status_name(a.status)}, {"version", a.version}};
            {
              std::lock_guard lk(mu);
              if (a.status == PushStatus::accepted) ++st.pushes_accepted;
              else ++st.pushes_refused;
              // Not merged, ever (a duplicate is a push the syncer already holds).
              if (a.fragment < notes.size() && a.status != PushStatus::accepted && a.status != PushStatus::duplicate)
                notes[a.fragment].refused = true;
              // Staleness: merges of this fragment the syncer did since the base of our push.
              const auto it = sent_base.find(a.fragment);
              if (it != sent_base.end() && a.version >= it->second) ev["staleness"] = a.version - it->second;
            }
            event("push_ack", ev);
            break;
          }
          case MsgType::merged: {
            // Before the update of that version on this connection: which push of ours it holds.
            const MergedMsg mm = MergedMsg::decode(p);
            if (mm.fragment >= layout.fragments.size()) throw ClientError("syncer sent a merge note of an unknown fragment");
            {
              std::lock_guard lk(mu);
              notes[mm.fragment].merged_version = mm.version;
              notes[mm.fragment].merged_push_base = mm.push_base;
            }
            event("merged", {{"fragment", mm.fragment}, {"version", mm.version}, {"push_base", mm.push_base}});
            break;
          }
          case MsgType::holding: {
            const Holding accepted = Holding::decode(p);
            std::vector<std::uint32_t> took;
            for (const auto q : accepted.fragments) {
              if (q >= layout.fragments.size() || !claimed[q])
                throw ClientError("syncer accepted a claim of fragment " + std::to_string(q) + " this learner did not make");
              held[q] = std::move(claimed[q]);
              claimed[q].reset();
              delivered[q] = true;
              took.push_back(q);
            }
            {
              std::lock_guard lk(mu);
              st.fragments_held += took.size();
              // Installed like a received fragment (a no-op where the learner already has that base).
              for (const auto q : took) latest[q] = *held[q];
              cv.notify_all();
            }
            event("holding", {{"fragments", took}});
            break;
          }
          case MsgType::final_cut: {
            FinalCut fc = FinalCut::decode(p);
            if (fc.fragments.size() != layout.fragments.size()) throw ClientError("final cut has the wrong shape");
            std::size_t omitted = 0;
            for (std::size_t i = 0; i < fc.fragments.size(); ++i) {
              if (fc.fragments[i].empty() && layout.fragments[i].numel > 0) {
                ++omitted;
                // Omitted: this connection delivered exactly that version.
                if (!held[i] || held[i]->version != fc.versions[i])
                  throw ClientError("final cut omits fragment " + std::to_string(i) + " at version " +
                                    std::to_string(fc.versions[i]) +
                                    ", which this connection does not hold: reconnecting for the full cut");
                fc.fragments[i] = held[i]->data;
              }
              if (fc.fragments[i].size() != layout.fragments[i].numel) throw ClientError("final cut has the wrong shape");
            }
            if (state_digest(fc.versions, fc.fragments) != fc.digest) throw ClientError("final cut digest mismatch");
            event("final_cut", {{"digest", hex(fc.digest.data(), 32)}, {"versions", fc.versions}, {"omitted", omitted}});
            std::lock_guard lk(mu);
            final_cut = std::move(fc);
            cv.notify_all();
            break;
          }
          case MsgType::init_request: {
            // The learner the syncer asked first is gone before its `init` was taken: this one is
            // asked now (only ever after a welcome that said the state was pending, once).
            if (!p.empty()) throw ClientError("malformed init_request from the syncer (non-empty payload)");
            if (!l->init_pending)
              throw ClientError("unexpected init_request: the syncer did not welcome this connection as waiting for "
                                "the run's state");
            l->init_pending = false;
            for (std::size_t q = 0; q < claimed.size(); ++q) claim_initial(q);
            {
              std::lock_guard lk(mu);
              control.emplace_back(MsgType::init, init_payload());
            }
            l->wake.cancel();
            event("init_requested");
            break;
          }
          case MsgType::error: {
            const ErrorMsg e = ErrorMsg::decode(p);
            if (e.code == kErrorInitRefused)
              throw RefusedError("the syncer at " + o.host + ":" + std::to_string(o.port) +
                                 " refused this learner's initial state (" + e.message +
                                 "): check the trainable tensors it starts from");
            throw ClientError("syncer error: " + e.message);
          }
          default: throw ClientError(std::string("unexpected ") + msg_name(m.type) + " from the syncer");
        }
      }
    } catch (...) {
      l->close();
      std::lock_guard lk(mu);
      st.connected = false;
      throw;
    }
  }

  awaitable<void> main_loop() {
    double backoff = o.backoff_initial_s;
    double last_ok = steady_now();
    for (;;) {
      bool connected = false, refused = false;
      std::string why;
      try {
        co_await session(connected);
      } catch (const RefusedError& e) {
        why = e.what();
        refused = true;
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (refused) {
        event("refused", {{"reason", why}});
        spdlog::error("sync client {}: {}; not retrying", o.learner_id, why);
        std::lock_guard lk(mu);
        failed = true;
        cv.notify_all();
        break;
      }
      {
        std::lock_guard lk(mu);
        st.connected = false;
        if (final_ack_sent && final_cut) {
          ended_after_final = true;
          cv.notify_all();
          break;
        }
        if (stopping) break;
      }
      event("disconnected", {{"reason", why}});
      if (connected) {
        last_ok = steady_now();
        backoff = o.backoff_initial_s;
      }
      if (steady_now() - last_ok > o.timeouts.reconnect_budget_s) {
        event("gave_up", {{"reconnect_budget_s", o.timeouts.reconnect_budget_s}});
        spdlog::error("sync client {}: no syncer for {} s (sync.reconnect_budget_s): giving up", o.learner_id,
                      o.timeouts.reconnect_budget_s);
        std::lock_guard lk(mu);
        failed = true;
        cv.notify_all();
        break;
      }
      asio::steady_timer t(io);
      t.expires_after(secs(backoff));
      boost::system::error_code ec;
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      backoff = std::min(backoff * 2, o.backoff_max_s);
      std::lock_guard lk(mu);
      if (stopping) break;
    }
  }

  // ---------------------------------------------------------------- training thread

  void overwrite_from(const FragmentMsg& m, std::span<const std::span<float>> tensors, float alpha, StepResult* r) {
    apply_fragment(layout, m.fragment, m.data, tensors, alpha);
    took(m, {{"alpha", alpha}});
    if (r) r->applied.push_back(AppliedFragment{m.fragment, m.version, alpha, m.data});
  }

  // sync.carry: the new global state plus the progress it does not count yet (carry.hpp). The
  // other ranks of the island are sent the result, to overwrite with.
  void carry_from(const FragmentMsg& m, const CarryNotes& seen, std::uint64_t epoch,
                  std::span<const std::span<float>> tensors, StepResult* r) {
    const std::uint32_t p = m.fragment;
    std::vector<std::span<const float>> cs(tensors.begin(), tensors.end());
    std::vector<float> local = pack_fragment(layout, p, cs);
    const CarryCase c = carry[p].apply(m.data, m.version, base[p], seen, epoch, local);
    if (c == CarryCase::refused || c == CarryCase::lost) restore_dropped(p);
    apply_fragment(layout, p, local, tensors, 1.0f);
    if (c != CarryCase::none && c != CarryCase::pending) {
      std::lock_guard lk(mu);
      notes[p] = CarryNotes{};  // that push is over; the next one starts with no notes
    }
    took(m, {{"carry", carry_case_name(c)}});
    if (r) r->applied.push_back(AppliedFragment{p, m.version, 1.0f, std::move(local)});
  }

  // A carried push that is over without a merge (refused, lost with its connection): its progress
  // stayed in θ and goes with the next push, which so covers its samples and steps too (the
  // syncer weights a push by its samples).
  void restore_dropped(std::uint32_t p) {
    samples_since[p] += out_samples[p];
    steps_since[p] += out_steps[p];
    out_samples[p] = 0;
    out_steps[p] = 0;
  }

  // A new global version of a fragment is what this learner builds on from now on.
  void took(const FragmentMsg& m, json ev) {
    const std::uint32_t p = m.fragment;
    const double now = steady_now();
    ev["fragment"] = p;
    ev["version"] = m.version;
    ev["previous"] = base_version[p];
    if (pushed_at[p] >= 0 && m.version > pushed_base[p]) {
      ev["round_latency_s"] = now - pushed_at[p];
      pushed_at[p] = -1;
    }
    base[p] = m.data;
    base_version[p] = m.version;
    have_base[p] = true;
    event("applied", ev);
  }

  // The authoritative final cut: overwrite, then acknowledge the digest of what we now hold.
  void apply_final(const FinalCut& fc, std::span<const std::span<float>> tensors, StepResult* r) {
    std::vector<std::vector<float>> mine;
    for (std::uint32_t p = 0; p < fc.fragments.size(); ++p) {
      overwrite_from(FragmentMsg{p, fc.versions[p], fc.fragments[p]}, tensors, 1.0f, r);
      std::vector<std::span<const float>> cs(tensors.begin(), tensors.end());
      mine.push_back(pack_fragment(layout, p, cs));
    }
    const auto digest = state_digest(fc.versions, mine);
    {
      std::lock_guard lk(mu);
      final_applied = true;
      final_digest = digest;
      if (!o.defer_final_ack) {
        final_ack_queued = true;
        control.emplace_back(MsgType::final_ack, FinalAck{digest}.encode());
      }
    }
    event("final_applied", {{"digest", hex(digest.data(), 32)}, {"matches", digest == fc.digest}});
    notify();
    if (r) r->finished = true;
  }

  bool wait_for_final(std::span<const std::span<float>> tensors, double timeout_s) {
    std::optional<FinalCut> fc;
    {
      std::unique_lock lk(mu);
      if (final_applied) return true;
      cv.wait_for(lk, secs(timeout_s), [&] { return failed || final_cut.has_value(); });
      if (!final_cut) return false;
      fc = *final_cut;
    }
    apply_final(*fc, tensors, nullptr);
    return true;
  }

  StepResult step(std::span<const std::span<float>> tensors, std::uint64_t samples,
                  const std::function<void()>& before_touch, std::int64_t steps_left) {
    ++step_no;
    // With carry, the last H steps' pushes are left to push_remaining(): one push to the end.
    const bool ending = o.carry && steps_left >= 0 && steps_left < static_cast<std::int64_t>(o.inner_steps);
    return advance(tensors, samples, before_touch, false, ending);
  }

  // A state of fragment p has arrived that this learner does not hold yet (call under mu).
  bool arrived(std::size_t p) const {
    return latest[p] && (!have_base[p] || latest[p]->version != base_version[p]);
  }

  // Fragments whose progress since their last push has not gone to the syncer yet.
  std::vector<std::uint32_t> unpushed() const {
    std::vector<std::uint32_t> left;
    for (std::uint32_t p = 0; p < layout.fragments.size(); ++p)
      if (have_base[p] && steps_since[p] > 0) left.push_back(p);
    return left;
  }

  bool push_remaining(std::span<const std::span<float>> tensors, double timeout_s,
                      const std::function<void()>& before_touch, StepResult* out) {
    if (!o.carry) return true;
    const double deadline = steady_now() + timeout_s;
    for (;;) {
      if (unpushed().empty()) return true;
      {
        std::unique_lock lk(mu);
        // A fragment whose push is outstanding waits for its merge (a new version; a refusal or a
        // lost connection is seen by polling, as step() sees it).
        cv.wait_for(lk, secs(std::min(0.25, std::max(0.0, deadline - steady_now()))), [&] {
          if (failed || final_cut) return true;
          for (std::size_t p = 0; p < latest.size(); ++p)
            if (arrived(p)) return true;
          return false;
        });
        if (failed || final_cut) return false;
      }
      StepResult r = advance(tensors, 0, before_touch, true, false);
      if (out) {
        out->applied.insert(out->applied.end(), r.applied.begin(), r.applied.end());
        out->pushed.insert(out->pushed.end(), r.pushed.begin(), r.pushed.end());
      }
      if (r.failed) return false;
      const auto left = unpushed();
      if (left.empty()) return true;
      if (steady_now() >= deadline) {
        std::uint64_t steps = 0;
        for (std::uint32_t p : left) steps = std::max(steps, steps_since[p]);
        spdlog::warn("sync client {}: the last {} inner steps were not pushed within {} s (their fragments' earlier "
                     "pushes did not merge); the final cut will not hold them",
                     o.learner_id, steps, timeout_s);
        event("unpushed", {{"fragments", left}, {"steps", steps}});
        return false;
      }
    }
  }

  // One inner step (`flushing`: none; the island's steps are over and only the progress not
  // pushed yet is pushed, as soon as its fragment has no push outstanding). `ending`: fewer
  // than H steps are left, so nothing is pushed (push_remaining pushes it all at the end).
  StepResult advance(std::span<const std::span<float>> tensors, std::uint64_t samples,
                     const std::function<void()>& before_touch, bool flushing, bool ending) {
    StepResult r;
    std::vector<std::optional<FragmentMsg>> fresh(layout.fragments.size());
    std::optional<FinalCut> fc;
    std::vector<CarryNotes> seen;
    std::uint64_t epoch = 0;
    {
      std::lock_guard lk(mu);
      if (o.carry) {
        seen = notes;
        epoch = st.connects;
      }
      st.steps = step_no;
      r.failed = failed;
      if (final_cut && !final_applied) fc = *final_cut;
      else if (final_applied) r.finished = true;
      for (std::size_t p = 0; p < latest.size(); ++p)
        if (arrived(p)) fresh[p] = std::move(latest[p]);
    }
    if (r.finished) return r;
    // Decide first whether this step reads or writes the tensors at all, so a caller that
    // stages them (GPU -> host) copies them only when needed (and before any access).
    const auto nf = static_cast<std::uint32_t>(layout.fragments.size());
    bool touch = fc.has_value();
    // Due after this step, which brings the fragment's steps since its last push to `since`. With
    // carry a fragment pushes H steps after its last push (the first on the staggered grid): a push
    // that waited for a merge moves its next one along, so every push covers at least H steps.
    const auto is_due = [&](std::uint32_t p, std::uint64_t since) {
      if (flushing) return since > 0;
      if (o.carry && pushed_once[p]) return since >= o.inner_steps;
      return fragment_due(p, nf, o.inner_steps, step_no);
    };
    for (std::uint32_t p = 0; p < nf && !touch; ++p)
      touch = fresh[p].has_value() ||
              (have_base[p] && !ending && (deferred[p] || is_due(p, steps_since[p] + (flushing ? 0 : 1))));
    if (touch && before_touch) before_touch();
    if (fc) {
      apply_final(*fc, tensors, &r);
      return r;
    }
    for (std::size_t p = 0; p < fresh.size(); ++p) {
      if (!fresh[p]) continue;
      if (o.carry && have_base[p]) carry_from(*fresh[p], seen[p], epoch, tensors, &r);
      else overwrite_from(*fresh[p], tensors, have_base[p] ? o.alpha : 1.0f, &r);
    }
    // A push refused, or sent on a connection that has ended, with no new state: its progress
    // stays in the weights and goes with the next push (which may be waiting for it).
    for (std::uint32_t p = 0; p < nf && o.carry; ++p) {
      if (fresh[p] || !carry[p].outstanding()) continue;
      const CarryCase c = carry_case(true, carry[p].push_base(), seen[p], epoch, base_version[p]);
      if (c != CarryCase::refused && c != CarryCase::lost) continue;
      carry[p].drop();
      restore_dropped(p);
      {
        std::lock_guard lk(mu);
        notes[p] = CarryNotes{};
      }
      event("push_dropped", {{"fragment", p}, {"reason", carry_case_name(c)}});
    }
    std::vector<RawPush> due;
    for (std::uint32_t p = 0; p < nf; ++p) {
      if (!flushing) {
        samples_since[p] += samples;
        ++steps_since[p];
      }
      if (!have_base[p] || ending) continue;
      const bool on_time = is_due(p, steps_since[p]);
      if (o.carry) {
        // One push outstanding per fragment: one that falls due meanwhile goes once it has merged.
        if (carry[p].outstanding()) {
          if (on_time && !deferred[p] && !flushing) {
            deferred[p] = true;
            {
              std::lock_guard lk(mu);
              ++st.pushes_deferred;
            }
            event("push_deferred", {{"fragment", p}, {"outstanding_base", carry[p].push_base()}});
          }
          continue;
        }
        if (!on_time && !deferred[p]) continue;
        deferred[p] = false;
      } else if (!on_time) {
        continue;
      }
      std::vector<std::span<const float>> cs(tensors.begin(), tensors.end());
      std::vector<float> local = pack_fragment(layout, p, cs);
      for (std::size_t k = 0; k < local.size(); ++k) local[k] = base[p][k] - local[k];
      if (!all_finite(local)) {
        event("push_skipped", {{"fragment", p}, {"reason", "non-finite pseudo-gradient"}});
        spdlog::error("sync client {}: fragment {} has non-finite weights; not pushing", o.learner_id, p);
        continue;
      }
      RawPush rp{p, base_version[p], samples_since[p], static_cast<std::uint32_t>(steps_since[p]), {}, std::nullopt};
      if (o.carry) {
        // Error feedback: the reference is the state the syncer will take this push for, base − q(δ),
        // so what the quantisation dropped stays in θ − ref and goes with the next push.
        rp.encoded = Push::from_delta_quantised(uplink_encoding(o.uplink), p, rp.base_version, rp.samples,
                                                rp.inner_steps, local, o.quant_block);
        std::vector<float> sent = rp.encoded->delta();
        for (std::size_t k = 0; k < sent.size(); ++k) sent[k] = base[p][k] - sent[k];
        carry[p].pushed(base_version[p], sent);
      } else {
        rp.delta = std::move(local);
      }
      if (o.carry) {
        out_samples[p] = samples_since[p];
        out_steps[p] = steps_since[p];
        pushed_once[p] = true;
      }
      samples_since[p] = 0;
      steps_since[p] = 0;
      pushed_at[p] = steady_now();
      pushed_base[p] = rp.base_version;
      due.push_back(std::move(rp));
      r.pushed.push_back(p);
    }
    if (!due.empty()) {
      // Handed over together, so the communication thread picks among all of this step's pushes.
      {
        std::lock_guard lk(mu);
        for (auto& rp : due) {
          if (o.carry) notes[rp.fragment] = CarryNotes{};
          push_queue[rp.fragment] = std::move(rp);
        }
      }
      notify();
    }
    return r;
  }

  bool wait_for_global(std::span<const std::span<float>> tensors, double timeout_s) {
    std::vector<FragmentMsg> got;
    {
      std::unique_lock lk(mu);
      const bool ok = cv.wait_for(lk, secs(timeout_s), [&] {
        if (failed) return true;
        for (const auto& l : latest)
          if (!l) return false;
        return true;
      });
      if (!ok || failed) return false;
      for (auto& l : latest) got.push_back(std::move(*l));
      for (auto& l : latest) l.reset();
    }
    for (const auto& m : got) overwrite_from(m, tensors, 1.0f, nullptr);
    return true;
  }
};

SyncClient::SyncClient(ClientOptions options, Layout layout)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(layout))) {}

SyncClient::~SyncClient() { close(0.0); }

void SyncClient::start(std::span<const std::span<const float>> initial) {
  if (impl_->thread.joinable()) throw Error("sync client already started");
  if (initial.size() != impl_->layout.tensors.size()) throw Error("sync client: wrong number of initial tensors");
  for (std::size_t i = 0; i < initial.size(); ++i) {
    if (initial[i].size() != impl_->layout.tensors[i].numel)
      throw Error("sync client: tensor " + impl_->layout.tensors[i].name + " has the wrong length");
    impl_->initial.insert(impl_->initial.end(), initial[i].begin(), initial[i].end());
  }
  impl_->event("start", {{"fragments", impl_->layout.fragments.size()}, {"numel", impl_->layout.total_numel()},
                         {"syncer", impl_->o.host + ":" + std::to_string(impl_->o.port)}});
  asio::co_spawn(impl_->io, impl_->main_loop(), asio::detached);
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

bool SyncClient::wait_for_global(std::span<const std::span<float>> tensors, double timeout_s) {
  return impl_->wait_for_global(tensors, timeout_s);
}

StepResult SyncClient::step(std::span<const std::span<float>> tensors, std::uint64_t samples,
                            const std::function<void()>& before_touch, std::int64_t steps_left) {
  return impl_->step(tensors, samples, before_touch, steps_left);
}

void SyncClient::close(double timeout_s) {
  if (!impl_->thread.joinable()) return;
  {
    // After the final ack, wait (bounded) until the syncer closes the connection: closing
    // our end first while its frames are still unread would reset the connection and could
    // discard the acknowledgement before the syncer has read it.
    std::unique_lock lk(impl_->mu);
    if (impl_->final_ack_queued)
      impl_->cv.wait_for(lk, secs(timeout_s), [&] { return impl_->ended_after_final || impl_->failed; });
    impl_->stopping = true;
  }
  asio::post(impl_->io, [this] {
    if (impl_->link) impl_->link->close();
    impl_->io.stop();
  });
  impl_->thread.join();
  const ClientStats s = stats();
  impl_->event("closed", {{"steps", impl_->step_no}, {"connects", s.connects}, {"bytes_sent", s.bytes_sent},
                          {"bytes_received", s.bytes_received}, {"pushes_sent", s.pushes_sent},
                          {"pushes_accepted", s.pushes_accepted}, {"fragments_received", s.fragments_received},
                          {"updates_received", s.updates_received}, {"fragments_held", s.fragments_held},
                          {"inits_sent", s.inits_sent}, {"init_bytes", s.init_bytes},
                          {"pushes_deferred", s.pushes_deferred}, {"numel", impl_->layout.total_numel()}});
}

bool SyncClient::push_remaining(std::span<const std::span<float>> tensors, double timeout_s,
                                const std::function<void()>& before_touch, StepResult* out) {
  return impl_->push_remaining(tensors, timeout_s, before_touch, out);
}

void SyncClient::finish_local(std::uint64_t step, std::uint64_t samples) {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->local_done) return;
    impl_->local_done = Heartbeat{step, samples};
  }
  impl_->event("done", {{"step", step}, {"samples", samples}});
  impl_->notify();
}

bool SyncClient::wait_for_final(std::span<const std::span<float>> tensors, double timeout_s) {
  return impl_->wait_for_final(tensors, timeout_s);
}

void SyncClient::acknowledge_final() {
  {
    std::lock_guard lk(impl_->mu);
    if (!impl_->final_applied || impl_->final_ack_queued) return;
    impl_->final_ack_queued = true;
    impl_->control.emplace_back(MsgType::final_ack, FinalAck{impl_->final_digest}.encode());
  }
  impl_->notify();
}

bool SyncClient::final_cut_available() const {
  std::lock_guard lk(impl_->mu);
  return impl_->final_cut.has_value();
}

bool SyncClient::gave_up() const {
  std::lock_guard lk(impl_->mu);
  return impl_->failed;
}

ClientStats SyncClient::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->st;
}

const Layout& SyncClient::layout() const { return impl_->layout; }

}  // namespace yeto::sync
