#include <utility>  // before Boost.Asio: its awaitable.hpp uses std::exchange (toolchain gotcha 3)

#include "sync/syncer.hpp"

#include <boost/asio.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>

#include <array>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sync/clock.hpp"
#include "sync/lanes.hpp"
#include "sync/merge.hpp"
#include "sync/outqueue.hpp"
#include "sync/pace.hpp"
#include "sync/protocol.hpp"
#include "sync/state.hpp"
#include "sync/tape.hpp"

namespace yeto::sync {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

// A durable write (checkpoint, tape, final cut, marker) failed twice: the syncer stops with
// exit code 1 before anything of the failed transition is visible to a learner, and a restart
// resumes from the last durable state. Thrown to unwind the handler that was running.
class PersistFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr std::uint64_t kNotSent = ~std::uint64_t{0};

// Read buffer of a peer that has not authenticated: enough for a challenge-sized control frame.
constexpr std::size_t kStrangerBuffer = 4096 + kHeaderBytes;
constexpr std::size_t kLearnerBuffer = 1 << 16;
// File descriptors kept free for the syncer's own files (checkpoint and marker temporaries,
// directory syncs, the tape's rotation, the log) whatever the peers do.
constexpr long kOwnFdReserve = 12;
// Bulk frames of one connection opened at once on the frame workers.
constexpr std::size_t kBulkInFlight = 2;

// A frame waiting in a connection's send queue: ready bytes (the handshake, refusals), or a
// plaintext the writer seals when the frame reaches the front of the queue. The writer is the
// only one to seal on a connection, so the nonces follow the send order whichever thread seals.
// A plaintext made on first use by whichever thread seals it first (a full fragment: encoding a
// large fragment is kept off the I/O thread), shared by every connection it goes to.
struct LazyPayload {
  std::size_t size = 0;  // the payload's size, known before it is made
  std::function<std::string()> make;
  std::once_flag once;
  std::string value;
  const std::string& get() {
    std::call_once(once, [this] {
      value = make();
      make = nullptr;
    });
    return value;
  }
};

struct Outgoing {
  std::string frame;
  MsgType type = MsgType::error;
  std::shared_ptr<const std::string> plain;  // set: still to be sealed
  std::shared_ptr<LazyPayload> lazy;         // set: still to be made and sealed
  std::uint32_t fragment = kNoFragment;      // an `update` or `fragment` frame's fragment
  std::size_t bytes() const { return plain ? plain->size() : lazy ? lazy->size : frame.size(); }
};

struct Conn {
  explicit Conn(tcp::socket s, std::uint64_t run_id, std::uint64_t serial)
      : sock(std::move(s)), wake(sock.get_executor()), bulk_wake(sock.get_executor()), dec(run_id, kControlCap),
        serial(serial) {
    wake.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    auto ep = sock.remote_endpoint(ec);
    address = ec ? "?" : ep.address().to_string();
    peer = ec ? "?" : address + ":" + std::to_string(ep.port());
  }
  tcp::socket sock;
  asio::steady_timer wake;
  asio::steady_timer bulk_wake;  // a bulk frame of this connection was handled
  FrameDecoder dec;
  std::uint64_t serial;  // accept order: the oldest stranger is dropped first
  std::string address;
  std::string peer;
  Nonce server_nonce{};
  std::optional<Session> session;
  std::string learner_id;  // set once authenticated
  // Per fragment, the version of the public state this connection has been sent (kNotSent:
  // none yet). TCP keeps the order, so it is what the learner holds once it has read that far:
  // an update goes only to a connection at exactly the update's base version, every other one
  // gets the full fragment.
  std::vector<std::uint64_t> sent;
  // Welcomed into an initialised run: the catch-up (and, once finishing, the final cut) waits
  // for the learner's `holds`, so nothing it already holds is sent again.
  bool awaiting_holds = false;
  // Asked for `init` (welcomed with InitAsk::send, or sent `init_request`) before the run had
  // state: its `init` is the run's state or, when another came first, its claim of version 0
  // (the catch-up waits for it).
  bool awaiting_init = false;
  // Welcomed with InitAsk::pending (the run had no state, another learner was asked for it) and
  // not asked since: its `holds` waits in parked_claims until the state exists.
  bool parked = false;
  std::optional<Holds> parked_claims;
  std::uint64_t layout_fp = 0;  // the hello's layout fingerprint
  std::deque<Outgoing> outq;
  // Bulk frames of this connection being opened on the frame workers, and the frames read behind
  // them that must wait until they are handled (anything but a push or a heartbeat, with its
  // receive sequence number): a push of a small fragment is handled while the learner's large
  // push before it is still being opened.
  std::size_t bulk_pending = 0;
  std::deque<std::tuple<MsgType, std::string, std::uint64_t>> held;
  // Per fragment, the receive sequence number of the newest push handled: an older push that
  // finishes opening later is superseded, as a second push replaces the first in a round.
  std::vector<std::uint64_t> push_seq;
  bool closed = false;
  // Refused with an `error` frame: nothing more is read, and the writer closes the connection
  // once the frame is out (closing at once would drop it unsent).
  bool refusing = false;
  bool accounted = false;  // a stranger that was refused or dropped (counted where that happened)
};
using ConnPtr = std::shared_ptr<Conn>;

// A push's delta, decoded and checked (on the worker pool for a bulk push): the values, or why
// they are refused.
struct CheckedDelta {
  std::vector<float> values;
  std::string error;  // non-empty: the push is refused with this reason
};
CheckedDelta check_delta(const Push& m) {
  CheckedDelta d;
  try {
    d.values = m.delta();
  } catch (const WireError& e) {
    d.error = std::string("invalid delta: ") + e.what();
    return d;
  }
  if (!all_finite(d.values)) {
    d.values.clear();
    d.error = "invalid delta: NaN or Inf values";
  }
  return d;
}
struct PreparedPush {
  Push msg;  // without its body, which is decoded into delta
  CheckedDelta delta;
};
PreparedPush prepare_push(std::string_view payload) {
  PreparedPush p;
  p.msg = Push::decode(payload);
  p.delta = check_delta(p.msg);
  p.msg.body = std::string();
  return p;
}
// A bulk frame opened on the worker pool.
struct Opened {
  std::string payload;
  std::size_t size = 0;  // the plaintext's size
  std::optional<PreparedPush> push;
};

struct PendingPush {
  std::string learner;
  std::uint64_t base_version = 0;
  std::uint64_t samples = 0;
  std::uint32_t inner_steps = 0;
  std::vector<float> delta;
  double arrived = 0;
};

struct Round {
  std::vector<PendingPush> pushes;
  double first = 0, last = 0;
};

}  // namespace

struct Syncer::Impl {
  SyncerOptions o;
  Key key;
  std::uint64_t run_id;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::uint16_t bound_port = 0;
  std::unique_ptr<Tape> tape;
  SyncerState st;
  std::vector<Round> rounds;
  // Each learner's push rhythm, from which a round predicts whom to wait for (in memory only).
  Pacer pacer{PaceOptions{o.timeouts.grace_min_s, o.timeouts.grace_max_s, o.timeouts.grace_factor,
                          o.timeouts.grace_fraction, o.inner_steps, o.timeouts.heartbeat_s / 2}};
  std::set<ConnPtr> conns;
  double started = steady_now();
  std::uint64_t merges_since_ckpt = 0;
  // terminal handshake
  bool finishing = false;
  double final_started = 0;
  std::string final_reason;
  FinalCut final_cut;
  std::set<std::string> expect_acks, acked;
  // Learners that reached their own step budget (`done`): they push no more, so rounds do not
  // wait for them; when every live learner is done the syncer takes the final cut. Not
  // checkpointed: a learner resends `done` on every connection.
  std::set<std::string> done_learners;
  bool missing_logged = false;
  // Learners lost without `leave` (timed out: crashed, killed or cut off), by the time they
  // were lost: a restarted island comes back as the same learner, so the learners-done cut
  // waits for them up to expect_window_s (sync.join_timeout_s). Not checkpointed.
  std::map<std::string, double> lost_since;
  std::set<std::string> awaiting_logged;  // lost learners the cut is waiting for (taped)
  std::set<std::string> given_up;         // lost learners the cut no longer waits for
  bool lost_noted_at_cut = false;
  int exit_code = 0;
  bool done = false;
  bool failed = false;  // a durable write failed: nothing more is persisted or made visible
  // While the run has no state: the one connection asked for `init` (null: none asked yet). Every
  // other learner welcomed meanwhile is parked; when this one goes, is silent for
  // learner_timeout_s or has its `init` refused, the oldest parked learner is asked instead
  // (ask_for_init, on every tick).
  ConnPtr init_asked;

  // Strangers: connections not authenticated yet, by accept order, and per source address.
  std::map<std::uint64_t, ConnPtr> strangers;
  std::map<std::string, std::size_t> strangers_by_address;
  std::uint64_t next_serial = 0;
  std::size_t stranger_cap = 0;     // sync.max_pending_peers, shrunk to the fd budget
  std::size_t connection_cap = 0;   // every connection together, from the fd limit
  double accept_tokens = 0, accept_refill_at = 0;
  // Refused strangers per interval: the first reject_log_burst one by one, the rest counted.
  double reject_window_start = 0;
  std::uint64_t reject_window_logged = 0;
  std::map<std::string, std::uint64_t> reject_window_counts;
  std::uint64_t strangers_dropped = 0;  // dropped to make room (counted in the summary)
  std::uint64_t strangers_left = 0;     // closed by the peer before authenticating
  // Merges, and the sealing and opening of bulk frames, of o.offload_bytes or more, each on a lane
  // of one thread per core (o.worker_threads), so one large fragment's work never holds up the I/O
  // thread and the other fragments. Smaller work (under 1 MiB by default: a merge of a fragment
  // under 256 K values, a small frame) stays on the I/O thread, where it costs less than the
  // hand-over and never queues behind a large fragment's work. Sealing and opening have a lane of
  // their own: a connection whose bulk frame is being opened reads nothing else meanwhile, so its
  // next frames (a small fragment's push) must not queue behind a long merge. The checkpoint off
  // the I/O thread (checkpoint_every = 1): a large fragment's data file on a bulk lane, a small
  // fragment's on a lane of its own (never behind a large one's), and the manifest, one write at a
  // time. The bulk lanes run o.bulk_nice nice steps below the I/O thread (sync/lanes.hpp). Joined
  // first when the syncer goes (their jobs read the state).
  SyncerLanes lanes{o.worker_threads, o.bulk_nice, o.offload_bytes};
  // Per fragment, the version and data-file CRC the last durable manifest names.
  std::vector<std::uint64_t> durable_version;
  std::vector<std::uint32_t> durable_crc;

  std::filesystem::path ckpt_path() const { return o.state_dir / "checkpoint.bin"; }

  // The state directory's lock: an exclusive flock held for the syncer's lifetime (the kernel
  // drops it when the process ends, kill -9 included). The file names its holder.
  int lock_fd = -1;
  std::filesystem::path lock_path() const { return o.state_dir / "syncer.lock"; }

  explicit Impl(SyncerOptions opts) : o(std::move(opts)) {
    o.validate();
    key = run_key_from_secret(o.run_secret);
    run_id = run_id_from_name(o.run_name);
    std::filesystem::create_directories(o.state_dir);
    lock_state_dir();  // before the tape, the checkpoint or the port file is touched
    if (const std::size_t n = remove_stale_temporaries(o.state_dir, 1))
      spdlog::info("syncer: removed {} temporary file(s) left by an interrupted write in {}", n, o.state_dir.string());
    tape = std::make_unique<Tape>(o.state_dir / "tape.jsonl");
    if (tape->opened().repaired) tape->write("tape_repair", -1, -1, {}, {{"note", "a torn last record was cut"}});
    if (std::filesystem::exists(ckpt_path())) restore();
    else tape->write("start", -1, -1, {}, {{"run_id", o.run_name}});
  }

  ~Impl() {
    lanes.join();
    if (lock_fd >= 0) ::close(lock_fd);
  }

