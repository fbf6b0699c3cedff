// The syncer under pressure, as separate processes on 127.0.0.1: descriptors exhausted by idle
// strangers, a write that fails (a file-size limit standing in for a full disk), a flood of
// garbage connections, tape rotation with a kill -9 after it, a restart after the end, and the
// temporaries a killed writer leaves. Every wait is bounded.
#include "sync_procs.hpp"

#include <sys/resource.h>

#include <atomic>
#include <fstream>
#include <random>

#include "support/temp_dir.hpp"

using namespace yeto::sync_test;

namespace {

std::size_t count_events(const std::vector<json>& tape, const std::string& event) {
  return static_cast<std::size_t>(
      std::count_if(tape.begin(), tape.end(), [&](const json& r) { return r["event"] == event; }));
}

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

// VmRSS of `pid` in KiB (0 when unreadable).
std::size_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

// Merges on the tape whose "time" lies in [from, to) (Unix seconds).
std::size_t merges_between(const std::vector<json>& tape, double from, double to) {
  std::size_t n = 0;
  for (const auto& r : tape)
    if (r["event"] == "merge" && r["time"].get<double>() >= from && r["time"].get<double>() < to) ++n;
  return n;
}

double unix_now() { return ys::unix_now(); }

// kThreads clients dialling `port` until `connections` were attempted, each connection sending
// 96 random bytes (three in four) and closing: the garbage flood, and the same load aimed elsewhere.
constexpr int kFloodThreads = 4;
int flood(std::uint16_t port, int connections) {
  std::atomic<int> next{0}, made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kFloodThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::string junk(96, '\0');
      while (next.fetch_add(1) < connections) {
        const int fd = dial(port);
        if (fd < 0) continue;
        ++made;
        for (auto& ch : junk) ch = static_cast<char>(rng());
        if (rng() % 4 != 0) send_all(fd, junk);  // a quarter just connect and leave
        ::close(fd);
      }
    });
  for (auto& t : threads) t.join();
  return made.load();
}

// A listener of the test's own that takes connections as the syncer takes strangers (at most
// `rate` a second, the backlog waiting in the kernel), reads what they sent and closes them: the
// flood aimed at it loads the machine as the flood aimed at the syncer does, less the syncer's
// own handling of the strangers.
class Sink {
 public:
  explicit Sink(double rate) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, SOMAXCONN) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port_ = ntohs(a.sin_port);
    const int flags = ::fcntl(fd_, F_GETFL, 0);
    ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    thread_ = std::thread([this, rate] {
      const auto start = Clock::now();
      std::uint64_t taken = 0;
      char buf[4096];
      while (!stop_) {
        const double allowed = rate * std::chrono::duration<double>(Clock::now() - start).count() + rate;
        const int c = static_cast<double>(taken) < allowed ? ::accept(fd_, nullptr, nullptr) : -1;
        if (c < 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(500));
          continue;
        }
        ++taken;
        (void)::recv(c, buf, sizeof buf, MSG_DONTWAIT);
        ::close(c);
      }
    });
  }
  ~Sink() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

