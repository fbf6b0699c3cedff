#include "sync/launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "sync/clock.hpp"
#include "sync/tape.hpp"

extern char** environ;

namespace yeto::sync {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

volatile std::sig_atomic_t g_signals = 0;
extern "C" void on_launch_signal(int) { g_signals = g_signals + 1; }

// The torchrun variables: set for the ranks of a multi-rank island, removed for everyone else.
const char* const kRankVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

// This process's environment without the torchrun variables, plus `set` (NAME=VALUE).
std::vector<std::string> child_environment(const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const char* v : kRankVars) drop = drop || name == v;
    if (!drop) env.push_back(kv);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// A TCP port on 127.0.0.1 that is free now (the kernel's pick), not one of `taken`.
std::uint16_t free_port(const std::set<std::uint16_t>& taken) {
  for (int attempt = 0; attempt < 32; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw Error(std::string("cannot open a socket to pick MASTER_PORT: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    ::close(fd);
    if (!ok) throw Error(std::string("cannot bind 127.0.0.1 to pick MASTER_PORT: ") + std::strerror(errno));
    const auto port = ntohs(a.sin_port);
    if (!taken.count(port)) return port;
  }
  throw Error("cannot find a free MASTER_PORT on 127.0.0.1");
}

class Child {
 public:
  Child(std::string name, std::vector<std::string> argv, const fs::path& log, const std::vector<std::string>& env_set = {})
      : name_(std::move(name)) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    // Own process group: a terminal's Ctrl-C reaches the launcher only, which forwards it.
    posix_spawnattr_setpgroup(&at, 0);
    // The launcher's SIGINT/SIGTERM handlers must not be inherited as "ignored" or altered.
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> args;
    for (auto& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    std::vector<std::string> env = child_environment(env_set);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, &at, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) throw Error("cannot start " + argv[0] + " (" + name_ + "): " + std::strerror(rc));
  }
  ~Child() {
    // Only on the error paths of run_islands: never leave a child behind.
    if (!status_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  bool running() const { return !status_; }
  std::optional<int> poll() {
    if (status_) return status_;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }
  void signal(int sig) const {
    if (!status_) ::kill(pid_, sig);
  }
  const std::string& name() const { return name_; }
  int status() const { return status_.value_or(-1); }

 private:
  std::string name_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

std::string log_tail(const fs::path& p, std::size_t max = 2000) {
  std::string s;
  try {
    s = read_file(p);
  } catch (const std::exception&) {
    return "";
  }
  return s.size() > max ? "..." + s.substr(s.size() - max) : s;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// 32 random bytes, hex; kept when the run directory already has one (a resumed run).
fs::path ensure_secret(const fs::path& run_dir) {
  const fs::path p = run_dir / "run.secret";
  if (fs::exists(p)) return p;
  if (sodium_init() < 0) throw Error("libsodium failed to initialise");
  unsigned char b[32];
  randombytes_buf(b, sizeof b);
  static const char* k = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : b) {
    hex.push_back(k[c >> 4]);
    hex.push_back(k[c & 15]);
  }
  hex.push_back('\n');
  atomic_write(p, hex, 0600);  // private from its first byte, never chmod-ed after
  sodium_memzero(hex.data(), hex.size());
  sodium_memzero(b, sizeof b);
  return p;
}

struct SignalScope {
  struct sigaction old_int {}, old_term {};
  SignalScope() {
    g_signals = 0;
    struct sigaction sa {};
    sa.sa_handler = on_launch_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

std::vector<json> read_jsonl(const fs::path& p) {
  if (!fs::exists(p)) return {};
  return read_tape_records(p);
}

// The syncer's tape records a correct acknowledgement of the final cut by learner `id`.
bool acknowledged_cut(const fs::path& state, const std::string& id) {
  for (const auto& r : read_tape_history(state / "tape.jsonl"))
    if (r.value("event", "") == "final_ack" && r.value("ok", false) && r.contains("learners"))
      for (const auto& l : r["learners"])
        if (l == id) return true;
  return false;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

// The islands that acknowledged a finished run's final cut ("island-0, island-1"), when
// STATE_DIR/final.json records one that every one of `islands` islands holds; else nullopt.
std::optional<std::string> finished_run(const fs::path& state, std::uint32_t islands) {
  const fs::path marker = state / "final.json";
  if (!fs::exists(marker)) return std::nullopt;
  const json fin = json::parse(read_file(marker), nullptr, false);
  if (!fin.is_object() || !fin.contains("acked") || !fin["acked"].is_array()) return std::nullopt;
  if (fin.contains("missing") && !(fin["missing"].is_array() && fin["missing"].empty())) return std::nullopt;
  std::set<std::string> acked;
  for (const auto& a : fin["acked"])
    if (a.is_string()) acked.insert(a.get<std::string>());
  for (std::uint32_t i = 0; i < islands; ++i)
    if (!acked.count("island-" + std::to_string(i))) return std::nullopt;
  return join(std::vector<std::string>(acked.begin(), acked.end()), ", ");
}

}  // namespace

int LaunchResult::exit_code() const {
  for (int c : island_exits)
    if (c != 0) return c;
  return syncer_exit;
}

LaunchResult run_islands(const IslandLaunch& L) {
  if (L.islands < 1) throw UsageError("--islands must be at least 1");
  if (!L.learner_argv || L.syncer_argv.empty()) throw Error("run_islands: no child commands");
  fs::create_directories(L.run_dir);
  const fs::path state = L.run_dir / "syncer";
  fs::create_directories(state);
  // A run every island already ended on (the syncer's final marker, nobody missing): starting it
  // again would only restart its syncer on the final cut, which has no state to give islands.
  if (const auto done = finished_run(state, L.islands)) {
    spdlog::info("embedded run: {} holds a finished run (final cut acknowledged by {}): nothing to train; write to "
                 "another run directory to train again",
                 L.run_dir.string(), *done);
    LaunchResult res;
    res.syncer_exit = 0;
    res.island_exits.assign(L.islands, 0);
    res.island_restarts.assign(L.islands, 0);
    res.island_given_up.assign(L.islands, false);
    return res;
  }
  const fs::path secret = ensure_secret(L.run_dir);
  std::error_code ec;
  fs::remove(state / "port", ec);

  SignalScope signals;
  LaunchResult res;
  auto syncer_cmd = [&](std::uint16_t port) {
    std::vector<std::string> a = L.syncer_argv;
    a.insert(a.end(), {"--listen", "127.0.0.1:" + std::to_string(port), "--run-secret-file", secret.string(),
                       "--state-dir", state.string()});
    return a;
  };
  auto syncer = std::make_unique<Child>("syncer", syncer_cmd(0), state / "syncer.log");
  const double t0 = steady_now();
  while (!fs::exists(state / "port")) {
    if (syncer->poll())
      throw Error("the syncer exited with code " + std::to_string(syncer->status()) + " before it listened:\n" +
                  log_tail(state / "syncer.log"));
    if (steady_now() - t0 > L.startup_timeout_s) {
      syncer->signal(SIGKILL);
      throw Error("the syncer did not bind a port within " + std::to_string(L.startup_timeout_s) + " s; see " +
                  (state / "syncer.log").string());
    }
    sleep_ms(20);
  }
  const auto port = static_cast<std::uint16_t>(std::stoi(trim(read_file(state / "port"))));
  spdlog::info("embedded run: syncer on 127.0.0.1:{} (state {}), {} island(s)", port, state.string(), L.islands);

  // The launcher's own record of the islands' lives (RUN_DIR/launch.jsonl, appended; a
  // `launch` record opens each launch): exits, restarts and islands given up.
  std::ofstream launch_log(L.run_dir / "launch.jsonl", std::ios::app);
  auto note = [&](json rec) {
    rec["time"] = unix_now();
    launch_log << rec.dump() << "\n";
    launch_log.flush();
  };
  note({{"event", "launch"}, {"islands", L.islands}, {"island_restarts", L.island_restarts}});

  // Every island with its ranks (a multi-rank island is started and restarted as a whole).
  struct Island {
    IslandSlot slot;
    std::vector<std::string> argv;
    std::vector<std::unique_ptr<Child>> ranks;
    enum class Phase { running, stopping, waiting, ended } phase = Phase::running;
    int failed = 0;             // the first failing rank's code in this life
    std::uint32_t restarts = 0;
    double stop_since = 0, restart_at = 0;
    bool given_up = false;      // failed and not restarted again
    bool ack_checked = false, acked = false;  // this life acknowledged the final cut (tape)
  };
  std::vector<Island> islands(L.islands);
  std::set<std::uint16_t> ports = {port};
  auto start_island = [&](Island& is) {
    const IslandSlot& s = is.slot;
    is.ranks.clear();
    is.failed = 0;
    is.ack_checked = is.acked = false;
    is.phase = Island::Phase::running;
    if (s.ranks == 1) {
      is.ranks.push_back(std::make_unique<Child>(s.id, is.argv, s.dir / "learner.log"));
      return;
    }
    // A fresh rendezvous port for every life: the last one may still be held by a dead rank's
    // sockets.
    const std::uint16_t master = free_port(ports);
    ports.insert(master);
    spdlog::info("embedded run: {} has {} ranks (rendezvous 127.0.0.1:{})", s.id, s.ranks, master);
    for (std::uint32_t r = 0; r < s.ranks; ++r) {
      const std::vector<std::string> env = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(s.ranks),
                                            "LOCAL_RANK=" + std::to_string(r),
                                            "LOCAL_WORLD_SIZE=" + std::to_string(s.ranks), "MASTER_ADDR=127.0.0.1",
                                            "MASTER_PORT=" + std::to_string(master)};
      const fs::path log = s.dir / (r == 0 ? std::string("learner.log") : "learner-rank" + std::to_string(r) + ".log");
      is.ranks.push_back(std::make_unique<Child>(s.id + (r == 0 ? "" : "/rank" + std::to_string(r)), is.argv, log, env));
    }
  };
  for (std::uint32_t i = 0; i < L.islands; ++i) {
    Island& is = islands[i];
    IslandSlot& s = is.slot;
    s.index = i;
    s.id = "island-" + std::to_string(i);
    s.dir = L.run_dir / s.id;
    s.syncer = "127.0.0.1:" + std::to_string(port);
    s.secret = secret;
    s.ranks = i < L.island_ranks.size() ? std::max<std::uint32_t>(1, L.island_ranks[i]) : 1;
    fs::create_directories(s.dir);
    is.argv = L.learner_argv(s);
    start_island(is);
  }

  // The syncer has finished the run once it wrote its final marker (a marker left by an earlier
  // launch on this run directory does not count) or exited 0.
  const fs::path final_marker = state / "final.json";
  std::optional<fs::file_time_type> old_marker;
  if (fs::exists(final_marker, ec)) old_marker = fs::last_write_time(final_marker, ec);
  auto syncer_finished = [&] {
    if (!syncer->running() && syncer->status() == 0) return true;
    std::error_code e;
    if (!fs::exists(final_marker, e)) return false;
    return !old_marker || fs::last_write_time(final_marker, e) != *old_marker;
  };

  int forwarded = 0;
  double all_done_at = -1;
  bool syncer_termed = false, syncer_killed = false;
  for (;;) {
    // Signals: the first to the syncer (final cut early), further ones to every child.
    const int got = g_signals;
    while (forwarded < got) {
      ++forwarded;
      if (forwarded == 1) {
        spdlog::warn("embedded run: signal received: asking the syncer for the final cut (again to stop at once)");
        syncer->signal(SIGTERM);
      } else {
        spdlog::warn("embedded run: second signal: stopping every island (each writes a checkpoint)");
        for (auto& is : islands)
          for (auto& c : is.ranks) c->signal(SIGTERM);
        syncer->signal(SIGTERM);
      }
    }
    const double now = steady_now();
    // An island that failed is restarted while the run goes on: no operator signal, and the
    // syncer is up and has not finished.
    const bool run_going_on = forwarded == 0 && syncer->running() && !syncer_finished();
    bool any_running = false;
    for (auto& is : islands) {
      const std::string& id = is.slot.id;
      bool alive = false;
      for (std::size_t r = 0; r < is.ranks.size(); ++r) {
        Child& c = *is.ranks[r];
        const bool was = c.running();
        if (const auto code = c.poll(); code && was) {
          if (*code == 0) {
            spdlog::info("embedded run: {} finished", c.name());
          } else {
            spdlog::error("embedded run: {} exited with code {}; see its log in {}", c.name(), *code,
                          is.slot.dir.string());
            if (is.failed == 0) is.failed = *code;
          }
          note({{"event", "island_exit"}, {"island", id}, {"rank", r}, {"code", *code}, {"life", is.restarts}});
        }
        alive = alive || c.running();
      }
      const auto give_up = [&](const std::string& why) {
        is.phase = Island::Phase::ended;
        is.given_up = true;
        spdlog::error("embedded run: {} is not restarted ({}; exit code {}, {} restart(s))", id, why, is.failed, is.restarts);
        note({{"event", "island_given_up"}, {"island", id}, {"code", is.failed}, {"restarts", is.restarts},
              {"reason", why}});
      };
      if (is.phase == Island::Phase::running && is.failed != 0) {
        const bool may_restart = run_going_on && is.restarts < L.island_restarts;
        // Read once per failure: the tape may be long.
        if (may_restart && !is.ack_checked) {
          is.ack_checked = true;
          is.acked = acknowledged_cut(state, id);
        }
        if (may_restart && is.acked) {
          // It failed after it acknowledged the final cut: the run is ending; nothing to redo.
          if (!alive) give_up("it failed after acknowledging the final cut");
        } else if (may_restart) {
          // Restarted as a whole: the surviving ranks are stopped first.
          is.phase = Island::Phase::stopping;
          is.stop_since = now;
          for (auto& c : is.ranks) c->signal(SIGTERM);
        } else if (!alive) {
          give_up(forwarded > 0             ? "not restarted after the operator's signal"
                  : is.restarts >= L.island_restarts ? "restarted sync.island_restarts times already"
                                                      : "the syncer has finished or is gone");
        }
      } else if (is.phase == Island::Phase::running && !alive) {
        is.phase = Island::Phase::ended;
      }
      if (is.phase == Island::Phase::stopping) {
        if (!alive) {
          const double backoff = std::min(L.restart_backoff_s * std::pow(2.0, is.restarts), L.restart_backoff_max_s);
          is.phase = Island::Phase::waiting;
          is.restart_at = now + backoff;
          spdlog::warn("embedded run: restarting {} in {:.1f} s ({}/{}); it resumes from its checkpoint", id, backoff,
                       is.restarts + 1, L.island_restarts);
        } else if (now - is.stop_since > L.stop_grace_s) {
          for (auto& c : is.ranks) c->signal(SIGKILL);
        }
      }
      if (is.phase == Island::Phase::waiting) {
        if (!run_going_on) {
          give_up(forwarded > 0 ? "not restarted after the operator's signal" : "the syncer has finished or is gone");
        } else if (now >= is.restart_at) {
          ++is.restarts;
          note({{"event", "island_restart"}, {"island", id}, {"restart", is.restarts}, {"of", L.island_restarts},
                {"code", is.failed}});
          start_island(is);
          alive = true;
        }
      }
      // An island waiting for its restart still belongs to the run.
      any_running = any_running || alive || is.phase == Island::Phase::waiting || is.phase == Island::Phase::stopping;
    }
    const bool syncer_was = syncer->running();
    if (const auto code = syncer->poll(); code && syncer_was) {
      if (any_running && *code != 0 && forwarded == 0 && res.syncer_restarts < 3) {
        // Restart on the same port: the islands reconnect and catch up from the checkpoint.
        ++res.syncer_restarts;
        spdlog::warn("embedded run: the syncer exited with code {}; restarting it from its checkpoint ({}/3)", *code,
                     res.syncer_restarts);
        note({{"event", "syncer_restart"}, {"code", *code}, {"restart", res.syncer_restarts}});
        syncer = std::make_unique<Child>("syncer", syncer_cmd(port), state / "syncer.log");
      } else if (*code != 0) {
        spdlog::error("embedded run: the syncer exited with code {}; see {}", *code,
                      (state / "syncer.log").string());
      }
    }
    if (!any_running && !syncer->running()) break;
    if (!any_running) {
      if (all_done_at < 0) all_done_at = now;
      bool none_ok = true;
      for (const auto& is : islands) none_ok = none_ok && is.failed != 0;
      // Every island failed: nobody will acknowledge a cut, so do not wait for one.
      if (!syncer_termed && (none_ok || now - all_done_at > L.syncer_grace_s)) {
        spdlog::warn("embedded run: every island has exited but the syncer has not finished; stopping it");
        syncer->signal(SIGTERM);
        syncer_termed = true;
      } else if (syncer_termed && !syncer_killed && now - all_done_at > 2 * L.syncer_grace_s) {
        syncer->signal(SIGKILL);
        syncer_killed = true;
      }
    }
    sleep_ms(50);
  }
  res.syncer_exit = syncer->status();
  for (const auto& is : islands) {
    res.island_exits.push_back(is.failed);
    res.island_restarts.push_back(is.restarts);
    res.island_given_up.push_back(is.given_up);
  }
  res.signals = forwarded;
  note({{"event", "end"}, {"syncer_exit", res.syncer_exit}, {"island_exits", res.island_exits}});
  return res;
}

json embedded_summary(const fs::path& run_dir, std::uint32_t islands) {
  const auto tape = read_tape_history(run_dir / "syncer" / "tape.jsonl");  // rotated tapes too
  std::uint64_t merges = 0, merges_all = 0, merges_every_active = 0, rejects = 0;
  std::map<std::size_t, std::uint64_t> by_participants;  // merges by how many islands they held
  std::map<std::int64_t, std::uint64_t> versions;
  std::map<std::string, std::uint64_t> merged_by;
  std::map<std::string, double> last_merge;  // unix time of each learner's last merged push
  std::set<std::string> acked;  // correct acknowledgements of the final cut
  json final_cut = nullptr;
  for (const auto& r : tape) {
    const std::string ev = r.value("event", "");
    if (ev == "merge") {
      ++merges;
      versions[r.value("fragment", std::int64_t{-1})] = r.value("version", std::uint64_t{0});
      if (r.contains("learners") && r["learners"].size() >= islands) ++merges_all;
      if (r.value("every_active", false)) ++merges_every_active;
      if (r.contains("learners")) ++by_participants[r["learners"].size()];
      for (const auto& l : r["learners"]) {
        ++merged_by[l.get<std::string>()];
        last_merge[l.get<std::string>()] = r.value("time", 0.0);
      }
    } else if (ev == "reject") {
      ++rejects;
    } else if (ev == "final_cut") {
      final_cut = {{"reason", r.value("reason", "")}, {"digest", r.value("digest", "")},
                   {"outer_steps", r.value("outer_steps", std::uint64_t{0})}};
    } else if (ev == "final_ack" && r.value("ok", false) && r.contains("learners")) {
      for (const auto& l : r["learners"]) acked.insert(l.get<std::string>());
    }
  }
  json participation = json::object();
  for (const auto& [n, m] : by_participants) participation[std::to_string(n)] = m;
  // merges_with_every_live_island: the merge held every island that was live and still training
  // when it was decided (a dead, lost or finished island does not count against it).
  json s = {{"islands", islands}, {"outer_steps_merged", merges}, {"merges_with_every_island", merges_all},
            {"merges_with_every_live_island", merges_every_active}, {"merges_by_islands", participation},
            {"participation", merges ? static_cast<double>(merges_every_active) / static_cast<double>(merges) : 0.0},
            {"rejects", rejects}, {"final_cut", final_cut}};
  json fv = json::array();
  for (const auto& [p, v] : versions) fv.push_back(v);
  s["fragment_versions"] = fv;
  if (fs::exists(run_dir / "syncer" / "final.json")) {
    s["final"] = json::parse(read_file(run_dir / "syncer" / "final.json"));
    for (const auto& l : s["final"].value("acked", json::array())) acked.insert(l.get<std::string>());
  }
  // The run's result is the syncer's final cut; only islands that acknowledged it hold it.
  const fs::path cut = run_dir / "syncer" / "final_cut.bin";
  s["result"] = !final_cut.is_null() && fs::exists(cut) ? json(cut.string()) : json(nullptr);
  if (final_cut.is_null()) acked.clear();
  // The launcher's record of the last launch: restarts, and islands it gave up on.
  std::map<std::string, std::uint64_t> restarts;
  std::map<std::string, json> given_up;
  for (const auto& e : read_jsonl(run_dir / "launch.jsonl")) {
    const std::string ev = e.value("event", "");
    if (ev == "launch") {
      restarts.clear();
      given_up.clear();
    } else if (ev == "island_restart") {
      ++restarts[e.value("island", "")];
    } else if (ev == "island_given_up") {
      given_up[e.value("island", "")] = e;
    }
  }
  json per = json::array();
  json missing = json::array();
  std::uint64_t lost_n = 0, restarted_n = 0;
  double sent_total = 0, received_total = 0, allreduce_total = 0;
  for (std::uint32_t i = 0; i < islands; ++i) {
    const std::string id = "island-" + std::to_string(i);
    const bool ack = acked.count(id) > 0;
    // Lost: it exited for good (failed, not restarted again) without acknowledging the cut.
    const bool lost = given_up.count(id) && !ack;
    json isl = {{"id", id}, {"merged_pushes", merged_by.count(id) ? merged_by[id] : 0},
                {"restarts", restarts.count(id) ? restarts[id] : 0}, {"acknowledged_final_cut", ack},
                {"holds_final_cut", ack}, {"lost", lost}};
    if (given_up.count(id)) isl["exit"] = given_up[id].value("code", 0);
    if (last_merge.count(id)) isl["last_merge_time"] = last_merge[id];
    if (isl["restarts"].get<std::uint64_t>() > 0) ++restarted_n;
    if (lost) ++lost_n;
    if (!ack) missing.push_back(id);
    for (const auto& e : read_jsonl(run_dir / id / "sync_events.jsonl")) {
      const std::string ev = e.value("event", "");
      if (ev == "closed") {
        // The last life of the island: counts since its (re)start.
        isl["steps"] = e.value("steps", std::uint64_t{0});
        isl["bytes_sent"] = e.value("bytes_sent", std::uint64_t{0});
        isl["bytes_received"] = e.value("bytes_received", std::uint64_t{0});
        isl["pushes_sent"] = e.value("pushes_sent", std::uint64_t{0});
        isl["numel"] = e.value("numel", std::uint64_t{0});
      } else if (ev == "final_applied") {
        isl["final_digest_matches"] = e.value("matches", false);
      }
    }
    if (isl.contains("steps")) {
      // A float32 ring all-reduce over the islands sends 2(N-1)/N x 4 x numel bytes per rank and
      // step, and receives as many: the baseline counts both directions, as the islands' do.
      const double steps = isl["steps"].get<double>(), numel = isl["numel"].get<double>();
      const double one_way = islands > 1 ? steps * 2.0 * (islands - 1) / islands * 4.0 * numel : 0.0;
      isl["allreduce_equivalent_bytes"] = 2.0 * one_way;
      const double sent = isl["bytes_sent"].get<double>(), received = isl["bytes_received"].get<double>();
      isl["bytes_total"] = sent + received;
      sent_total += sent;
      received_total += received;
      allreduce_total += 2.0 * one_way;
    }
    per.push_back(isl);
  }
  s["per_island"] = per;
  s["islands_lost"] = lost_n;
  s["islands_restarted"] = restarted_n;
  s["islands_missing"] = missing;  // islands that do not hold the final cut
  s["bytes_sent_total"] = sent_total;
  s["bytes_received_total"] = received_total;
  s["bytes_total"] = sent_total + received_total;
  s["allreduce_equivalent_bytes_total"] = allreduce_total;
  if (sent_total + received_total > 0 && allreduce_total > 0)
    s["allreduce_over_total"] = allreduce_total / (sent_total + received_total);
  return s;
}

std::string format_summary(const json& s) {
  std::ostringstream o;
  o << "embedded run: " << s["islands"].get<std::uint32_t>() << " island(s)\n";
  o << "  outer steps merged: " << s["outer_steps_merged"].get<std::uint64_t>() << " (fragment versions "
    << s["fragment_versions"].dump() << "), " << s["merges_with_every_island"].get<std::uint64_t>()
    << " with every island, " << s.value("merges_with_every_live_island", std::uint64_t{0})
    << " with every live island (" << std::fixed << std::setprecision(0) << 100.0 * s.value("participation", 0.0)
    << std::defaultfloat << std::setprecision(6) << " %; by islands merged: " << s.value("merges_by_islands", json::object()).dump() << "), "
    << s["rejects"].get<std::uint64_t>() << " refused frames\n";
  const std::size_t n_missing = s.value("islands_missing", json::array()).size();
  if (!s["final_cut"].is_null()) {
    o << "  final cut: " << s["final_cut"]["reason"].get<std::string>() << ", digest "
      << s["final_cut"]["digest"].get<std::string>().substr(0, 16) << "…, acknowledged by "
      << s["islands"].get<std::size_t>() - n_missing << ", missing " << n_missing << "\n";
  } else {
    o << "  final cut: none\n";
  }
  if (s.contains("result") && !s["result"].is_null())
    o << "  result: " << s["result"].get<std::string>() << " (the syncer's final cut)\n";
  else
    o << "  result: none (the syncer wrote no final cut)\n";
  o << "  islands lost " << s.value("islands_lost", 0) << ", restarted " << s.value("islands_restarted", 0)
    << ", missing " << n_missing << "\n";
  for (const auto& i : s["per_island"]) {
    o << "  " << i["id"].get<std::string>() << ": ";
    const auto restarts = i.value("restarts", std::uint64_t{0});
    if (restarts > 0) o << "restarted " << restarts << (restarts == 1 ? " time, " : " times, ");
    if (i.value("lost", false)) o << "lost (exit code " << i.value("exit", 0) << "), ";
    if (!i.contains("steps")) {
      o << "no sync events";
    } else {
      o << i["steps"].get<std::uint64_t>() << " steps" << (restarts > 0 ? " in its last life" : "") << ", "
        << i["merged_pushes"].get<std::uint64_t>() << " pushes merged, sent "
        << human_bytes(i["bytes_sent"].get<double>()) << ", received "
        << human_bytes(i["bytes_received"].get<double>());
      if (i["allreduce_equivalent_bytes"].get<double>() > 0)
        o << " (" << human_bytes(i["bytes_total"].get<double>())
          << " both ways); a data-parallel ring all-reduce would have sent and received "
          << human_bytes(i["allreduce_equivalent_bytes"].get<double>());
    }
    if (i.value("acknowledged_final_cut", false))
      o << "; holds the final cut\n";
    else
      o << "; does not hold the final cut (it did not acknowledge it): its local weights are not the result\n";
  }
  if (s.contains("allreduce_over_total")) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", s["allreduce_over_total"].get<double>());
    o << "  traffic of the islands, sent + received: " << human_bytes(s["bytes_sent_total"].get<double>()) << " + "
      << human_bytes(s["bytes_received_total"].get<double>()) << " = " << human_bytes(s["bytes_total"].get<double>())
      << " vs " << human_bytes(s["allreduce_equivalent_bytes_total"].get<double>())
      << " for a float32 ring all-reduce, sent + received (" << buf << "x less)\n";
  }
  return o.str();
}

namespace {
std::vector<std::string> embedded_common_args(const EmbeddedRun& e) {
  std::vector<std::string> common;
  if (e.config_file) common.insert(common.end(), {"--config", e.config_file->string()});
  for (const auto& s : e.sets) common.insert(common.end(), {"--set", s});
  if (!e.log_level.empty()) common.insert(common.end(), {"--log-level", e.log_level});
  return common;
}
}  // namespace

std::vector<std::string> embedded_syncer_argv(const config::Config& cfg, const EmbeddedRun& e) {
  std::vector<std::string> a = {e.host_bin.string(), "syncer"};
  const auto common = embedded_common_args(e);
  a.insert(a.end(), common.begin(), common.end());
  a.insert(a.end(), {"--set", "sync.islands=" + std::to_string(e.islands)});
  if (cfg.entry("sync.bulk_nice").origin == config::Origin::default_value) a.insert(a.end(), {"--set", "sync.bulk_nice=0"});
  return a;
}

int run_embedded(const config::Config& cfg, const EmbeddedRun& e) {
  if (e.islands < 1) throw UsageError("--islands must be at least 1");
  if (e.run_dir.empty()) throw UsageError("train --islands needs a run directory (--output DIR)");
  const auto common = embedded_common_args(e);
  IslandLaunch L;
  L.run_dir = e.run_dir;
  L.islands = e.islands;
  L.island_ranks.assign(e.islands, std::max<std::uint32_t>(1, e.island_ranks));
  L.syncer_argv = embedded_syncer_argv(cfg, e);
  L.learner_argv = [&](const IslandSlot& s) {
    std::vector<std::string> a = {e.host_bin.string(), "learner"};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), {"--set", "sync.islands=" + std::to_string(e.islands), "--set",
                       "train.island_ranks=" + std::to_string(std::max<std::uint32_t>(1, e.island_ranks)), "--syncer", s.syncer,
                       "--run-secret-file", s.secret.string(), "--learner-id", s.id, "--island-rank",
                       std::to_string(s.index), "--output", s.dir.string()});
    return a;
  };
  L.syncer_grace_s = cfg.get_number("sync.final_timeout_s") + 10;
  L.island_restarts = static_cast<std::uint32_t>(cfg.get_int("sync.island_restarts"));
  const LaunchResult r = run_islands(L);
  json summary = embedded_summary(e.run_dir, e.islands);
  summary["syncer_exit"] = r.syncer_exit;
  summary["island_exits"] = r.island_exits;
  summary["syncer_restarts"] = r.syncer_restarts;
  summary["island_restarts"] = r.island_restarts;
  atomic_write(e.run_dir / "summary.json", summary.dump(2) + "\n");
  std::fputs(format_summary(summary).c_str(), stdout);
  std::printf("  exit codes: syncer %d, islands %s\n", r.syncer_exit, summary["island_exits"].dump().c_str());
  if (e.after_summary) std::fputs(e.after_summary(e.run_dir).c_str(), stdout);
  std::fflush(stdout);
  return r.exit_code();
}

fs::path ensure_run_secret(const fs::path& run_dir) { return ensure_secret(run_dir); }

}  // namespace yeto::sync
