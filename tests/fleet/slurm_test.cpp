// `yeto-host launch --engine slurm` on a real single-node Slurm cluster (slurmctld, slurmd and
// munged from Debian's slurm-wlm and munge) that the test starts on 127.0.0.1 in a temporary
// directory and shuts down after: a tiny Flux run with two islands and the syncer as Slurm
// jobs; one island cancelled mid-run; `down`. Skipped, saying why, only where Slurm cannot start.
#include <gtest/gtest.h>

#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "dataset.hpp"
#include "fleet/client.hpp"
#include "support/ports.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using yeto::test::run_process;

namespace {

// The cluster, shared by the suite's tests.
struct Cluster {
  yeto::test::TempDir dir;
  fs::path conf;
  std::string skip;  // why Slurm could not start; empty when it is up
  std::map<std::string, std::string> env;

  std::string log_tail() const {
    std::string s;
    for (const char* f : {"log/slurmctld.log", "log/slurmd.log", "munge/munged.log"})
      if (fs::exists(dir / f)) {
        const std::string t = yeto::read_file(dir / f);
        s += std::string("\n==== ") + f + "\n" + t.substr(t.size() > 3000 ? t.size() - 3000 : 0);
      }
    return s;
  }

  void start() {
    for (const char* p : {"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo"})
      if (!yeto::fleet::on_path(p) && !fs::exists(std::string("/usr/sbin/") + p)) {
        skip = std::string(p) + " is not installed (Debian packages slurm-wlm and munge; scripts/setup.sh installs them)";
        return;
      }
    fs::create_directories(dir / "munge");
    fs::create_directories(dir / "state");
    fs::create_directories(dir / "spool");
    fs::create_directories(dir / "log");
    fs::permissions(dir.path(), fs::perms::owner_all, fs::perm_options::replace);
    // munged: its own key and socket, nothing system-wide.
    std::string key(1024, '\0');
    std::ifstream("/dev/urandom", std::ios::binary).read(key.data(), static_cast<std::streamsize>(key.size()));
    yeto::atomic_write(dir / "munge" / "munge.key", key, 0600);
    const std::string munged = fs::exists("/usr/sbin/munged") ? "/usr/sbin/munged" : "munged";
    const fs::path socket = dir / "munge" / "munge.socket";
    auto r = run_process({munged, "--force", "--key-file", (dir / "munge" / "munge.key").string(), "--socket", socket.string(),
                          "--pid-file", (dir / "munge" / "munged.pid").string(), "--log-file",
                          (dir / "munge" / "munged.log").string(), "--seed-file", (dir / "munge" / "seed").string()});
    if (r.exit_code != 0) {
      skip = "munged did not start: " + r.all();
      return;
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string node = host;
    node = node.substr(0, node.find('.'));
    const passwd* pw = ::getpwuid(::getuid());
    const std::string user = pw != nullptr ? pw->pw_name : "root";
    const auto ctld_port = yeto::test::unused_loopback_port();
    const auto slurmd_port = yeto::test::unused_loopback_port();
    const std::string d = dir.path().string();
    const std::string text =
        "ClusterName=yeto-test\n"
        "SlurmctldHost=" + node + "(127.0.0.1)\n"
        "SlurmctldPort=" + std::to_string(ctld_port) + "\nSlurmdPort=" + std::to_string(slurmd_port) + "\n"
        "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" + socket.string() + "\n"
        "SlurmUser=" + user + "\nSlurmdUser=" + user + "\n"
        "MpiDefault=none\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSchedulerType=sched/backfill\n"
        "ReturnToService=2\nSlurmdParameters=config_overrides\nKillWait=5\nMinJobAge=600\n"
        "StateSaveLocation=" + d + "/state\nSlurmdSpoolDir=" + d + "/spool\n"
        "SlurmctldPidFile=" + d + "/slurmctld.pid\nSlurmdPidFile=" + d + "/slurmd.pid\n"
        "SlurmctldLogFile=" + d + "/log/slurmctld.log\nSlurmdLogFile=" + d + "/log/slurmd.log\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        "NodeName=" + node + " NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN\n"
        "PartitionName=debug Nodes=" + node + " Default=YES MaxTime=INFINITE State=UP\n";
    conf = dir.write("slurm.conf", text);
    env = {{"SLURM_CONF", conf.string()}};
    const std::string sbin = fs::exists("/usr/sbin/slurmctld") ? "/usr/sbin/" : "";
    r = run_process({sbin + "slurmctld", "-f", conf.string(), "-i"}, "", env);
    if (r.exit_code != 0) {
      skip = "slurmctld did not start: " + r.all() + log_tail();
      return;
    }
    r = run_process({sbin + "slurmd", "-f", conf.string()}, "", env);
    if (r.exit_code != 0) {
      skip = "slurmd did not start: " + r.all() + log_tail();
      return;
    }
    for (int i = 0; i < 120; ++i) {
      r = run_process({"sinfo", "--noheader", "--format", "%t"}, "", env);
      if (r.exit_code == 0 && (r.out.find("idle") != std::string::npos || r.out.find("mix") != std::string::npos)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    skip = "the Slurm node did not become idle in 30 s (sinfo: " + r.all() + ")" + log_tail();
  }

  // The slurmstepd processes of this cluster (their environment names its slurm.conf).
  std::vector<int> stepds() const {
    std::vector<int> pids;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream comm(e.path() / "comm");
      std::string c;
      std::getline(comm, c);
      if (c != "slurmstepd") continue;
      std::ifstream in(e.path() / "environ", std::ios::binary);
      const std::string envs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (envs.find("SLURM_CONF=" + conf.string() + '\0') != std::string::npos) pids.push_back(std::stoi(name));
    }
    return pids;
  }

  void stop() {
    if (conf.empty()) return;
    // Let the job steps of cancelled jobs finish reporting before the daemons go.
    for (int i = 0; i < 60 && !stepds().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    run_process({"scontrol", "shutdown"}, "", env);
    for (const char* pid_file : {"slurmd.pid", "slurmctld.pid", "munge/munged.pid"}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (!fs::exists(dir / pid_file)) continue;
      const int pid = std::atoi(yeto::read_file(dir / pid_file).c_str());
      if (pid > 1) ::kill(pid, SIGTERM);
    }
    // A step that outlived its daemons would wait for them forever.
    for (int pid : stepds()) ::kill(pid, SIGKILL);
  }
};

Cluster* g_cluster = nullptr;

class FleetSlurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_cluster = new Cluster();
    g_cluster->start();
  }
  static void TearDownTestSuite() {
    g_cluster->stop();
    delete g_cluster;
    g_cluster = nullptr;
  }
  void SetUp() override {
    if (!g_cluster->skip.empty()) GTEST_SKIP() << "Slurm cannot start here: " << g_cluster->skip;
  }

  std::string run_toml(int steps, const std::string& sync_extra = "") {
    return yeto::learner::test::tiny_flux_islands_toml(
        steps, sync_extra,
        "[launch]\nengine = \"slurm\"\nislands = [\"slurm:1xcpu\", \"slurm:1xcpu\"]\nsyncer_host = \"127.0.0.1\"\n"
        "syncer_wait_s = 120\n");
  }

  yeto::test::ProcessResult launch(const std::vector<std::string>& args) {
    std::vector<std::string> a{"launch"};
    a.insert(a.end(), args.begin(), args.end());
    return yeto::test::run_host(a, "", g_cluster->env);
  }

  std::vector<std::string> job_ids(const fs::path& run) {
    std::vector<std::string> ids;
    const json rec = json::parse(yeto::read_file(run / "launch" / "fleet.json"));
    for (const auto& j : rec["jobs"]) ids.push_back(j["job"]);
    return ids;
  }

  // Waits until none of `ids` is queued or running; false after `timeout_s`.
  bool wait_jobs_gone(const std::vector<std::string>& ids, int timeout_s) {
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
    for (int i = 0; i < timeout_s * 2; ++i) {
      const auto r = run_process({"squeue", "--noheader", "--jobs", list, "--format", "%i"}, "", g_cluster->env);
      if (r.exit_code == 0 && r.out.find_first_not_of(" \n") == std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return false;
  }

  std::string logs(const fs::path& run) {
    std::string s;
    for (const char* f : {"syncer/slurm.log", "island-0/slurm.log", "island-1/slurm.log"})
      if (fs::exists(run / f)) s += std::string("\n==== ") + f + "\n" + yeto::read_file(run / f);
    return s + g_cluster->log_tail();
  }

  std::set<std::string> merged_learners(const fs::path& run) {
    std::set<std::string> merged;
    if (!fs::exists(run / "syncer" / "tape.jsonl")) return merged;
    for (const auto& rec : yeto::sync::read_tape_records(run / "syncer" / "tape.jsonl"))
      if (rec["event"] == "merge")
        for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
    return merged;
  }
};

TEST_F(FleetSlurm, UpRunsTwoIslandsAndTheSyncerToTheFinalCut) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  dir.write("run.toml", run_toml(8));
  const fs::path run = dir / "run";
  const auto up = launch({"up", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(up.exit_code, 0) << up.all() << logs(run);
  EXPECT_NE(up.out.find("submitted island-1: "), std::string::npos) << up.out;
  const auto ids = job_ids(run);
  ASSERT_EQ(ids.size(), 3u) << up.all();
  ASSERT_TRUE(wait_jobs_gone(ids, 300)) << logs(run);

  EXPECT_EQ(merged_learners(run), (std::set<std::string>{"island-0", "island-1"})) << logs(run);
  ASSERT_TRUE(fs::exists(run / "syncer" / "final.json")) << logs(run);
  const json fin = json::parse(yeto::read_file(run / "syncer" / "final.json"));
  EXPECT_EQ(fin["acked"].size(), 2u) << fin.dump() << logs(run);
  const std::string cut = yeto::read_file(run / "syncer" / "final_cut.bin");
  EXPECT_GT(cut.size(), 0u);
  for (const char* island : {"island-0", "island-1"}) EXPECT_TRUE(fs::exists(run / island / "lora.safetensors")) << island;

  // status and logs read from Slurm and the shared run directory.
  const auto st = launch({"status", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(st.exit_code, 0) << st.all();
  EXPECT_NE(st.out.find("island-1  job " + ids[2] + "  slurm:1xcpu  COMPLETED"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("syncer  job " + ids[0] + "  COMPLETED"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("holds the final cut"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find(" s ago"), std::string::npos) << st.out;       // the island's last merge
  EXPECT_NE(st.out.find(" samples/s"), std::string::npos) << st.out;   // its learner's throughput
  EXPECT_NE(st.out.find("merges ("), std::string::npos) << st.out;
  const auto lg = launch({"logs", "--island", "1", "--config", (dir / "run.toml").string(), "--output", run.string()});
  EXPECT_EQ(lg.exit_code, 0) << lg.all();
  EXPECT_EQ(lg.out, yeto::read_file(run / "island-1" / "slurm.log"));
  EXPECT_FALSE(lg.out.empty());
  // A second `up` from the same run directory is refused while the record holds jobs.
  const auto again = launch({"up", "--config", (dir / "run.toml").string(), "--output", run.string()});
  EXPECT_EQ(again.exit_code, 2) << again.all();
  EXPECT_NE(again.err.find("launch down"), std::string::npos) << again.err;
}

TEST_F(FleetSlurm, AnIslandCancelledMidRunLeavesTheRunToFinish) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  dir.write("run.toml", run_toml(60, "join_timeout_s = 5\n"));
  const fs::path run = dir / "run";
  const auto up = launch({"up", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(up.exit_code, 0) << up.all();
  const auto ids = job_ids(run);
  ASSERT_EQ(ids.size(), 3u) << up.all();
  // Once island-1 has taken part in a merge, Slurm cancels it.
  bool merged = false;
  for (int i = 0; i < 480 && !merged; ++i) {
    merged = merged_learners(run).count("island-1") > 0;
    if (!merged) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(merged) << logs(run);
  const auto sc = run_process({"scancel", ids[2]}, "", g_cluster->env);
  ASSERT_EQ(sc.exit_code, 0) << sc.all();
  ASSERT_TRUE(wait_jobs_gone(ids, 300)) << logs(run);
  ASSERT_TRUE(fs::exists(run / "syncer" / "final.json")) << logs(run);
  const json fin = json::parse(yeto::read_file(run / "syncer" / "final.json"));
  std::set<std::string> acked;
  for (const auto& a : fin["acked"]) acked.insert(a.get<std::string>());
  EXPECT_TRUE(acked.count("island-0")) << fin.dump() << logs(run);
  EXPECT_FALSE(acked.count("island-1")) << fin.dump();
  EXPECT_TRUE(fs::exists(run / "island-0" / "lora.safetensors")) << logs(run);
  const auto st = launch({"status", "--config", (dir / "run.toml").string(), "--output", run.string()});
  EXPECT_NE(st.out.find("island-1  job " + ids[2] + "  slurm:1xcpu  CANCELLED"), std::string::npos) << st.out;
}

TEST_F(FleetSlurm, DownCancelsEveryJob) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  dir.write("run.toml", run_toml(100000));
  const fs::path run = dir / "run";
  const auto up = launch({"up", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(up.exit_code, 0) << up.all();
  const auto ids = job_ids(run);
  // Wait until the islands train (they have joined the syncer), then take the fleet down.
  for (int i = 0; i < 480 && merged_learners(run).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  const auto down = launch({"down", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(down.exit_code, 0) << down.all();
  EXPECT_NE(down.out.find("every job cancelled"), std::string::npos) << down.out;
  EXPECT_TRUE(wait_jobs_gone(ids, 60)) << logs(run);
  EXPECT_TRUE(json::parse(yeto::read_file(run / "launch" / "fleet.json"))["jobs"].empty());
}

}  // namespace