// 120 idle strangers against a syncer limited to 64 descriptors: it holds only as many as its
// budget allows (dropping the oldest), never runs out of descriptors for its own files, and the
// honest learners merge to the end, bit-identical to the final cut.
TEST(SyncerLimits, IdleStrangersCannotExhaustTheDescriptors) {
  RunDir run;
  run.syncer_prefix = {"/usr/bin/prlimit", "--nofile=64:64", "--"};
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=40"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  ASSERT_TRUE(run.wait_tape([](const auto& t) { return count_events(t, "merge") >= 4; }, 15)) << run.logs();
  std::vector<int> idle;
  for (int i = 0; i < 120; ++i) {
    const int fd = dial(run.port);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GE(idle.size(), 100u);
  std::size_t max_fds = 0;
  while (syncer->running() && syncer->wait(0.1) == -1) max_fds = std::max(max_fds, open_fds(syncer->pid()));
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  EXPECT_LE(max_fds, 64u);
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 40u);
  const auto limits = std::find_if(tape.begin(), tape.end(), [](const json& r) { return r["event"] == "limits"; });
  ASSERT_NE(limits, tape.end());
  EXPECT_EQ((*limits)["fd_limit"], 64);
  EXPECT_LT((*limits)["pending_peers"].get<int>(), 64);
  EXPECT_EQ(count_events(tape, "timeout"), 0u) << "an honest learner was dropped";
  EXPECT_EQ(yeto::test::read_text(run.dir / "syncer.log").find("cannot persist"), std::string::npos) << run.logs();
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// A write that fails for good (here a file-size limit: EFBIG, as a full disk gives ENOSPC)
// stops the syncer with exit code 1 and a message saying why instead of leaving a process that
// neither merges nor exits. Restarted (without the limit) it resumes from its checkpoint: the
// learners reconnect, no version is missing from the tape, and the run ends on the final cut.
TEST(SyncerLimits, AFailedWriteStopsTheSyncerAndARestartLosesNothing) {
  RunDir run;
  ::signal(SIGXFSZ, SIG_IGN);  // inherited: the syncer sees EFBIG instead of being killed
  run.syncer_prefix = {"/usr/bin/prlimit", "--fsize=40000", "--"};
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=80"};
  auto syncer = run.start_syncer();
  ::signal(SIGXFSZ, SIG_DFL);
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  const int code = syncer->wait(40);
  ASSERT_EQ(code, 1) << "the syncer should stop when it cannot write its tape\n" << run.logs();
  const std::string log = yeto::test::read_text(run.dir / "syncer.log");
  EXPECT_NE(log.find("cannot persist its state"), std::string::npos) << log;
  EXPECT_NE(log.find("tape"), std::string::npos) << log;
  const std::size_t merged_before = run.merges();
  EXPECT_GT(merged_before, 4u);
  EXPECT_LT(merged_before, 80u);
  run.syncer_prefix.clear();
  const std::uint16_t port = run.port;
  syncer = run.start_syncer(port);
  EXPECT_EQ(syncer->wait(60), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 80u);
  EXPECT_EQ(count_events(tape, "restart"), 1u);
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// 10,000 garbage connections while two learners train: the syncer's descriptors and memory stay
// within the stated bounds (its caps plus a fixed reserve; a few MiB), the refusals are logged
// and taped at a bounded rate (counted in summaries), and the honest merge rate stays within
// 20% of its rate under the same client load aimed at another listener (before and after the
// flood): what is compared is the syncer's handling of the strangers, not the machine's load,
// which other processes and the flood's own clients move.
TEST(SyncerLimits, AGarbageFloodIsBoundedAndHonestLearnersKeepTheirPace) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=1000000"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  ASSERT_TRUE(run.wait_tape([](const auto& t) { return count_events(t, "merge") >= 10; }, 15)) << run.logs();
  const std::size_t rss_quiet = rss_kib(syncer->pid());
  const std::size_t fds_quiet = open_fds(syncer->pid());
  const auto log_quiet = fs::file_size(run.dir / "syncer.log");
  // The control: the same clients at the syncer's accept rate (sync.accept_rate, 1000/s) against
  // the sink, for about 4 s.
  constexpr int kControl = 4000;
  auto control = [&](double& from, double& to) {
    Sink sink(1000.0);
    EXPECT_NE(sink.port(), 0);
    from = unix_now();
    EXPECT_GE(flood(sink.port(), kControl), kControl * 9 / 10);
    while (unix_now() < from + kControl / 1000.0 + 0.5) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    to = unix_now();
  };
  double control1_from = 0, control1_to = 0, control2_from = 0, control2_to = 0;
  control(control1_from, control1_to);

  constexpr int kConnections = 10000;
  std::atomic<int> made{0};
  std::atomic<bool> flooding{true};
  const double flood_from = unix_now();
  std::thread flooder([&] { made = flood(run.port, kConnections); });
  std::size_t max_fds = 0, max_rss = 0;
  std::thread sampler([&] {
    while (flooding) {
      max_fds = std::max(max_fds, open_fds(syncer->pid()));
      max_rss = std::max(max_rss, rss_kib(syncer->pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  flooder.join();
  // Connections beyond sync.accept_rate (1000/s) wait in the kernel's backlog: the flood lasts
  // until the syncer has accepted them all, about kConnections / 1000 s after it began.
  const double drained = flood_from + kConnections / 1000.0 + 1.5;
  while (unix_now() < drained) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double flood_to = unix_now();
  flooding = false;
  sampler.join();
  EXPECT_GE(made.load(), kConnections * 9 / 10);
  control(control2_from, control2_to);
  ::kill(syncer->pid(), SIGTERM);  // the final cut ends the run
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(a->wait(15), 0) << run.logs();
  EXPECT_EQ(b->wait(15), 0) << run.logs();

  const auto tape = run.tape();
  expect_continuous(tape);
  EXPECT_EQ(count_events(tape, "timeout"), 0u) << "an honest learner was dropped during the flood";
  const double control_rate =
      static_cast<double>(merges_between(tape, control1_from, control1_to) +
                          merges_between(tape, control2_from, control2_to)) /
      (control1_to - control1_from + control2_to - control2_from);
  const double flood_rate = merges_between(tape, flood_from, flood_to) / (flood_to - flood_from);
  std::printf("control %.1f merges/s (before %.1f, after %.1f), flood %.1f merges/s over %.1f s (%d connections); "
              "syncer fds %zu -> %zu, RSS %zu -> %zu KiB\n",
              control_rate, merges_between(tape, control1_from, control1_to) / (control1_to - control1_from),
              merges_between(tape, control2_from, control2_to) / (control2_to - control2_from), flood_rate,
              flood_to - flood_from, made.load(), fds_quiet, max_fds, rss_quiet, max_rss);
  EXPECT_GE(flood_rate, 0.8 * control_rate);
  // Bounds: sync.max_pending_peers (64) strangers on top of the quiet descriptors, and a few
  // MiB of memory (a stranger holds a 4 KiB buffer).
  EXPECT_LE(max_fds, fds_quiet + 64 + 4);
  EXPECT_LE(max_rss, rss_quiet + 16 * 1024);
  // Refusals one by one: at most the burst (20) per 10 s interval; the rest in summaries.
  std::size_t one_by_one = 0, summarised = 0, dropped = 0;
  std::string summaries;
  for (const auto& r : tape) {
    if (r["event"] == "reject_summary" || r["event"] == "limits") summaries += r.dump() + "\n";
    if (r["event"] == "reject" && r["learners"].empty()) ++one_by_one;
    if (r["event"] == "reject_summary") {
      summarised += r["refused"].get<std::size_t>();
      dropped += r["dropped"].get<std::size_t>() + r["left"].get<std::size_t>();
    }
  }
  const double intervals = (flood_to - flood_from) / 10.0 + 2;
  EXPECT_LE(one_by_one, static_cast<std::size_t>(20 * intervals));
  EXPECT_LE(count_events(tape, "reject_summary"), static_cast<std::size_t>(intervals + 1));
  // Every stranger is accounted for: refused, dropped to make room, or gone before it spoke.
  EXPECT_GE(one_by_one + summarised + dropped, static_cast<std::size_t>(made.load()) * 95 / 100) << summaries;
  EXPECT_LE(fs::file_size(run.dir / "syncer.log") - log_quiet, 64u * 1024) << "the log grew with the flood";
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// The tape is rotated at a checkpoint once it is over sync.tape_max_mb; the new tape starts with
// every fragment's version, so a syncer killed after a rotation restarts without a gap, and the
// rotated tapes keep the whole history.
TEST(SyncerLimits, TheTapeRotatesAndARestartAfterARotationFindsItsVersions) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=60", "sync.tape_max_mb=0.01", "sync.tape_keep=1000"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  ASSERT_TRUE(run.wait_tape([](const auto& t) { return count_events(t, "tape_rotated") >= 2; }, 20)) << run.logs();
  syncer->kill9();
  const std::uint16_t port = run.port;
  syncer = run.start_syncer(port);
  EXPECT_EQ(syncer->wait(60), 0) << run.logs();
  EXPECT_EQ(a->wait(10), 0) << run.logs();
  EXPECT_EQ(b->wait(10), 0) << run.logs();
  EXPECT_TRUE(fs::exists(run.state / "tape.1.jsonl"));
  const auto current = ys::read_tape_records(run.state / "tape.jsonl");
  ASSERT_FALSE(current.empty());
  const auto tape = run.tape();
  EXPECT_EQ(expect_continuous(tape), 60u);
  EXPECT_EQ(count_events(tape, "tape_gap"), 0u);
  for (const auto& r : tape)
    if (r["event"] == "tape_rotated") {
      ASSERT_EQ(r["versions"].size(), 2u) << r.dump();
    }
  // A tape is rotated only once it is over sync.tape_max_mb (0.01 MiB).
  for (std::uint32_t n = 1; fs::exists(ys::rotated_tape_path(run.state / "tape.jsonl", n)); ++n)
    EXPECT_GT(fs::file_size(ys::rotated_tape_path(run.state / "tape.jsonl", n)), 10485u) << "tape." << n << ".jsonl";
  expect_bit_identical_to_final_cut(run, {"isle-a", "isle-b"});
}

// A syncer restarted after the run ended (final.json written) offers the same cut again but
// never rewrites the marker with fewer acknowledgements: with nobody new acknowledging, the
// file stays byte for byte as it was.
TEST(SyncerLimits, ARestartAfterTheEndKeepsTheFinalMarker) {
  RunDir run;
  run.syncer_sets = {"sync.quorum=2", "sync.budget_outer_steps=12"};
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  auto a = run.start_learner("isle-a", 1), b = run.start_learner("isle-b", 2);
  ASSERT_EQ(syncer->wait(30), 0) << run.logs();
  ASSERT_EQ(a->wait(10), 0) << run.logs();
  ASSERT_EQ(b->wait(10), 0) << run.logs();
  const std::string marker = yeto::test::read_text(run.state / "final.json");
  ASSERT_EQ(run.final_marker()["acked"].size(), 2u);
  syncer = run.start_syncer();
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
  EXPECT_EQ(yeto::test::read_text(run.state / "final.json"), marker);
  const auto tape = run.tape();
  ASSERT_FALSE(tape.empty());
  EXPECT_EQ(tape.back()["event"], "final");
  EXPECT_EQ(tape.back()["marker"], "unchanged");
}

// Temporaries that a killed writer left in the state directory are removed when the syncer
// starts; one whose writer is still running is kept.
TEST(SyncerLimits, TemporariesOfAKilledWriterAreRemovedAtStart) {
  RunDir run;
  fs::create_directories(run.state);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);
  const fs::path stale = run.state / ("checkpoint.bin.tmp." + std::to_string(child) + ".0");
  const fs::path live = run.state / ("notes.tmp." + std::to_string(::getpid()) + ".0");
  std::ofstream(stale) << "half a checkpoint";
  std::ofstream(live) << "being written";
  auto syncer = run.start_syncer();
  ASSERT_NE(run.port, 0) << run.logs();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  ::kill(syncer->pid(), SIGTERM);
  EXPECT_EQ(syncer->wait(30), 0) << run.logs();
}
