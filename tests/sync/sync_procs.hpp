// Helpers of the multi-process sync tests: the real `yeto-host syncer` and test learner
// islands (sync_learner_driver) as child processes on 127.0.0.1, their run directory, tape
// checks, and raw-socket peers. Test-only; every wait is bounded.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "sync/protocol.hpp"
#include "sync/tape.hpp"

extern char** environ;

namespace yeto::sync_test {

namespace ys = yeto::sync;
namespace fs = std::filesystem;
using json = nlohmann::json;

inline namespace helpers {

using Clock = std::chrono::steady_clock;

class Proc {
 public:
  Proc(std::vector<std::string> argv, const fs::path& log) : argv_(std::move(argv)) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (auto& s : argv_) args.push_back(s.data());
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Proc() {
    if (running()) kill9();
  }
  bool running() const { return pid_ > 0 && !status_; }
  pid_t pid() const { return pid_; }
  // Exit code, 128+signal, or -1 when still running after `seconds`.
  int wait(double seconds) {
    if (status_) return *status_;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      int st = 0;
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return *status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  void kill9() {
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    wait(10);
  }

 private:
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

inline const std::string kTensors = "w1:300,w2:200,w3:100,w4:50";
inline const std::string kSecret = "test-run-secret-0123456789abcdef";

struct RunDir {
  yeto::test::TempDir dir;
  fs::path state = dir / "state";
  fs::path secret = dir.write("run.secret", kSecret + "\n");
  std::vector<std::string> syncer_sets;
  // Put in front of the syncer's command (e.g. prlimit and its limits).
  std::vector<std::string> syncer_prefix;
  std::uint16_t port = 0;

  std::vector<std::string> syncer_argv(std::uint16_t listen_port) const {
    std::vector<std::string> a = syncer_prefix;
    const std::vector<std::string> cmd = {YETO_HOST_BIN, "syncer", "--listen", "127.0.0.1:" + std::to_string(listen_port),
                                  "--run-secret-file", secret.string(), "--state-dir", state.string(),
                                  "--log-level", "warn"};
    a.insert(a.end(), cmd.begin(), cmd.end());
    const std::vector<std::string> base = {"sync.heartbeat_s=0.1", "sync.learner_timeout_s=0.8",
                                           "sync.grace_max_s=1.0", "sync.round_deadline_s=2.0",
                                           "sync.reconnect_budget_s=15", "sync.final_timeout_s=5",
                                           "sync.outer_lr=0.7", "sync.outer_momentum=0.5",
                                           // the test learners' H (learner_driver --inner-steps)
                                           "sync.inner_steps=10",
                                           // as the test learners (learner_driver --carry 0): rounds
                                           // wait less than a period (sync.grace_fraction 0.6)
                                           "sync.carry=false"};
    for (const auto& s : base) {
      a.push_back("--set");
      a.push_back(s);
    }
    for (const auto& s : syncer_sets) {
      a.push_back("--set");
      a.push_back(s);
    }
    return a;
  }
  std::unique_ptr<Proc> start_syncer(std::uint16_t listen_port = 0) {
    std::error_code ec;
    fs::remove(state / "port", ec);
    auto p = std::make_unique<Proc>(syncer_argv(listen_port), dir / "syncer.log");
    const auto end = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < end && !fs::exists(state / "port")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(state / "port")) port = static_cast<std::uint16_t>(std::stoi(yeto::test::read_text(state / "port")));
    return p;
  }
  std::unique_ptr<Proc> start_learner(const std::string& id, int seed, const std::string& extra_events = "",
                                      const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> a = {SYNC_LEARNER_DRIVER, "--syncer", "127.0.0.1:" + std::to_string(port), "--secret",
                                  secret.string(), "--id", id, "--seed", std::to_string(seed), "--tensors", kTensors,
                                  "--out", (dir / (id + ".final.bin")).string(),
                                  "--events", (dir / (id + extra_events + ".events.jsonl")).string(),
                                  "--heartbeat", "0.1", "--learner-timeout", "0.8", "--grace-max", "1.0",
                                  "--round-deadline", "2.0", "--reconnect-budget", "15", "--step-ms", "4"};
    a.insert(a.end(), extra_args.begin(), extra_args.end());
    return std::make_unique<Proc>(a, dir / (id + ".log"));
  }
  std::vector<json> tape() const { return ys::read_tape_history(state / "tape.jsonl"); }
  std::size_t merges() const {
    std::size_t n = 0;
    for (const auto& r : tape())
      if (r["event"] == "merge") ++n;
    return n;
  }
  bool wait_tape(const std::function<bool(const std::vector<json>&)>& pred, double seconds) const {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      if (pred(tape())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }
  std::string logs() const {
    std::string s;
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().extension() == ".log") s += "==== " + e.path().filename().string() + "\n" + yeto::test::read_text(e.path());
    return s;
  }
  // Once the tape holds `merges` merges (within `seconds`), kills the syncer with SIGKILL and
  // starts it again on its port 300 ms later. Returns the merges on the tape at the kill, or
  // nullopt when they did not come in time or the new syncer did not take the same port.
  std::optional<std::size_t> kill_and_restart_syncer(std::unique_ptr<Proc>& syncer, std::size_t at, double seconds) {
    const std::uint16_t was = port;
    if (!wait_tape([at](const std::vector<json>& t) {
          return static_cast<std::size_t>(
                     std::count_if(t.begin(), t.end(), [](const json& r) { return r["event"] == "merge"; })) >= at;
        }, seconds))
      return std::nullopt;
    syncer->kill9();
    const std::size_t before = merges();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    syncer = start_syncer(was);
    if (port != was) return std::nullopt;
    return before;
  }
  std::string final_cut() const { return yeto::test::read_text(state / "final_cut.bin"); }
  json final_marker() const { return json::parse(yeto::test::read_text(state / "final.json")); }
};

inline std::set<std::string> learners_of(const json& r) {
  std::set<std::string> s;
  for (const auto& x : r["learners"]) s.insert(x.get<std::string>());
  return s;
}

// Every fragment's merge versions run 1, 2, 3, ... with no gap and no repeat; returns merges.
inline std::size_t expect_continuous(const std::vector<json>& tape, std::map<std::int64_t, std::uint64_t>* last = nullptr) {
  std::map<std::int64_t, std::uint64_t> v;
  std::size_t n = 0;
  for (const auto& r : tape) {
    if (r["event"] == "rollback") ADD_FAILURE() << "rollback on the tape: " << r.dump();
    if (r["event"] != "merge") continue;
    const auto p = r["fragment"].get<std::int64_t>();
    const auto ver = r["version"].get<std::uint64_t>();
    EXPECT_EQ(ver, v[p] + 1) << "fragment " << p << " jumps from " << v[p] << " to " << ver;
    v[p] = ver;
    ++n;
  }
  std::uint64_t seq = 0;
  for (const auto& r : tape) {
    EXPECT_EQ(r["seq"].get<std::uint64_t>(), seq + 1) << r.dump();
    seq = r["seq"].get<std::uint64_t>();
  }
  if (last) *last = v;
  return n;
}

// `may_miss`: learners the final marker may name as missing (killed before the cut without
// having timed out yet).
inline void expect_bit_identical_to_final_cut(const RunDir& run, const std::vector<std::string>& ids,
                                              const std::set<std::string>& may_miss = {}) {
  const std::string cut = run.final_cut();
  ASSERT_EQ(cut.size(), (300 + 200 + 100 + 50) * 4u);
  for (const auto& id : ids) {
    const std::string mine = yeto::test::read_text(run.dir / (id + ".final.bin"));
    EXPECT_TRUE(mine == cut) << id << " differs from the final cut";
  }
  const json m = run.final_marker();
  std::set<std::string> acked;
  for (const auto& x : m["acked"]) acked.insert(x.get<std::string>());
  for (const auto& id : ids) EXPECT_TRUE(acked.count(id)) << id << " did not acknowledge: " << m.dump();
  for (const auto& x : m["missing"]) EXPECT_TRUE(may_miss.count(x.get<std::string>())) << m.dump();
}

// A learner's JSON-lines progress events (RUN_DIR/NAME.events.jsonl).
inline std::vector<json> learner_events(const RunDir& run, const std::string& name) {
  std::vector<json> out;
  std::ifstream in(run.dir / (name + ".events.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The downlink, on the tape and at the learners (`lives`: event files, one per learner process).
// Every merge's broadcast has the expected encoding; with q4, the public state P stays within
// one q4 step of the master θ after each update (|θ − P| <= max|θ − P before| / 7) and an update
// is much smaller than the fragment. Learners applied updates only on exactly their base (no
// `update_mismatch`, no disconnect over an update), never applied a version twice before the
// final cut, and received updates (q4) or none (f32). Returns the updates received.
inline std::uint64_t expect_downlink(const RunDir& run, const std::vector<std::string>& lives,
                                     const std::string& encoding) {
  std::size_t merges = 0;
  for (const auto& r : run.tape()) {
    if (r["event"] != "merge") continue;
    ++merges;
    const json& d = r["downlink"];
    EXPECT_EQ(d["encoding"], encoding) << r.dump();
    if (encoding != "q4") continue;
    EXPECT_LE(d["residual_max"].get<double>(), d["update_max"].get<double>() / 7 + 1e-6) << r.dump();
    EXPECT_LT(d["update_bytes"].get<double>() * 4, d["fragment_bytes"].get<double>()) << r.dump();
  }
  EXPECT_GT(merges, 0u);
  std::uint64_t updates = 0;
  for (const auto& life : lives) {
    std::map<std::int64_t, std::uint64_t> last;
    bool final_seen = false, closed = false;
    for (const auto& e : learner_events(run, life)) {
      const std::string ev = e["event"];
      EXPECT_NE(ev, "update_mismatch") << life << ": " << e.dump();
      if (ev == "disconnected") {
        EXPECT_EQ(e["reason"].get<std::string>().find("update"), std::string::npos) << life << ": " << e.dump();
      }
      if (ev == "final_cut") final_seen = true;
      if (ev == "applied" && !final_seen) {
        const auto p = e["fragment"].get<std::int64_t>();
        const auto v = e["version"].get<std::uint64_t>();
        if (last.count(p)) {
          EXPECT_GT(v, last[p]) << life << " applied version " << v << " of fragment " << p << " again";
        }
        last[p] = v;
      }
      if (ev == "closed") {
        closed = true;
        const auto u = e.value("updates_received", std::uint64_t{0});
        updates += u;
        if (encoding == "q4") {
          EXPECT_GT(u, 0u) << life;
        } else {
          EXPECT_EQ(u, 0u) << life;
        }
      }
    }
    EXPECT_TRUE(closed) << life << " has no `closed` event";
  }
  return updates;
}

inline int dial(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}
inline void send_all(int fd, const std::string& s) {
  std::size_t o = 0;
  while (o < s.size()) {
    const ssize_t n = ::send(fd, s.data() + o, s.size() - o, MSG_NOSIGNAL);
    if (n <= 0) return;
    o += static_cast<std::size_t>(n);
  }
}
inline std::optional<ys::Frame> read_frame(int fd, ys::FrameDecoder& d) {
  char buf[4096];
  for (;;) {
    if (auto f = d.next()) return f;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return std::nullopt;
    d.feed(buf, static_cast<std::size_t>(n));
  }
}
// True when the syncer closes the connection (recv returns 0 or an error) within 5 s.
inline bool closed_by_peer(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

}  // namespace helpers

}  // namespace yeto::sync_test