  // A second syncer on the same state would append to the live tape, overwrite `port` and, on
  // its way out, write a final cut into the live run: it is refused before it changes a file.
  void lock_state_dir() {
    const auto path = lock_path();
    lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0)
      throw Error("syncer: cannot open the state directory's lock file " + path.string() + ": " +
                  std::strerror(errno));
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder(256, '\0');
      const ssize_t n = ::pread(lock_fd, holder.data(), holder.size(), 0);
      holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      ::close(lock_fd);
      lock_fd = -1;
      if (err == EWOULDBLOCK)
        throw Error("syncer: the state directory " + o.state_dir.string() + " belongs to a running syncer (" +
                        (holder.empty() ? std::string("its holder has not said who it is yet") : holder) +
                        "; lock " + path.string() +
                        "). Stop that syncer first, or give this one its own --state-dir.",
                    ExitCode::usage);
      throw Error("syncer: cannot lock " + path.string() + ": " + std::strerror(err));
    }
    write_lock_holder("");
  }

  // "pid N[, listening on HOST:PORT]" into the lock file (only its holder writes it).
  void write_lock_holder(const std::string& address) {
    const std::string text =
        "pid " + std::to_string(::getpid()) + (address.empty() ? "" : ", listening on " + address) + "\n";
    if (::ftruncate(lock_fd, 0) != 0 ||
        ::pwrite(lock_fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      spdlog::warn("syncer: could not note the holder in {}: {}", lock_path().string(), std::strerror(errno));
  }

  void restore() {
    st = load_checkpoint(ckpt_path());
    const TapeSummary& ts = tape->opened();
    const double now = steady_now();
    for (auto& [id, r] : st.registry) r.last_seen = now;  // live learners get a full timeout to reconnect
    std::vector<std::uint64_t> versions;
    for (std::size_t p = 0; p < st.fragments.size(); ++p) {
      const auto& f = st.fragments[p];
      versions.push_back(f.version);
      const auto it = ts.merged.find(static_cast<std::int64_t>(p));
      const std::uint64_t tv = it == ts.merged.end() ? 0 : it->second;
      if (tv + 1 == f.version && !f.last_merge_event.empty()) {
        // The crash came between the checkpoint and the tape record: restore the record.
        json rec = json::parse(f.last_merge_event);
        rec["recovered"] = true;
        tape->write_raw(rec);
      } else if (tv > f.version) {
        // Merges after the last checkpoint are lost with the process: say so on the tape.
        tape->write("rollback", static_cast<std::int64_t>(p), static_cast<std::int64_t>(f.version), {},
                    {{"from_version", tv}});
      } else if (tv != f.version) {
        tape->write("tape_gap", static_cast<std::int64_t>(p), static_cast<std::int64_t>(f.version), {},
                    {{"tape_version", tv}});
      }
    }
    rounds.assign(st.fragments.size(), Round{});
    durable_crc = checkpoint_data_crcs(ckpt_path());
    if (durable_crc.size() == st.fragments.size()) {
      durable_version = versions;
    } else {
      durable_crc.clear();  // an older format: every fragment's data file is written now
      checkpoint();
    }
    if (const std::size_t n = remove_unreferenced_fragment_data(o.state_dir, st))
      spdlog::info("syncer: removed {} fragment data file(s) no checkpoint names (an interrupted checkpoint)", n);
    tape->write("restart", -1, -1, live_ids(),
                {{"versions", versions}, {"outer_steps", st.outer_steps}, {"samples", st.samples_merged},
                 {"finished", st.finished}});
    spdlog::info("syncer: restored {} (outer step {}, {} fragments)", ckpt_path().string(), st.outer_steps,
                 st.fragments.size());
  }

  std::vector<std::string> live_ids() const {
    std::vector<std::string> v;
    for (const auto& [id, r] : st.registry)
      if (r.live) v.push_back(id);
    return v;
  }
  // Live learners still training (not done): those a round waits for.
  std::vector<std::string> active_ids() const {
    std::vector<std::string> v;
    for (const auto& [id, r] : st.registry)
      if (r.live && !done_learners.count(id)) v.push_back(id);
    return v;
  }

  // ---------------------------------------------------------------- sending

  void send_raw(const ConnPtr& c, std::string frame) {
    if (c->closed) return;
    c->outq.push_back(Outgoing{std::move(frame), MsgType::error, nullptr, nullptr});
    c->wake.cancel();
  }
  // Queued as plaintext and sealed by the connection's writer (a bulk frame on the worker pool):
  // one plaintext shared by every connection it goes to.
  void send(const ConnPtr& c, MsgType t, std::shared_ptr<const std::string> payload) {
    if (c->closed || !c->session) return;
    c->outq.push_back(Outgoing{{}, t, std::move(payload), nullptr});
    c->wake.cancel();
  }
  // A merge's update or full fragment for fragment p: a small one goes ahead of the bulk updates
  // and fragments of other fragments still waiting in the queue (overtake_position).
  void send_state(const ConnPtr& c, MsgType t, std::uint32_t p, std::shared_ptr<const std::string> plain,
                  std::shared_ptr<LazyPayload> lazy) {
    if (c->closed || !c->session) return;
    Outgoing out{{}, t, std::move(plain), std::move(lazy), p};
    const bool small = out.bytes() < o.offload_bytes;
    queue_for_fragment(c, p, std::move(out), small);
    note_sent(c, p);
  }
  // Queues a frame that goes with fragment p's new state: where overtake_position says when it
  // may overtake (a small state, a `merged` note), else at the back.
  void queue_for_fragment(const ConnPtr& c, std::uint32_t p, Outgoing out, bool overtake) {
    const auto pos = overtake ? overtake_position(c->outq, p, o.offload_bytes, [](const Outgoing& f) { return f.bytes(); })
                              : c->outq.size();
    c->outq.insert(c->outq.begin() + static_cast<std::ptrdiff_t>(pos), std::move(out));
    c->wake.cancel();
  }
  void send(const ConnPtr& c, MsgType t, std::string payload) {
    send(c, t, std::make_shared<const std::string>(std::move(payload)));
  }
  // Sends the unsealed refusal `e`, then drops the peer.
  void refuse(const ConnPtr& c, const ErrorMsg& e) {
    send_raw(c, encode_frame(MsgType::error, run_id, e.encode()));
    c->refusing = true;
    c->wake.cancel();
  }
  void close(const ConnPtr& c) {
    if (c->closed) return;
    c->closed = true;
    boost::system::error_code ec;
    c->sock.shutdown(tcp::socket::shutdown_both, ec);
    c->sock.close(ec);
    c->wake.cancel();
    c->bulk_wake.cancel();
  }
  // A refused message or peer: logged and taped, never touching merge state. Strangers are
  // logged one by one only up to the interval's burst; the rest are counted by kind of reason
  // into the interval's summary (flush_reject_summary), so a flood grows the log and the tape
  // by a bounded amount.
  void reject(const ConnPtr& c, const std::string& reason, std::int64_t fragment = -1) {
    if (failed) return;
    c->accounted = true;
    if (c->learner_id.empty() && !c->session) {
      if (reject_window_logged >= o.reject_log_burst) {
        ++reject_window_counts[reason_kind(reason)];
        return;
      }
      ++reject_window_logged;
    }
    spdlog::warn("syncer: rejected {} ({}): {}", c->peer, c->learner_id.empty() ? "unauthenticated" : c->learner_id,
                 reason);
    std::vector<std::string> who;
    if (!c->learner_id.empty()) who.push_back(c->learner_id);
    taped("reject", fragment, fragment >= 0 && fragment < static_cast<std::int64_t>(st.fragments.size())
                                  ? static_cast<std::int64_t>(st.fragments[fragment].version)
                                  : -1,
          who, {{"reason", reason}, {"peer", c->peer}});
  }

  // "protocol: bad magic (...)" -> "protocol: bad magic": the reason without its details.
  static std::string reason_kind(const std::string& reason) {
    std::size_t end = reason.find_first_of("(0123456789");
    std::string k = reason.substr(0, end == std::string::npos ? reason.size() : end);
    while (!k.empty() && (k.back() == ' ' || k.back() == ':')) k.pop_back();
    return k.size() > 80 ? k.substr(0, 80) : k;
  }

  void flush_reject_summary(double now, bool force = false) {
    if (!force && now - reject_window_start < o.reject_log_interval_s) return;
    std::uint64_t n = 0;
    for (const auto& [k, v] : reject_window_counts) n += v;
    if (n > 0 || strangers_dropped > 0 || strangers_left > 0) {
      json by = json::object();
      for (const auto& [k, v] : reject_window_counts) by[k] = v;
      spdlog::warn("syncer: in the last {:.0f} s, {} more unauthenticated peer(s) refused (not logged one by one), "
                   "{} dropped to make room, {} left before authenticating: {}",
                   now - reject_window_start, n, strangers_dropped, strangers_left, by.dump());
      taped("reject_summary", -1, -1, {},
            {{"refused", n}, {"dropped", strangers_dropped}, {"left", strangers_left}, {"by_reason", by},
             {"interval_s", now - reject_window_start}, {"logged_one_by_one", reject_window_logged}});
    }
    reject_window_start = now;
    reject_window_logged = 0;
    reject_window_counts.clear();
    strangers_dropped = 0;
    strangers_left = 0;
  }

  // ---------------------------------------------------------------- durable writes

  // Runs a durable write. A failure is retried once after the strangers' connections are
  // closed (an fd limit reached by peers frees at once; a full disk does not); a second
  // failure stops the syncer (fatal).
  template <class F>
  void persist(const char* what, F&& write) {
    if (failed) throw PersistFailure(what);
    try {
      write();
      return;
    } catch (const std::exception& e) {
      const std::size_t shed = shed_strangers();
      spdlog::warn("syncer: {} failed ({}); retrying once after closing {} unauthenticated connection(s)", what,
                   e.what(), shed);
    }
    try {
      write();
    } catch (const std::exception& e) {
      fatal(std::string(what) + ": " + e.what());
    }
  }

  [[noreturn]] void fatal(const std::string& why) {
    failed = true;
    spdlog::critical("syncer: cannot persist its state ({}). Stopping with exit code 1 before anything unsaved "
                     "reaches a learner; restarted, the syncer resumes from its last checkpoint ({}).",
                     why, ckpt_path().string());
    shutdown(static_cast<int>(ExitCode::failure));
    throw PersistFailure(why);
  }

  json taped(const std::string& event, std::int64_t fragment, std::int64_t version,
             const std::vector<std::string>& learners, json extra = json::object()) {
    json out;
    persist("writing the event tape", [&] { out = tape->write(event, fragment, version, learners, extra); });
    return out;
  }
  void taped_raw(const json& record) {
    persist("writing the event tape", [&] { tape->write_raw(record); });
  }

  // Closes every connection that has not authenticated; returns how many.
  std::size_t shed_strangers() {
    std::size_t n = 0;
    for (const auto& [serial, c] : std::map<std::uint64_t, ConnPtr>(strangers)) {
      drop_stranger(c);
      ++n;
    }
    return n;
  }
  void add_stranger(const ConnPtr& c) {
    strangers.emplace(c->serial, c);
    ++strangers_by_address[c->address];
  }
  void forget_stranger(const ConnPtr& c) {
    if (strangers.erase(c->serial) == 0) return;
    auto it = strangers_by_address.find(c->address);
    if (it != strangers_by_address.end() && --it->second == 0) strangers_by_address.erase(it);
  }
  void drop_stranger(const ConnPtr& c) {
    c->accounted = true;
    forget_stranger(c);
    ++strangers_dropped;
    close(c);
  }

  // The public state of fragment p: what every learner holds at its version.
  const std::vector<float>& public_state(std::uint32_t p) const { return st.fragments[p].public_values(); }
  // Fragment p's full public state as a payload made when its first frame is sealed: on the
  // frame workers for a bulk fragment, so a catch-up of a large fragment is never encoded on the
  // I/O thread. It holds the version's buffer, which later merges do not change.
  std::shared_ptr<LazyPayload> fragment_payload(std::uint32_t p) const {
    const FragmentState& f = st.fragments[p];
    auto lazy = std::make_shared<LazyPayload>();
    lazy->size = 4 + 8 + 8 + f.params->size() * sizeof(float);
    lazy->make = [p, v = f.version, values = f.pub ? f.pub : f.params] { return FragmentMsg::encode(p, v, *values); };
    return lazy;
  }
  void note_sent(const ConnPtr& c, std::uint32_t p) {
    if (c->sent.size() < st.fragments.size()) c->sent.resize(st.fragments.size(), kNotSent);
    c->sent[p] = st.fragments[p].version;
  }
  // The full public state of fragment p (catch-up, a refused push, the f32 downlink).
  void send_fragment(const ConnPtr& c, std::uint32_t p, std::shared_ptr<LazyPayload> payload = nullptr) {
    if (c->closed || !c->session) return;
    c->outq.push_back(
        Outgoing{{}, MsgType::fragment, nullptr, payload ? std::move(payload) : fragment_payload(p), p});
    c->wake.cancel();
    note_sent(c, p);
  }
  // A push refused as too stale or ahead of the syncer: the learner needs the current version,
  // which is already on its way when this connection was sent it (every connection gets the
  // full fragments after `welcome` and every merge's update or fragment). A second copy would
  // only queue behind the first and keep the learner stale; it is sent only when the connection
  // has not been sent the current version.
  void resend_if_missing(const ConnPtr& c, std::uint32_t p) {
    if (p < c->sent.size() && c->sent[p] == st.fragments[p].version) return;
    send_fragment(c, p);
  }
  // After a merge of fragment p: the q4 update (when there is one) to every connection that holds
  // exactly its base version, the full public state to every other.
  bool holds_base(const ConnPtr& c, std::uint32_t p) const {
    return p < c->sent.size() && c->sent[p] + 1 == st.fragments[p].version;
  }
  void broadcast_fragment(std::uint32_t p, std::shared_ptr<const std::string> update = nullptr) {
    std::shared_ptr<LazyPayload> full;
    for (const auto& c : conns) {
      if (!c->session || c->closed) continue;
      if (update && holds_base(c, p)) {
        send_state(c, MsgType::update, p, update, nullptr);
        continue;
      }
      if (!full) full = fragment_payload(p);
      send_state(c, MsgType::fragment, p, nullptr, full);
    }
  }

  // ---------------------------------------------------------------- the worker pool

  // Runs f() on the frame workers and resumes the awaiting coroutine on the I/O thread with its
  // result (or its exception). Not a coroutine itself, and callers pass a named object: GCC 12
  // destroys some temporaries of a co_await expression twice.
  template <class F>
  auto offload(F&& f) {
    using R = std::invoke_result_t<std::decay_t<F>&>;
    return asio::async_initiate<decltype(use_awaitable), void(std::exception_ptr, R)>(
        [this](auto handler, std::decay_t<F> fn) {
          lanes.frames.post([this, handler = std::move(handler), fn = std::move(fn)]() mutable {
            std::exception_ptr error;
            R result{};
            try {
              result = fn();
            } catch (...) {
              error = std::current_exception();
            }
            asio::post(io, [handler = std::move(handler), error, result = std::move(result)]() mutable {
              std::move(handler)(error, std::move(result));
            });
          });
        },
        use_awaitable, std::forward<F>(f));
  }

  // ---------------------------------------------------------------- connections

  awaitable<void> writer(ConnPtr c) {
    while (!c->closed) {
      while (!c->outq.empty() && !c->closed) {
        if (c->outq.front().plain || c->outq.front().lazy) {
          // Sealed here, in send order, so the nonce sequence is the order on the wire; a bulk
          // frame is made and sealed on the frame workers while the I/O thread serves everyone else.
          const auto plain = std::move(c->outq.front().plain);
          const auto lazy = std::move(c->outq.front().lazy);
          const MsgType t = c->outq.front().type;
          std::string frame;
          if ((plain ? plain->size() : lazy->size) >= o.offload_bytes) {
            auto seal = [c, plain, lazy, t, rid = run_id] {
              return c->session->seal(t, rid, plain ? *plain : lazy->get());
            };
            frame = co_await offload(std::move(seal));
          } else
            frame = c->session->seal(t, run_id, plain ? *plain : lazy->get());
          c->outq.front().frame = std::move(frame);
          if (c->closed) break;
        }
        // Held here while it is written: a frame may be inserted behind the front meanwhile
        // (send_state), which may move the queue's elements.
        const std::string wire = std::move(c->outq.front().frame);
        boost::system::error_code ec;
        co_await asio::async_write(c->sock, asio::buffer(wire), asio::redirect_error(use_awaitable, ec));
        if (ec) {
          close(c);
          co_return;
        }
        c->outq.pop_front();
      }
      if (c->refusing) {
        close(c);
        break;
      }
      if (c->closed) break;
      boost::system::error_code ec;
      co_await c->wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }

  awaitable<void> handshake_deadline(ConnPtr c) {
    asio::steady_timer t(io);
    t.expires_after(secs(o.timeouts.learner_timeout_s));
    boost::system::error_code ec;
    co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
    if (!c->closed && !c->session) {
      reject(c, "handshake not completed within sync.learner_timeout_s");
      close(c);
    }
  }

  awaitable<void> serve(ConnPtr c) {
    conns.insert(c);
    add_stranger(c);
    asio::co_spawn(io, writer(c), asio::detached);
    asio::co_spawn(io, handshake_deadline(c), asio::detached);
    c->server_nonce = random_nonce();
    send_raw(c, encode_frame(MsgType::challenge, run_id, Challenge{c->server_nonce}.encode()));
    // A stranger gets a small read buffer (its frames are capped at kControlCap anyway); an
    // authenticated learner a large one.
    std::vector<char> buf(kStrangerBuffer);
    bool errored = false;
    try {
      for (;;) {
        if (c->session && buf.size() < kLearnerBuffer) {
          forget_stranger(c);
          buf.resize(kLearnerBuffer);
        }
        boost::system::error_code ec;
        const std::size_t n =
            co_await c->sock.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
        if (ec || c->closed) {
          if (ec && !c->closed && c->dec.buffered() > 0)
            reject(c, "truncated frame: the peer closed the connection mid-frame (" +
                          std::to_string(c->dec.buffered()) + " bytes pending)");
          break;
        }
        c->dec.feed(buf.data(), n);
        // The learner asked for `init` is alive while its bytes come in, even when the `init` takes
        // longer than learner_timeout_s to arrive (nobody else is asked meanwhile).
        if (c == init_asked && c->session) touch(c->learner_id);
        while (!c->closed && !c->refusing) {
          auto f = c->dec.next();
          if (!f) break;
          if (!c->session) {
            handle_stranger(c, *f);
            continue;
          }
          const std::uint64_t seq = c->session->reserve_recv();
          if (f->payload.size() >= o.offload_bytes) {
            // At most kBulkInFlight frames of a connection are opened at once (memory).
            while (c->bulk_pending >= kBulkInFlight && !c->closed) {
              boost::system::error_code wait_ec;
              c->bulk_wake.expires_at(asio::steady_timer::time_point::max());
              co_await c->bulk_wake.async_wait(asio::redirect_error(use_awaitable, wait_ec));
            }
            if (c->closed) break;
            ++c->bulk_pending;
            asio::co_spawn(io, handle_bulk(c, std::make_shared<Frame>(std::move(*f)), seq), asio::detached);
            continue;
          }
          const MsgType type = f->type;
          const std::string payload = c->session->open_at(std::move(*f), seq);
          if (c->bulk_pending > 0 || !c->held.empty()) {
            if (c->held.empty() && (type == MsgType::push || type == MsgType::heartbeat)) {
              touch(c->learner_id);
              if (type == MsgType::push) on_push(c, Push::decode(payload), payload.size(), nullptr, seq);
              else Heartbeat::decode(payload);
            } else {
              c->held.emplace_back(type, payload, seq);
            }
            continue;
          }
          dispatch(c, type, payload, seq);
        }
        if (c->closed || c->refusing) break;
      }
    } catch (const PersistFailure&) {
      // fatal() has stopped the syncer; nothing more is written.
    } catch (const ProtocolError& e) {
      reject(c, std::string("protocol: ") + e.what());
      errored = true;
    } catch (const WireError& e) {
      reject(c, std::string("malformed message: ") + e.what());
      errored = true;
    } catch (const std::exception& e) {
      reject(c, std::string("error: ") + e.what());
      errored = true;
    }
    // What the learner sent before it closed is handled before the connection goes: its bulk
    // frames still being opened, and the frames held behind them.
    while (!errored && c->bulk_pending > 0 && !c->closed && !done && !failed) {
      boost::system::error_code ec;
      c->bulk_wake.expires_at(asio::steady_timer::time_point::max());
      co_await c->bulk_wake.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (!c->refusing) close(c);  // a refused peer is closed by its writer once the refusal is out
    conns.erase(c);
    forget_stranger(c);
    if (!c->session && !c->accounted) ++strangers_left;  // went away before it authenticated
    if (!c->learner_id.empty() && !failed) {
      try {
        taped("disconnect", -1, -1, {c->learner_id}, {{"peer", c->peer}});
      } catch (const PersistFailure&) {
      }
    }
  }

  // The file-descriptor budget: what RLIMIT_NOFILE leaves after the descriptors open now and
  // kOwnFdReserve for the syncer's own files. Strangers get at most what is left after room for
  // every expected learner (twice: a reconnecting learner briefly holds two).
  void size_connection_caps() {
    rlimit rl{};
    long limit = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < 65536) {
        rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
        ::setrlimit(RLIMIT_NOFILE, &rl);
        ::getrlimit(RLIMIT_NOFILE, &rl);
      }
      limit = rl.rlim_cur == RLIM_INFINITY ? 65536 : static_cast<long>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
    }
    long open_now = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (::readdir(d)) ++open_now;
      ::closedir(d);
      open_now -= 3;  // ".", ".." and the directory's own descriptor
    } else {
      open_now = 16;
    }
    const long budget = limit - open_now - kOwnFdReserve;
    const long learners = 2 * static_cast<long>(std::max<std::uint32_t>(o.expected_learners, 4));
    connection_cap = static_cast<std::size_t>(std::max<long>(budget, 2));
    stranger_cap = static_cast<std::size_t>(
        std::clamp<long>(budget - learners, 1, static_cast<long>(o.max_pending)));
    if (stranger_cap < o.max_pending)
      spdlog::warn("syncer: the file-descriptor limit ({}) leaves room for {} unauthenticated connection(s) at once "
                   "(sync.max_pending_peers = {}); raise `ulimit -n` for more",
                   limit, stranger_cap, o.max_pending);
    taped("limits", -1, -1, {},
          {{"fd_limit", limit}, {"fds_open", open_now}, {"connections", connection_cap},
           {"pending_peers", stranger_cap}, {"pending_per_address", o.max_pending_per_address},
           {"accept_rate", o.accept_rate}});
  }

  // Makes room for one more stranger from `address`: drops the oldest stranger of that address
  // when it is at its cap, then the oldest of all when the global cap or the fd budget is
  // reached. False when there is no room (every connection is an authenticated learner).
  bool make_room(const std::string& address) {
    auto oldest_of = [&](const std::string* addr) -> ConnPtr {
      for (const auto& [serial, c] : strangers)
        if (!addr || c->address == *addr) return c;
      return nullptr;
    };
    if (auto it = strangers_by_address.find(address);
        it != strangers_by_address.end() && it->second >= o.max_pending_per_address)
      if (auto c = oldest_of(&address)) drop_stranger(c);
    while (strangers.size() >= stranger_cap || conns.size() >= connection_cap) {
      auto c = oldest_of(nullptr);
      if (!c) return conns.size() < connection_cap;
      drop_stranger(c);
    }
    return true;
  }

  awaitable<void> accept_loop() {
    asio::steady_timer pause(io);
    accept_tokens = o.accept_rate;
    accept_refill_at = steady_now();
    for (;;) {
      // Token bucket: at most accept_rate connections per second (burst: one second's worth).
      // Without a token the loop waits; further connections queue in the kernel's backlog.
      const double now = steady_now();
      accept_tokens = std::min(o.accept_rate, accept_tokens + (now - accept_refill_at) * o.accept_rate);
      accept_refill_at = now;
      if (accept_tokens < 1) {
        pause.expires_after(secs((1 - accept_tokens) / o.accept_rate));
        boost::system::error_code ec;
        co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
        if (done) co_return;
        continue;
      }
      boost::system::error_code ec;
      tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || done) co_return;
        if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
            ec == asio::error::no_memory) {
          // Out of descriptors: the oldest stranger makes room, and the loop backs off briefly
          // instead of spinning on a listening socket that stays readable.
          if (auto it = strangers.begin(); it != strangers.end()) drop_stranger(it->second);
          pause.expires_after(std::chrono::milliseconds(10));
          co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
          if (done) co_return;
        }
        continue;
      }
      accept_tokens -= 1;
      s.set_option(tcp::no_delay(true), ec);
      auto c = std::make_shared<Conn>(std::move(s), run_id, next_serial++);
      if (!make_room(c->address)) {
        ++strangers_dropped;
        c->sock.close(ec);
        continue;
      }
      asio::co_spawn(io, serve(std::move(c)), asio::detached);
    }
  }

  // ---------------------------------------------------------------- messages

  // A frame of a peer that has not authenticated: only a hello is accepted. (An authenticated
  // learner's frames are opened and handled in serve() and handle_bulk().)
  void handle_stranger(const ConnPtr& c, Frame& f) {
    if (f.type != MsgType::hello) {
      reject(c, std::string("unauthenticated peer sent ") + msg_name(f.type));
      close(c);
      return;
    }
    on_hello(c, f);
  }

  // A bulk frame of an authenticated learner (receive sequence number `seq`, reserved when it
  // was read): opened (and a push's delta decoded and checked) on the frame workers, then handled
  // on the I/O thread. The connection goes on reading meanwhile: pushes and heartbeats read behind
  // it are handled at once (a small fragment's round does not wait for the opening of a large
  // fragment's push), every other frame waits until the bulk frames before it are handled, so a
  // learner's `done` or `leave` still comes after its pushes. A frame that does not open (forged,
  // replayed, reordered) drops the connection as before.
  awaitable<void> handle_bulk(ConnPtr c, std::shared_ptr<Frame> f, std::uint64_t seq) {
    const MsgType type = f->type;
    auto open = [c, type, f, seq] {
      Opened o;
      o.payload = c->session->open_at(std::move(*f), seq);
      o.size = o.payload.size();
      if (type == MsgType::push) {
        o.push = prepare_push(o.payload);
        o.payload = std::string();  // the decoded delta is what is kept
      }
      return o;
    };
    try {
      Opened opened = co_await offload(std::move(open));
      --c->bulk_pending;
      c->bulk_wake.cancel();
      if (c->closed || done || failed) co_return;
      if (opened.push) {
        touch(c->learner_id);
        on_push(c, opened.push->msg, opened.size, &opened.push->delta, seq);
      } else {
        dispatch(c, type, opened.payload, seq);
      }
      // The frames held behind the bulk frames, in order, once none is left before them.
      while (c->bulk_pending == 0 && !c->held.empty() && !c->closed && !done && !failed) {
        auto [t, payload, s] = std::move(c->held.front());
        c->held.pop_front();
        dispatch(c, t, payload, s);
      }
    } catch (const PersistFailure&) {
      // fatal() has stopped the syncer; nothing more is written.
    } catch (const ProtocolError& e) {
      reject(c, std::string("protocol: ") + e.what());
      close(c);
    } catch (const WireError& e) {
      reject(c, std::string("malformed message: ") + e.what());
      close(c);
    } catch (const std::exception& e) {
      reject(c, std::string("error: ") + e.what());
      close(c);
    }
  }

  void dispatch(const ConnPtr& c, MsgType type, const std::string& payload, std::uint64_t seq) {
    touch(c->learner_id);
    switch (type) {
      case MsgType::init: return on_init(c, Init::decode(payload));
      case MsgType::push: return on_push(c, Push::decode(payload), payload.size(), nullptr, seq);
      case MsgType::heartbeat: Heartbeat::decode(payload); return;
      case MsgType::leave: return on_leave(c);
      case MsgType::done: return on_done(c, Heartbeat::decode(payload));
      case MsgType::final_ack: return on_final_ack(c, FinalAck::decode(payload));
      case MsgType::holds: return on_holds(c, Holds::decode(payload));
      default:
        reject(c, std::string("unexpected ") + msg_name(type) + " from a learner");
        close(c);
    }
  }

  void touch(const std::string& id) {
    auto& r = st.registry[id];
    r.last_seen = steady_now();
    // Heard from again (rejoined): no longer lost. A `leave` passes here first, so a learner
    // that leaves is not waited for.
    lost_since.erase(id);
    awaiting_logged.erase(id);
    given_up.erase(id);
    if (!r.live && !finishing) {
      r.live = true;
      taped("revive", -1, -1, {id});
    }
  }

  void on_hello(const ConnPtr& c, const Frame& frame) {
    // The box opens only under the hello key of this connection's nonces and the run secret:
    // until it does, the learner id and fingerprint are unknown and nothing is touched.
    const std::optional<Hello> opened = Hello::open(key, c->server_nonce, frame);
    if (!opened) {
      reject(c, "authentication failed (wrong run secret)");
      // Says only what the peer already knows (its box did not open), so an honest learner with the
      // wrong secret file stops at once with the right diagnosis instead of retrying.
      refuse(c, ErrorMsg{kErrorAuthentication, "authentication failed"});
      return;
    }
    const Hello& h = *opened;
    if (h.learner_id.empty()) {
      reject(c, "empty learner id");
      close(c);
      return;
    }
    c->learner_id = h.learner_id;
    c->layout_fp = h.layout_fp;
    if (st.initialised && h.layout_fp != st.layout.fingerprint()) {
      reject(c, "layout fingerprint differs from the run's (other tensors, fragments or pattern)");
      refuse(c, ErrorMsg{kErrorLayoutMismatch, "layout mismatch"});
      c->learner_id.clear();
      return;
    }
    // Authenticated: only now does the peer touch any state.
    c->session.emplace(session_key(key, c->server_nonce, h.client_nonce), 'S', 'L');
    c->dec.set_max_frame(o.max_frame);
    // A bulk frame's CRC is checked where it is opened, on the frame workers (handle_bulk).
    c->dec.defer_crc_from(o.offload_bytes);
    for (const auto& other : conns)
      if (other != c && other->learner_id == h.learner_id && other->session) {
        taped("superseded", -1, -1, {h.learner_id}, {{"peer", other->peer}});
        other->learner_id.clear();
        close(other);
      }
    Welcome w;
    w.tag = mac(key, Welcome::signed_text(run_id, c->server_nonce, h.client_nonce));
    // Without state, one learner at a time is asked for it; the others wait (parked) instead of
    // each uploading the whole initial state.
    w.init = st.initialised ? InitAsk::none : asked_for_init_alive() ? InitAsk::pending : InitAsk::send;
    for (const auto& f : st.fragments) w.versions.push_back(f.version);
    send_raw(c, encode_frame(MsgType::welcome, run_id, w.encode()));
    auto& r = st.registry[h.learner_id];
    const bool rejoin = r.joins > 0;
    done_learners.erase(h.learner_id);  // a new session trains again until it says `done`
    r.id = h.learner_id;
    ++r.joins;
    r.live = !finishing || r.live;
    r.last_seen = steady_now();
    pacer.on_join(h.learner_id);
    taped(rejoin ? "rejoin" : "join", -1, -1, {h.learner_id},
                {{"peer", c->peer}, {"live", live_ids().size()}, {"joins", r.joins}});
    // Catch-up: the current global state right away, not at the next round boundary, less what
    // the learner's `holds` (its next message) shows it holds already.
    if (st.initialised) c->awaiting_holds = true;
    else {
      if (w.init == InitAsk::send) {
        c->awaiting_init = true;
        init_asked = c;
        taped("init_asked", -1, -1, {h.learner_id}, {{"peer", c->peer}, {"by", "welcome"}});
      } else {
        c->parked = true;
        c->awaiting_holds = true;
      }
      if (finishing) send_final_cut(c);  // a run that ended before it had any state
    }
  }

  // The learner asked for `init` is still connected, has not been refused and is not silent
  // (its bytes count as signs of life while its `init` streams in: serve()).
  bool asked_for_init_alive() {
    if (!init_asked || init_asked->closed || init_asked->refusing || !init_asked->session) return false;
    const auto it = st.registry.find(init_asked->learner_id);
    return it != st.registry.end() && it->second.live;
  }

  // Without state: when the learner asked for `init` is gone (disconnected, killed, refused) or
  // silent, the oldest parked learner is asked instead (`init_request`). A silent one that sends
  // its `init` after all still creates the state if it comes first; the other `init` then counts
  // as a claim of version 0, as before.
  void ask_for_init() {
    if (st.initialised || finishing || done || failed || asked_for_init_alive()) return;
    std::string why;
    std::string before;
    if (init_asked) {
      before = init_asked->learner_id;
      why = init_asked->refusing ? "refused" : init_asked->closed || !init_asked->session ? "disconnected" : "silent";
      init_asked.reset();
    }
    ConnPtr next;
    for (const auto& c : conns) {
      if (!c->parked || !c->session || c->closed || c->refusing) continue;
      const auto it = st.registry.find(c->learner_id);
      if (it == st.registry.end() || !it->second.live) continue;
      if (!next || c->serial < next->serial) next = c;
    }
    if (!next) return;  // the next learner to connect is asked in its welcome
    next->parked = false;
    next->awaiting_init = true;
    init_asked = next;
    send(next, MsgType::init_request, std::string());
    json extra = {{"peer", next->peer}, {"by", "request"}};
    if (!before.empty()) {
      extra["instead_of"] = before;
      extra["reason"] = why;
    }
    taped("init_asked", -1, -1, {next->learner_id}, extra);
  }

  // A learner parked while the run had no state, once it exists: its `holds` is answered as if it
  // had just arrived (a learner of another layout is dropped; it reconnects and is refused in the
  // handshake, which says why).
  void answer_parked(const ConnPtr& c) {
    Holds h = std::move(*c->parked_claims);
    c->parked_claims.reset();
    c->parked = false;
    c->awaiting_init = false;  // asked too late: its `init`, if one comes, is ignored
    if (c->layout_fp != st.layout.fingerprint()) {
      reject(c, "layout fingerprint differs from the run's state (other tensors, fragments or pattern)");
      close(c);
      return;
    }
    answer_holds(c, h);
  }

  // A refused `init`: the learner is told why (sealed `error`, code 3, final) and dropped once
  // that is out; the next parked learner is asked.
  void refuse_init(const ConnPtr& c, const std::string& reason) {
    reject(c, reason);
    // The refusal is final: the learner stops, so nothing (a round, the final cut) waits for it.
    st.registry[c->learner_id].live = false;
    send(c, MsgType::error, ErrorMsg{kErrorInitRefused, reason}.encode());
    c->refusing = true;
    c->wake.cancel();
    ask_for_init();
  }

  // The digest of fragment p's public state at its current version (computed once per version).
  std::vector<std::pair<std::uint64_t, std::array<unsigned char, 32>>> pub_digests;
  const std::array<unsigned char, 32>& public_digest(std::uint32_t p) {
    if (pub_digests.size() < st.fragments.size()) pub_digests.resize(st.fragments.size(), {kNotSent, {}});
    auto& d = pub_digests[p];
    if (d.first != st.fragments[p].version)
      d = {st.fragments[p].version, fragment_digest(st.fragments[p].version, public_state(p))};
    return d.second;
  }

  // A `holds` of an initialised run: `holding` for every fragment whose claim (version and digest
  // of the public state) matches, the others in full (answer_claims).
  void answer_holds(const ConnPtr& c, const Holds& h) {
    if (h.claims.size() != st.fragments.size()) {
      reject(c, "holds names " + std::to_string(h.claims.size()) + " fragments, the run has " +
                    std::to_string(st.fragments.size()));
      close(c);
      return;
    }
    answer_claims(c, [&](std::uint32_t p) {
      const FragmentClaim& cl = h.claims[p];
      return cl.version == st.fragments[p].version && cl.digest == public_digest(p);
    });
  }

  void on_holds(const ConnPtr& c, const Holds& h) {
    if (!c->awaiting_holds) {
      reject(c, "unexpected holds: it answers a welcome into an initialised run, once");
      close(c);
      return;
    }
    c->awaiting_holds = false;
    if (!st.initialised) {
      // Parked: answered when the run has its state (answer_parked).
      c->parked_claims = h;
      return;
    }
    answer_holds(c, h);
  }

  // The catch-up of a learner that claimed what it holds: `holding` with the fragments whose
  // claim `holds(p)` accepts, then every other fragment not sent since the welcome in full, then
  // the final cut when the run is finishing.
  template <class Accepts>
  void answer_claims(const ConnPtr& c, Accepts&& holds) {
    Holding ok;
    std::vector<std::uint32_t> full, already;
    for (std::uint32_t p = 0; p < st.fragments.size(); ++p) {
      if (p < c->sent.size() && c->sent[p] == st.fragments[p].version) {  // sent since the welcome (a merge landed)
        already.push_back(p);
        continue;
      }
      if (holds(p)) {
        ok.fragments.push_back(p);
        note_sent(c, p);
      } else {
        full.push_back(p);
      }
    }
    // `holding` first: the learner takes its own copies before any update on top of them.
    send(c, MsgType::holding, ok.encode());
    for (const auto p : full) send_fragment(c, p);
    taped("catch_up", -1, -1, {c->learner_id}, {{"held", ok.fragments}, {"sent", full}, {"already", already}});
    if (finishing) send_final_cut(c);
  }

  // The final cut as connection c gets it: a fragment it was sent at the cut's version is
  // omitted (the learner holds those exact bytes), every other one is in full.
  // Made on the frame workers when large, like a catch-up fragment (the cut is never changed
  // once taken; a shared copy keeps it alive for the payloads in flight).
  std::shared_ptr<const FinalCut> shared_cut;
  void send_final_cut(const ConnPtr& c) {
    if (c->closed || !c->session) return;
    if (!shared_cut) shared_cut = std::make_shared<const FinalCut>(final_cut);
    std::vector<bool> omit(final_cut.fragments.size(), false);
    for (std::uint32_t p = 0; p < omit.size(); ++p) omit[p] = p < c->sent.size() && c->sent[p] == final_cut.versions[p];
    auto lazy = std::make_shared<LazyPayload>();
    lazy->size = shared_cut->encoded_size(omit);
    lazy->make = [cut = shared_cut, omit] { return cut->encode(omit); };
    c->outq.push_back(Outgoing{{}, MsgType::final_cut, nullptr, std::move(lazy)});
    c->wake.cancel();
  }

  void on_init(const ConnPtr& c, const Init& in) {
    if (st.initialised) {
      // Several learners may have been told "needs init" before the first init arrived; the
      // layout was checked in the handshake, so this is a race, not an error.
      taped("init_ignored", -1, -1, {c->learner_id}, {{"note", "the run already has its state"}});
      if (c->awaiting_init) {
        // Its initial values are its claim of version 0: fragments still at version 0 and
        // bit-identical to them are not sent back (islands started from the same seed).
        c->awaiting_init = false;
        const bool same_size = in.params.size() == st.layout.total_numel();
        std::vector<std::span<const float>> tensors;
        std::size_t off = 0;
        for (const auto& t : st.layout.tensors) {
          if (same_size) tensors.emplace_back(in.params.data() + off, t.numel);
          off += t.numel;
        }
        answer_claims(c, [&](std::uint32_t p) {
          if (!same_size || st.fragments[p].version != 0) return false;
          const std::vector<float> mine = pack_fragment(st.layout, p, tensors);
          const auto& pub = public_state(p);
          return mine.size() == pub.size() && std::memcmp(mine.data(), pub.data(), pub.size() * sizeof(float)) == 0;
        });
      }
      return;
    }
    Layout l;
    try {
      l = build_layout(in.tensors, in.fragments, in.pattern);
    } catch (const Error& e) {
      refuse_init(c, std::string("init refused: ") + e.what());
      return;
    }
    if (l.fingerprint() != c->layout_fp) {
      refuse_init(c, "init refused: its tensors, fragments or pattern differ from the layout of the learner's hello");
      return;
    }
    if (!all_finite(in.params)) {
      refuse_init(c, "init refused: non-finite initial parameters");
      return;
    }
    st.layout = std::move(l);
    st.fragments.clear();
    std::vector<std::span<const float>> tensors;
    std::size_t off = 0;
    for (const auto& t : st.layout.tensors) {
      tensors.emplace_back(in.params.data() + off, t.numel);
      off += t.numel;
    }
    for (std::uint32_t p = 0; p < st.layout.fragments.size(); ++p) {
      FragmentState f;
      f.params = make_floats(pack_fragment(st.layout, p, tensors));
      f.momentum = make_floats(std::vector<float>(f.params->size(), 0.0f));
      f.pub = f.params;
      st.fragments.push_back(std::move(f));
    }
    st.initialised = true;
    rounds.assign(st.fragments.size(), Round{});
    checkpoint();
    taped("init", -1, 0, {c->learner_id},
                {{"tensors", st.layout.tensors.size()}, {"fragments", st.fragments.size()},
                 {"numel", st.layout.total_numel()}, {"pattern", pattern_name(st.layout.pattern)},
                 {"fingerprint", std::to_string(st.layout.fingerprint())}});
    // The initialiser holds version 0 exactly (it sent it): `holding` instead of its own values
    // back. Parked learners get the answer to their `holds` now (one that has not sent it yet is
    // answered when it arrives), a learner asked for `init` whose `init` is still on its way when
    // that arrives (above); any other connection gets the state in full.
    c->awaiting_init = false;
    c->parked = false;
    c->parked_claims.reset();
    init_asked.reset();
    Holding all;
    for (std::uint32_t p = 0; p < st.fragments.size(); ++p) {
      all.fragments.push_back(p);
      note_sent(c, p);
    }
    send(c, MsgType::holding, all.encode());
    std::vector<ConnPtr> full;
    for (const auto& other : std::vector<ConnPtr>(conns.begin(), conns.end())) {
      if (other == c || !other->session || other->closed || other->refusing) continue;
      if (other->parked_claims) answer_parked(other);
      else if (!other->awaiting_init && !other->awaiting_holds) full.push_back(other);
    }
    for (std::uint32_t p = 0; p < st.fragments.size(); ++p) {
      std::shared_ptr<LazyPayload> payload;
      for (const auto& other : full) {
        if (!payload) payload = fragment_payload(p);
        send_fragment(other, p, payload);
      }
    }
  }

  void ack(const ConnPtr& c, std::uint32_t p, PushStatus s) {
    const std::uint64_t v = p < st.fragments.size() ? st.fragments[p].version : 0;
    send(c, MsgType::push_ack, PushAck{p, s, v}.encode());
  }

  // `checked`: the delta already decoded and checked (a bulk push opened on the worker pool).
  void on_push(const ConnPtr& c, const Push& m, std::size_t bytes, CheckedDelta* checked, std::uint64_t seq) {
    const std::string& id = c->learner_id;
    if (!st.initialised) {
      reject(c, "push before the run state exists");
      return ack(c, m.fragment, PushStatus::invalid);
    }
    if (finishing) return ack(c, m.fragment, PushStatus::finished);
    const auto p = m.fragment;
    if (p >= st.fragments.size()) {
      reject(c, "push for fragment " + std::to_string(p) + " which does not exist");
      return ack(c, p, PushStatus::invalid);
    }
    if (c->push_seq.size() < st.fragments.size()) c->push_seq.resize(st.fragments.size(), 0);
    if (seq < c->push_seq[p]) {
      // Opened after a newer push of the same fragment from this connection was handled: it is
      // superseded, as a second push into an open round replaces the first.
      spdlog::debug("syncer: {}'s push of fragment {} superseded by a newer one", id, p);
      return ack(c, p, PushStatus::duplicate);
    }
    c->push_seq[p] = seq;
    auto& frag = st.fragments[p];
    if (m.numel != frag.params->size()) {
      reject(c, "wrong shape: push has " + std::to_string(m.numel) + " values, fragment " + std::to_string(p) +
                    " has " + std::to_string(frag.params->size()), p);
      return ack(c, p, PushStatus::invalid);
    }
    if (m.samples == 0) {
      reject(c, "push covers no samples", p);
      return ack(c, p, PushStatus::invalid);
    }
    if (m.base_version > frag.version) {
      reject(c, "base version " + std::to_string(m.base_version) + " is ahead of the syncer's " +
                    std::to_string(frag.version), p);
      ack(c, p, PushStatus::invalid);
      return resend_if_missing(c, p);
    }
    const std::uint64_t stale = frag.version - m.base_version;
    if (stale > o.max_staleness) {
      reject(c, "too stale: " + std::to_string(stale) + " merges behind (sync.max_staleness = " +
                    std::to_string(o.max_staleness) + ")", p);
      ack(c, p, PushStatus::too_stale);
      return resend_if_missing(c, p);
    }
    CheckedDelta own;
    if (!checked) own = check_delta(m);
    CheckedDelta& cd = checked ? *checked : own;
    if (!cd.error.empty()) {
      reject(c, cd.error, p);
      return ack(c, p, PushStatus::invalid);
    }
    std::vector<float> delta = std::move(cd.values);
    const double now = steady_now();
    pacer.on_push(id, p, m.inner_steps, now);
    Round& r = rounds[p];
    bool replaced = false;
    for (auto& q : r.pushes)
      if (q.learner == id) {
        q = PendingPush{id, m.base_version, m.samples, m.inner_steps, std::move(delta), now};
        replaced = true;
      }
    if (!replaced) {
      if (r.pushes.empty()) r.first = now;
      r.pushes.push_back(PendingPush{id, m.base_version, m.samples, m.inner_steps, std::move(delta), now});
    }
    r.last = now;
    ++st.registry[id].pushes;
    // Taped before it is acknowledged: a push the learner was told is accepted is on the tape.
    taped("push", p, static_cast<std::int64_t>(frag.version), {id},
                {{"base_version", m.base_version}, {"staleness", stale}, {"samples", m.samples},
                 {"inner_steps", m.inner_steps}, {"bytes", bytes + kHeaderBytes + kSealBytes},
                 {"encoding", delta_encoding_name(m.encoding)}, {"replaced", replaced},
                 {"pending", r.pushes.size()}});
    ack(c, p, PushStatus::accepted);
    try_close(p, now);
  }

  void on_leave(const ConnPtr& c) {
    auto& r = st.registry[c->learner_id];
    r.live = false;
    taped("leave", -1, -1, {c->learner_id}, {{"live", live_ids().size()}});
    const std::string id = c->learner_id;
    c->learner_id.clear();
    close(c);
    (void)id;
  }

  void on_done(const ConnPtr& c, const Heartbeat& h) {
    if (!done_learners.insert(c->learner_id).second) return;
    taped("done", -1, -1, {c->learner_id},
                {{"step", h.step}, {"samples", h.samples}, {"active", active_ids().size()}});
    const double now = steady_now();
    for (std::uint32_t p = 0; p < rounds.size(); ++p) try_close(p, now);
    check_all_done(now);
  }

  // Every live learner has reached its own budget: merge what is pending (nobody else will
  // push) and take the final cut. Islands the run expects (sync.islands) that have not joined
  // yet are waited for until the join window after the syncer's start has passed: a slow
  // island must not find the run already ended, nor a lost one hold it open for ever. A
  // learner lost without `leave` (awaiting_lost) is waited for in the same way, for the join
  // window after it was lost: a restarted island rejoins and takes the cut with the others.
  void check_all_done(double now) {
    if (finishing || deferred_final || !st.initialised || done_learners.empty() || !active_ids().empty() ||
        live_ids().empty())
      return;
    // Pending merges land first (this is checked again when they do).
    if (merges_in_flight > 0) return;
    if (awaiting_lost(now)) return;
    if (st.registry.size() < o.expected_learners) {
      if (now - started < o.expect_window_s) return;
      if (!missing_logged) {
        missing_logged = true;
        taped("missing_learners", -1, -1, live_ids(),
                    {{"expected", o.expected_learners}, {"joined", st.registry.size()},
                     {"window_s", o.expect_window_s}});
        spdlog::warn("syncer: {} of {} expected islands joined within sync.join_timeout_s = {} s; taking the final "
                     "cut without the rest",
                     st.registry.size(), o.expected_learners, o.expect_window_s);
      }
    }
    for (std::uint32_t p = 0; p < rounds.size(); ++p)
      if (!rounds[p].pushes.empty() && may_start_merge(p)) {
        const std::size_t q = std::max<std::size_t>(1, std::min<std::size_t>(o.quorum, rounds[p].pushes.size()));
        merge(p, "learners_done", q, RoundWait{}, now);
        if (finishing || deferred_final) return;  // the merge spent the budget
      }
    // Merges on the worker pool call this again when they land; the cut is taken after them.
    if (merges_in_flight > 0) return;
    begin_final("learners_done");
  }

  // Learners lost without `leave` and not back (not live) may still return (a restarted
  // island): true while one of them was lost less than expect_window_s ago. The tape names
  // each when the cut starts waiting for it (`awaiting_learner`) and when it stops
  // (`learner_lost`).
  bool awaiting_lost(double now) {
    bool wait = false;
    for (const auto& [id, since] : lost_since) {
      if (st.registry[id].live || given_up.count(id)) continue;
      if (now - since < o.expect_window_s) {
        wait = true;
        if (awaiting_logged.insert(id).second) {
          taped("awaiting_learner", -1, -1, {id}, {{"lost_s", now - since}, {"window_s", o.expect_window_s}});
          spdlog::warn("syncer: {} was lost {:.1f} s ago; the learners that are done wait up to sync.join_timeout_s = "
                       "{} s for it to rejoin",
                       id, now - since, o.expect_window_s);
        }
      } else {
        given_up.insert(id);
        taped("learner_lost", -1, -1, {id}, {{"lost_s", now - since}, {"window_s", o.expect_window_s}});
        spdlog::warn("syncer: {} did not rejoin within sync.join_timeout_s = {} s; ending the run without it", id,
                     o.expect_window_s);
      }
    }
    return wait;
  }

  // Once the final cut is taken: learners still lost then (not live, so not expected to
  // acknowledge) are named missing in the final marker unless they come back and acknowledge.
  void note_lost_at_cut() {
    if (!finishing || lost_noted_at_cut) return;
    lost_noted_at_cut = true;
    for (const auto& [id, since] : lost_since)
      if (!st.registry[id].live) expect_acks.insert(id);
  }

  void on_final_ack(const ConnPtr& c, const FinalAck& a) {
    if (!finishing) {
      reject(c, "final_ack outside the terminal handshake");
      return;
    }
    const bool ok = a.digest == final_cut.digest;
    taped("final_ack", -1, -1, {c->learner_id},
                {{"ok", ok}, {"digest", hex(a.digest.data(), a.digest.size())}});
    if (ok) {
      acked.insert(c->learner_id);
      // Nothing more to say to this learner: closing tells it the acknowledgement arrived.
      c->learner_id.clear();
      close(c);
    } else {
      reject(c, "final_ack digest differs from the final cut");
    }
  }

  // ---------------------------------------------------------------- rounds

  void try_close(std::uint32_t p, double now) {
    Round& r = rounds[p];
    if (r.pushes.empty() || finishing) return;
    const auto live = active_ids();
    const std::size_t q = std::max<std::size_t>(1, std::min<std::size_t>(o.quorum, live.size()));
    const std::size_t n = r.pushes.size();
    bool all_live = !live.empty();
    for (const auto& id : live)
      if (std::none_of(r.pushes.begin(), r.pushes.end(), [&](const PendingPush& x) { return x.learner == id; }))
        all_live = false;
    // While this fragment's previous merge is in flight the round keeps filling; it merges once
    // that merge has landed.
    if (!may_start_merge(p)) return;
    std::vector<RoundPush> in;
    for (const auto& x : r.pushes) in.push_back({x.learner, x.arrived});
    RoundWait w = pacer.decide(p, in, live, r.first, now);
    if (n >= q && all_live) return merge(p, "all_live", q, std::move(w), now);
    if (n >= q && w.merge) return merge(p, "grace", q, std::move(w), now);
    if (now - r.first >= o.timeouts.round_deadline_s) return merge(p, "deadline", q, std::move(w), now);
  }

  // A merge runs in steps. merge() (I/O thread) takes the round; compute (the worker pool for
  // a fragment of offload_bytes or more, else inline) corrects, averages and applies the outer
  // step into new buffers and encodes the update while the I/O thread goes on serving the
  // current version (the buffers are shared and never written); land() (I/O thread) has the
  // new version's data file written on the checkpoint writers; once it is durable the next
  // manifest names it (pump_manifest, on the manifest writer), and once that is durable the
  // merge is applied to the state, taped and broadcast (publish). Until then the fragment's
  // merge is in flight: one per fragment at a time, other fragments' rounds merge meanwhile.
  struct MergeJob {
    std::uint32_t p = 0;
    std::string reason;
    std::size_t quorum = 0;
    RoundWait wait;  // the round's wait when it was decided
    double decided = 0, round_first = 0, round_last = 0;
    std::vector<PendingPush> pushes;
    std::vector<std::uint64_t> samples, staleness;
    std::vector<std::string> who;
    std::vector<double> weights;
    double share = 1;           // the round's share the pushes present stand for (sync.partial_merge)
    std::size_t expected = 0;   // the learners the round's share counts (present, and live ones that push)
    std::uint64_t version = 0;  // the fragment's version before the merge
    std::size_t active = 0;     // active learners (live, not done) when the merge was decided
    bool every_active = false;  // every one of them is in the merge
    // results
    Floats base_params, base_momentum, base_pub;  // the fragment's state the merge starts from
    std::vector<float> params, momentum, pub;
    Floats new_params, new_momentum, new_pub;  // the same, shared, once the merge landed
    std::uint32_t data_crc = 0;                // of the fragment's data file at the new version
    json record;                               // the merge record on the tape
    HelocoStats hs;
    double update_norm = 0;
    double agreement = 0;
    std::vector<double> push_norms;
    Published published;
    std::shared_ptr<const std::string> update;
    std::uint32_t public_crc = 0;
    double compute_s = 0;
    bool offloaded = false;
    std::exception_ptr error;
  };
  std::vector<char> merging;            // per fragment: a merge is in flight
  std::size_t merges_in_flight = 0;
  std::uint64_t samples_in_flight = 0;  // samples of the merges in flight (budget_samples)
  std::optional<std::string> deferred_final;  // the final cut waits for the merges in flight

  bool merge_in_flight(std::uint32_t p) const { return p < merging.size() && merging[p]; }
  // A merge would start now: not when the budget is already spoken for by merges in flight
  // (they end the run when they land), nor while the final cut waits for them.
  bool may_start_merge(std::uint32_t p) const {
    if (finishing || deferred_final || merge_in_flight(p)) return false;
    if (o.budget_outer_steps && st.outer_steps + merges_in_flight >= o.budget_outer_steps) return false;
    if (o.budget_samples && merges_in_flight > 0 && st.samples_merged + samples_in_flight >= o.budget_samples)
      return false;
    return true;
  }

  void merge(std::uint32_t p, const char* reason, std::size_t quorum, RoundWait wait, double now) {
    auto job = std::make_shared<MergeJob>();
    job->p = p;
    job->reason = reason;
    job->quorum = quorum;
    job->wait = std::move(wait);
    job->decided = now;
    Round r = std::move(rounds[p]);
    rounds[p] = Round{};
    job->round_first = r.first;
    job->round_last = r.last;
    FragmentState& f = st.fragments[p];
    job->version = f.version;
    job->base_params = f.params;
    job->base_momentum = f.momentum;
    job->base_pub = f.pub ? f.pub : f.params;
    for (const auto& q : r.pushes) {
      job->samples.push_back(q.samples);
      job->staleness.push_back(f.version - q.base_version);
      job->who.push_back(q.learner);
    }
    job->weights = token_weights(job->samples);
    // The learners a round is made of: those present, and every other live one that has pushed
    // (a learner that never pushed yet, or is no longer live, is not waited for and has no share).
    std::set<std::string> expected(job->who.begin(), job->who.end());
    for (const auto& [id, reg] : st.registry)
      if (reg.live && reg.pushes > 0) expected.insert(id);
    job->expected = expected.size();
    if (o.partial_merge == PartialMerge::share && expected.size() > job->who.size()) {
      job->share = static_cast<double>(job->who.size()) / static_cast<double>(expected.size());
      for (double& w : job->weights) w *= job->share;
    }
    const auto act = active_ids();
    job->active = act.size();
    job->every_active = std::all_of(act.begin(), act.end(), [&](const std::string& id) {
      return std::find(job->who.begin(), job->who.end(), id) != job->who.end();
    });
    job->pushes = std::move(r.pushes);
    if (merging.size() < st.fragments.size()) merging.resize(st.fragments.size(), 0);
    merging[p] = 1;
    ++merges_in_flight;
    std::uint64_t total = 0;
    for (auto s : job->samples) total += s;
    samples_in_flight += total;
    if (f.params->size() * sizeof(float) < o.offload_bytes) {
      compute_merge(*job);
      return land(job);
    }
    job->offloaded = true;
    lanes.merges.post([this, job] {
      compute_merge(*job);
      job->base_params.reset();
      job->base_momentum.reset();
      job->base_pub.reset();
      asio::post(io, [this, job] { finish_merge_async(job); });
    });
  }

  // The merge math on the job's own buffers, from the fragment's θ, m and P it started from
  // (shared, never written). Any thread.
  void compute_merge(MergeJob& j) const {
    const auto t0 = steady_now();
    try {
      for (std::size_t i = 0; i < j.pushes.size(); ++i) {
        if (!o.heloco || j.staleness[i] == 0) continue;
        const auto one = heloco_correct(j.pushes[i].delta, *j.base_momentum, o.heloco_params);
        j.hs.kept += one.kept;
        j.hs.shrunk += one.shrunk;
        j.hs.reoriented += one.reoriented;
        j.hs.skipped += one.skipped;
      }
      std::vector<std::span<const float>> ds;
      for (const auto& q : j.pushes) ds.emplace_back(q.delta);
      Merged m = merge_deltas(ds, j.weights, o.merge);
      const std::vector<float> merged = std::move(m.delta);
      j.agreement = m.agreement;
      j.push_norms = std::move(m.norms);
      j.update_norm = m.norm;
      j.pushes.clear();  // the deltas are no longer needed
      j.params = *j.base_params;
      j.momentum = *j.base_momentum;
      outer_step(j.params, j.momentum, merged, o.outer_lr, o.outer_momentum);
      // The new public state: P + the decoded q4 / q2 update of θ − P (the residual stays in θ − P
      // and goes out with the next update), or θ itself with the f32 downlink.
      if (o.downlink != Downlink::f32) {
        j.pub = *j.base_pub;
        j.published = publish_update(j.p, j.version, j.version + 1, j.params, j.pub, o.quant_block,
                                     o.downlink == Downlink::q2 ? DeltaEncoding::q2 : DeltaEncoding::q4);
        if (j.published.update) {
          j.public_crc = j.published.update->crc;
          j.update = std::make_shared<const std::string>(j.published.update->encode());
          j.published.update.reset();
        }
      }  // f32: P = θ (land() shares the buffer)
    } catch (...) {
      j.error = std::current_exception();
    }
    j.compute_s = steady_now() - t0;
  }

  // A merge computed on the worker pool lands on the I/O thread: it goes on (land) unless the
  // syncer stopped meanwhile.
  void finish_merge_async(const std::shared_ptr<MergeJob>& job) {
    if (done || failed) return;
    try {
      land(job);
    } catch (const PersistFailure&) {
      // fatal() has stopped the syncer; nothing more is written.
    }
  }

  // After a merge became visible (or could not start one): rounds that filled up meanwhile, the
  // learners-done cut and a final cut that waited for the merges in flight go ahead.
  void after_merges_landed() {
    const double now = steady_now();
    if (!finishing && deferred_final && merges_in_flight == 0) {
      const std::string reason = *deferred_final;
      deferred_final.reset();
      begin_final(reason);
    }
    for (std::uint32_t q = 0; q < rounds.size(); ++q) try_close(q, now);
    check_all_done(now);
  }

  // A computed merge on the I/O thread. With checkpoint_every = 1 (the default) its fragment's
  // data file is written on the checkpoint writers and the merge waits, still in flight, until
  // a manifest naming it is durable (pump_manifest); the I/O thread goes on meanwhile. With a
  // larger checkpoint_every (or everything kept on the I/O thread) it becomes visible at once,
  // after the due checkpoint is written here.
  void land(const std::shared_ptr<MergeJob>& job) {
    MergeJob& j = *job;
    if (j.error) {
      std::string why = "unknown error";
      try {
        std::rethrow_exception(j.error);
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
      spdlog::critical("syncer: the merge of fragment {} failed: {}; stopping with exit code 1", j.p, why);
      failed = true;
      shutdown(static_cast<int>(ExitCode::failure));
      throw PersistFailure(why);
    }
    j.new_params = make_floats(std::move(j.params));
    j.new_momentum = make_floats(std::move(j.momentum));
    j.new_pub = o.downlink != Downlink::f32 ? make_floats(std::move(j.pub)) : j.new_params;
    if (async_checkpoints()) {
      FragmentState next;
      next.version = j.version + 1;
      next.params = j.new_params;
      next.momentum = j.new_momentum;
      next.pub = j.new_pub;
      lanes.data_file(j.new_params->size() * sizeof(float)).post([this, job, next = std::move(next), dir = o.state_dir] {
        std::uint32_t crc = 0;
        std::exception_ptr error;
        try {
          crc = save_fragment_data(dir, job->p, next);
        } catch (...) {
          error = std::current_exception();
        }
        asio::post(io, [this, job, crc, error] { data_written(job, crc, error); });
      });
      return;
    }
    retire_buffers(st.fragments[j.p]);
    apply_merge(st, j, /*record=*/true);
    if (++merges_since_ckpt >= o.checkpoint_every) checkpoint();
    publish(j);
    if (j.offloaded) after_merges_landed();
  }

  // Every merge's checkpoint off the I/O thread: with checkpoint_every = 1, unless everything is
  // kept on the I/O thread (offload_bytes = SIZE_MAX, the design before the pools).
  bool async_checkpoints() const { return o.checkpoint_every == 1 && o.offload_bytes != SIZE_MAX; }

  // A fragment's buffers about to be replaced by a merge's are released on a checkpoint writer:
  // unmapping a large fragment's 3 × 4 bytes a value took tens of milliseconds on the I/O thread.
  // Moves them out of f, which apply_merge fills again at once.
  void retire_buffers(FragmentState& f) {
    if (!f.params || f.params->size() * sizeof(float) < o.offload_bytes) return;
    std::array<Floats, 3> old{std::move(f.params), std::move(f.momentum), std::move(f.pub)};
    lanes.bulk_files.post([old = std::move(old)]() mutable {
      for (auto& b : old) b.reset();
    });
  }

  // A merge's data file is durable (or failed: retried once here after the strangers are shed).
  void data_written(const std::shared_ptr<MergeJob>& job, std::uint32_t crc, std::exception_ptr error) {
    if (done || failed) return;
    try {
      if (error) {
        const FragmentState next{job->version + 1, job->new_params, job->new_pub, job->new_momentum, -1, {}};
        retry_write("writing the checkpoint", error, [&] { crc = save_fragment_data(o.state_dir, job->p, next); });
      }
      job->data_crc = crc;
      ready.push_back(job);
      pump_manifest();
    } catch (const PersistFailure&) {
    }
  }

  // A durable write that failed on another thread: retried once on the I/O thread after every
  // unauthenticated connection is closed, as persist() does; a second failure is fatal.
  template <class F>
  void retry_write(const char* what, std::exception_ptr error, F&& write) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      spdlog::warn("syncer: {} failed ({}); retrying once after closing {} unauthenticated connection(s)", what,
                   e.what(), shed_strangers());
    } catch (...) {
    }
    try {
      write();
    } catch (const std::exception& e) {
      fatal(std::string(what) + ": " + e.what());
    }
  }

  // The merges whose data files are durable, in the order they became so: the next manifest
  // names them (one manifest write at a time, each naming everything the previous one did, so a
  // fragment never goes back), then they become visible in that order.
  std::vector<std::shared_ptr<MergeJob>> ready;
  struct ManifestWrite {
    std::vector<std::shared_ptr<MergeJob>> batch;
    std::vector<std::uint32_t> crcs;
    std::vector<std::filesystem::path> superseded;  // data files no manifest names any more
    std::promise<std::exception_ptr> result;
    std::shared_future<std::exception_ptr> written;
    SyncerState snap;
    bool completed = false;
  };
  std::shared_ptr<ManifestWrite> manifest_in_flight;

  void pump_manifest() {
    if (manifest_in_flight || ready.empty() || done || failed) return;
    auto w = std::make_shared<ManifestWrite>();
    w->batch = std::move(ready);
    ready.clear();
    w->snap = st;  // shares the fragments' buffers
    w->crcs = durable_crc;
    for (const auto& job : w->batch) {
      apply_merge(w->snap, *job, /*record=*/true);
      w->crcs[job->p] = job->data_crc;
      w->superseded.push_back(o.state_dir / fragment_data_name(job->p, job->version));
    }
    w->snap.wall_seconds = st.wall_seconds + (steady_now() - started);
    w->written = w->result.get_future().share();
    manifest_in_flight = w;
    lanes.manifest.post([this, w, path = ckpt_path()] {
      std::exception_ptr error;
      try {
        atomic_write(path, encode_manifest(w->snap, w->crcs));
        std::error_code ec;
        for (const auto& f : w->superseded) std::filesystem::remove(f, ec);
      } catch (...) {
        error = std::current_exception();
      }
      w->result.set_value(error);
      asio::post(io, [this, w] {
        if (done || failed) return;
        try {
          manifest_written(w);
          after_merges_landed();
        } catch (const PersistFailure&) {
        }
      });
    });
  }

  // The manifest of a batch is durable: its merges become visible (tape record, broadcast). Also
  // called by checkpoint(), which waits for the write first; runs once per batch.
  void manifest_written(const std::shared_ptr<ManifestWrite>& w) {
    if (w->completed) return;
    w->completed = true;
    if (manifest_in_flight == w) manifest_in_flight.reset();
    if (const std::exception_ptr error = w->written.get())
      retry_write("writing the checkpoint", error, [&] { atomic_write(ckpt_path(), encode_manifest(w->snap, w->crcs)); });
    durable_crc = w->crcs;
    for (const auto& job : w->batch) {
      retire_buffers(st.fragments[job->p]);
      apply_merge(st, *job, /*record=*/false);
      durable_version[job->p] = job->version + 1;
    }
    merges_since_ckpt = 0;
    if (o.tape_max_bytes > 0 && tape->bytes() > o.tape_max_bytes) rotate_tape();
    for (const auto& job : w->batch) publish(*job);
    pump_manifest();
  }

  // The merge into state s (the syncer's, or a manifest's copy): the new buffers and version,
  // the counters and the registry; with `record`, the merge record is made from s and kept in
  // the job and in the fragment (the checkpoint holds each fragment's last merge record).
  void apply_merge(SyncerState& s, MergeJob& j, bool record) {
    const std::uint32_t p = j.p;
    FragmentState& f = s.fragments[p];
    f.params = j.new_params;
    f.momentum = j.new_momentum;
    f.pub = j.new_pub;
    f.version = j.version + 1;
    ++s.outer_steps;
    std::uint64_t total = 0;
    for (auto x : j.samples) total += x;
    for (std::size_t i = 0; i < j.who.size(); ++i) {
      auto& reg = s.registry[j.who[i]];
      if (reg.id.empty()) reg.id = j.who[i];
      ++reg.merged;
      reg.samples += j.samples[i];
    }
    s.samples_merged += total;
    const double spread = j.round_last - j.round_first;
    if (!record) {
      f.last_merge_event = j.record.dump();
      return;
    }
    json downlink = {{"encoding", downlink_name(o.downlink)}};
    if (o.downlink != Downlink::f32) {
      downlink["update_max"] = j.published.update_max;
      downlink["residual_max"] = j.published.residual_max;
      if (j.update) downlink["public_crc"] = j.public_crc;
      else downlink["encoding"] = "f32";  // θ − P not finite: P = θ, sent in full
    }
    const double now = steady_now();
    json rec = {{"event", "merge"}, {"time", unix_now()}, {"fragment", p}, {"version", f.version},
                {"learners", j.who}, {"outer_step", s.outer_steps}, {"weights", j.weights},
                {"staleness", j.staleness}, {"samples", j.samples}, {"reason", j.reason}, {"quorum", j.quorum},
                {"live", live_ids().size()}, {"active", j.active}, {"every_active", j.every_active},
                {"grace_s", j.wait.bound}, {"waited_s", j.decided - j.round_first},
                {"expected", j.wait.expected}, {"spread_s", spread},
                {"round_latency_s", now - j.round_first}, {"merge_s", j.compute_s}, {"worker", j.offloaded},
                {"update_norm", j.update_norm},
                {"merge", merge_rule_name(o.merge)}, {"agreement", j.agreement}, {"push_norms", j.push_norms},
                {"partial_merge", partial_merge_name(o.partial_merge)}, {"share", j.share},
                {"round_learners", j.expected},
                {"heloco", {{"kept", j.hs.kept}, {"shrunk", j.hs.shrunk}, {"reoriented", j.hs.reoriented}}}};
    // What each connected learner is sent (bytes on the wire, frame included): the update, or the
    // full fragment to a learner that does not hold the update's base (connections as the
    // record is made).
    if (j.update) downlink["update_bytes"] = j.update->size() + kHeaderBytes + kSealBytes;
    downlink["fragment_bytes"] = f.params->size() * 4 + 20 + kHeaderBytes + kSealBytes;
    std::uint64_t to_update = 0, to_full = 0;
    for (const auto& c : conns)
      if (c->session && !c->closed)
        ++(j.update && p < c->sent.size() && c->sent[p] == j.version ? to_update : to_full);
    downlink["updates_sent"] = to_update;
    downlink["fragments_sent"] = to_full;
    rec["downlink"] = downlink;
    j.record = std::move(rec);
    f.last_merge_event = j.record.dump();
  }

  // A merge applied to st becomes visible: no longer in flight, its tape record, the broadcast.
  void publish(MergeJob& j) {
    const std::uint32_t p = j.p;
    merging[p] = 0;
    --merges_in_flight;
    std::uint64_t total = 0;
    for (auto x : j.samples) total += x;
    samples_in_flight -= total;
    // Durable before visible: the checkpoint naming this version (with θ and P) was written
    // before the tape record and before any learner sees the new version. The record's time and
    // round latency are those of this moment (the checkpoint's copy has those of its making).
    j.record["time"] = unix_now();
    j.record["round_latency_s"] = steady_now() - j.round_first;
    taped_raw(j.record);
    note_merged(j);
    broadcast_fragment(p, j.update);
    check_budget();
  }

  // Tells each connected learner whose push this merge holds which version holds it (protocol 6),
  // ahead of the update it is about to be sent: a learner that keeps its own progress across
  // merges (sync.carry) carries from that push on. Queued where the update will go (a small
  // fragment's update overtakes other fragments' bulk frames, and the note goes with it).
  void note_merged(const MergeJob& j) {
    const std::uint64_t version = st.fragments[j.p].version;
    for (std::size_t i = 0; i < j.who.size(); ++i) {
      const std::uint64_t push_base = j.version - j.staleness[i];
      const auto payload = std::make_shared<const std::string>(MergedMsg{j.p, version, push_base}.encode());
      for (const auto& c : conns) {
        if (!c->session || c->closed || c->learner_id != j.who[i]) continue;
        queue_for_fragment(c, j.p, Outgoing{{}, MsgType::merged, payload, nullptr}, true);
      }
    }
  }

  // Every fragment's data file that the last manifest does not name at its version, then the
  // manifest, on the I/O thread (the initial state, a due checkpoint with checkpoint_every > 1,
  // the final cut, a stop). A manifest write in flight is waited for and its merges made
  // visible first, so this one names them too and no older manifest lands after it.
  void checkpoint() {
    while (const auto w = manifest_in_flight) {
      w->written.wait();
      manifest_written(w);
    }
    st.wall_seconds += steady_now() - started;
    started = steady_now();
    persist("writing the checkpoint", [&] {
      durable_crc.resize(st.fragments.size(), 0);
      if (durable_version.size() != st.fragments.size()) durable_version.assign(st.fragments.size(), kNotSent);
      std::vector<std::filesystem::path> superseded;
      for (std::uint32_t p = 0; p < st.fragments.size(); ++p) {
        if (durable_version[p] == st.fragments[p].version) continue;
        durable_crc[p] = save_fragment_data(o.state_dir, p, st.fragments[p]);
        if (durable_version[p] != kNotSent) superseded.push_back(o.state_dir / fragment_data_name(p, durable_version[p]));
        durable_version[p] = st.fragments[p].version;
      }
      atomic_write(ckpt_path(), encode_manifest(st, durable_crc));
      std::error_code ec;
      for (const auto& f : superseded) std::filesystem::remove(f, ec);
    });
    merges_since_ckpt = 0;
    if (o.tape_max_bytes > 0 && tape->bytes() > o.tape_max_bytes) rotate_tape();
  }

  // Right after a checkpoint: the new tape's first record carries every fragment's version (a
  // restart reads them from it), and the rotated tapes keep the history.
  void rotate_tape() {
    std::vector<std::uint64_t> versions;
    for (const auto& f : st.fragments) versions.push_back(f.version);
    const std::uint64_t bytes = tape->bytes();
    persist("rotating the event tape", [&] {
      tape->rotate(o.tape_keep, {{"event", "tape_rotated"}, {"time", unix_now()}, {"fragment", -1}, {"version", -1},
                                 {"learners", json::array()}, {"versions", versions},
                                 {"outer_steps", st.outer_steps}, {"previous_bytes", bytes},
                                 {"previous", rotated_tape_path(tape->path(), 1).filename().string()}});
    });
    spdlog::info("syncer: event tape rotated at {} bytes ({} kept)", bytes, o.tape_keep);
  }

  void check_budget() {
    if (finishing) return;
    if (o.budget_outer_steps && st.outer_steps >= o.budget_outer_steps) return begin_final("budget_outer_steps");
    if (o.budget_samples && st.samples_merged >= o.budget_samples) return begin_final("budget_samples");
    if (o.budget_seconds > 0 && st.wall_seconds + (steady_now() - started) >= o.budget_seconds)
      return begin_final("budget_seconds");
  }

  // ---------------------------------------------------------------- terminal handshake

  void begin_final(const std::string& reason) {
    if (finishing) return;
    if (merges_in_flight > 0) {
      // The cut holds every merge that was started: it is taken when the last one lands.
      if (!deferred_final) deferred_final = reason;
      return;
    }
    finishing = true;
    final_reason = reason;
    final_started = steady_now();
    for (std::uint32_t p = 0; p < rounds.size(); ++p) {
      std::vector<std::string> who;
      for (const auto& q : rounds[p].pushes) who.push_back(q.learner);
      if (!who.empty())
        taped("discard", p, static_cast<std::int64_t>(st.fragments[p].version), who,
                    {{"note", "pending pushes after the final cut"}});
      rounds[p] = Round{};
    }
    st.finished = true;
    checkpoint();
    final_cut = FinalCut{};
    shared_cut.reset();
    for (const auto& f : st.fragments) {
      final_cut.versions.push_back(f.version);
      final_cut.fragments.push_back(f.public_values());
    }
    final_cut.digest = state_digest(final_cut.versions, final_cut.fragments);
    write_final_tensors();
    expect_acks.clear();
    for (const auto& id : live_ids()) expect_acks.insert(id);
    taped("final_cut", -1, -1, live_ids(),
                {{"reason", reason}, {"digest", hex(final_cut.digest.data(), 32)}, {"versions", final_cut.versions},
                 {"outer_steps", st.outer_steps}, {"samples", st.samples_merged}});
    spdlog::info("syncer: final cut ({}) at outer step {}", reason, st.outer_steps);
    for (const auto& c : conns)
      if (c->session && (!c->awaiting_holds || !st.initialised)) send_final_cut(c);
  }

  // The final cut's tensors, in canonical order, as raw little-endian float32 (final_cut.bin).
  void write_final_tensors() {
    if (!st.initialised) return;
    std::vector<std::vector<float>> t;
    std::vector<std::span<float>> spans;
    for (const auto& s : st.layout.tensors) t.emplace_back(s.numel);
    for (auto& v : t) spans.emplace_back(v);
    for (std::uint32_t p = 0; p < st.fragments.size(); ++p) apply_fragment(st.layout, p, final_cut.fragments[p], spans);
    persist("writing final_cut.bin", [&] {
      AtomicFile out(o.state_dir / "final_cut.bin");
      for (const auto& v : t) out.write(v.data(), v.size() * 4);
      out.commit();
    });
  }

  void finish_if_done(double now) {
    if (!finishing || done) return;
    bool all = true;
    for (const auto& id : expect_acks)
      if (!acked.count(id) && st.registry[id].live) all = false;
    if (!all && now - final_started < o.timeouts.final_timeout_s) return;
    std::set<std::string> missing_set;
    for (const auto& id : expect_acks)
      if (!acked.count(id)) missing_set.insert(id);
    for (const auto& id : previous_missing)
      if (!acked.count(id)) missing_set.insert(id);
    const std::vector<std::string> missing(missing_set.begin(), missing_set.end());
    const std::vector<std::string> acks(acked.begin(), acked.end());
    if (previous_acked && *previous_acked == acked) {
      // A restart after the marker was written, and nobody new acknowledged: the marker stays
      // exactly as it was (a restart never rewrites it with fewer acknowledgements).
      taped("final", -1, -1, acks,
            {{"digest", hex(final_cut.digest.data(), 32)}, {"missing", missing}, {"marker", "unchanged"}});
      spdlog::info("syncer: the final marker stands ({} acknowledged, {} missing)", acked.size(), missing.size());
      return shutdown(0);
    }
    json marker = {{"run_id", o.run_name}, {"reason", final_reason}, {"digest", hex(final_cut.digest.data(), 32)},
                   {"versions", final_cut.versions}, {"outer_steps", st.outer_steps}, {"samples", st.samples_merged},
                   {"acked", acks}, {"missing", missing}, {"time", unix_now()}};
    persist("writing final.json", [&] { atomic_write(o.state_dir / "final.json", marker.dump(2) + "\n"); });
    taped("final", -1, -1, acks, {{"digest", hex(final_cut.digest.data(), 32)}, {"missing", missing}});
    spdlog::info("syncer: final marker written ({} acknowledged, {} missing)", acked.size(), missing.size());
    shutdown(0);
  }

  // Restarted after the final cut: a marker already written for the same cut keeps its
  // acknowledgements and reason; new acknowledgements only add to it.
  std::optional<std::set<std::string>> previous_acked;
  std::set<std::string> previous_missing;
  void adopt_previous_marker() {
    const auto path = o.state_dir / "final.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    try {
      const json m = json::parse(read_file(path));
      if (m.value("digest", "") != hex(final_cut.digest.data(), 32)) {
        spdlog::warn("syncer: {} belongs to another cut than the checkpoint's; it will be replaced", path.string());
        return;
      }
      std::set<std::string> a;
      for (const auto& x : m.at("acked")) a.insert(x.get<std::string>());
      for (const auto& x : m.at("missing")) previous_missing.insert(x.get<std::string>());
      acked.insert(a.begin(), a.end());
      previous_acked = a;
      final_reason = m.value("reason", final_reason);
    } catch (const std::exception& e) {
      spdlog::warn("syncer: cannot read {} ({}); it will be replaced", path.string(), e.what());
    }
  }

  void shutdown(int code) {
    if (done) return;
    if (!failed) {
      try {
        flush_reject_summary(steady_now(), true);  // the last interval's count is not lost
      } catch (const PersistFailure&) {
      }
    }
    done = true;
    exit_code = code;
    boost::system::error_code ec;
    acceptor.close(ec);
    for (const auto& c : std::set<ConnPtr>(conns)) close(c);
    io.stop();
  }

  // ---------------------------------------------------------------- housekeeping

  // The housekeeping loop cannot die silently: a failure in it stops the syncer with exit code 1
  // (and a log line saying why), so a supervisor restarts it from its checkpoint.
  awaitable<void> ticker() {
    try {
      co_await ticker_loop();
    } catch (const PersistFailure&) {
      // fatal() has said why and stopped the syncer.
    } catch (const std::exception& e) {
      spdlog::critical("syncer: housekeeping failed: {}; stopping with exit code 1", e.what());
      failed = true;
      shutdown(static_cast<int>(ExitCode::failure));
    }
  }

  awaitable<void> ticker_loop() {
    asio::steady_timer t(io);
    const double period = std::clamp(o.timeouts.heartbeat_s / 4, 0.005, 0.05);
    double last_tick = steady_now();
    while (!done) {
      t.expires_after(secs(period));
      boost::system::error_code ec;
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      if (done) break;
      const double now = steady_now();
      // Time this thread spent blocked (a large merge or broadcast) is not the learners'
      // silence: their frames wait unread in the socket buffers meanwhile. Shift their
      // last-seen times by the stall so a busy syncer never times out live learners.
      const double stall = now - last_tick - 2 * period;
      last_tick = now;
      if (stall > 0)
        for (auto& [id, r] : st.registry) r.last_seen += stall;
      for (auto& [id, r] : st.registry)
        if (r.live && now - r.last_seen > o.timeouts.learner_timeout_s) {
          r.live = false;
          if (!finishing) lost_since[id] = now;
          taped("timeout", -1, -1, {id}, {{"silent_s", now - r.last_seen}, {"live", live_ids().size()}});
        }
      ask_for_init();
      for (std::uint32_t p = 0; p < rounds.size(); ++p) try_close(p, now);
      check_budget();
      check_all_done(now);
      note_lost_at_cut();
      finish_if_done(now);
      flush_reject_summary(now);
    }
  }

  int run() {
    tcp::endpoint ep(asio::ip::make_address(o.listen_host), o.listen_port);
    acceptor.open(ep.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen();
    bound_port = acceptor.local_endpoint().port();
    // Installed before the port file says the syncer is up: a SIGTERM from then on takes the
    // final cut (asio keeps a signal that arrives before the handler is waiting).
    asio::signal_set signals(io, SIGINT, SIGTERM);
    write_lock_holder(o.listen_host + ":" + std::to_string(bound_port));
    reject_window_start = steady_now();
    try {
      persist("writing the port file",
              [&] { atomic_write(o.state_dir / "port", std::to_string(bound_port) + "\n"); });
      size_connection_caps();
      taped("listen", -1, -1, {}, {{"address", o.listen_host + ":" + std::to_string(bound_port)}});
      spdlog::info("syncer: listening on {}:{}", o.listen_host, bound_port);
      if (st.finished) {
        // Restarted during (or after) the terminal handshake: offer the same cut again.
        finishing = false;
        begin_final("restart_after_final_cut");
        adopt_previous_marker();
      }
    } catch (const PersistFailure&) {
      return exit_code;
    }
    std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                                   int sig) {
      if (ec) return;
      if (!finishing && !deferred_final) {
        spdlog::warn("syncer: signal {}: taking the final cut", sig);
        begin_final("signal");
        signals.async_wait(on_signal);
      } else {
        spdlog::warn("syncer: second signal: stopping without waiting for acknowledgements");
        checkpoint();
        shutdown(static_cast<int>(ExitCode::interrupted));
      }
    };
    signals.async_wait(on_signal);
    asio::co_spawn(io, accept_loop(), asio::detached);
    asio::co_spawn(io, ticker(), asio::detached);
    for (;;) {
      try {
        io.run();
        break;
      } catch (const PersistFailure&) {
        // Raised by a handler after fatal() stopped the syncer; the loop drains what is left.
        if (done) break;
      }
    }
    return exit_code;
  }
};

Syncer::Syncer(SyncerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Syncer::~Syncer() = default;
int Syncer::run() { return impl_->run(); }
std::uint16_t Syncer::port() const { return impl_->bound_port; }
void Syncer::stop() {
  asio::post(impl_->io, [this] {
    impl_->checkpoint();
    impl_->shutdown(static_cast<int>(ExitCode::interrupted));
  });
}

}  // namespace yeto::sync
