// `yeto-host launch` without an engine: the island grammar, the manifests of every engine
// (golden files, and parsed back as YAML and checked field by field), names, quoting and the
// fleet record.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/subprocess.hpp"
#include "fleet/client.hpp"
#include "fleet/fleet.hpp"
#include "fleet/record.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace yf = yeto::fleet;

namespace {

std::string usage_error(const std::string& spec) {
  try {
    yf::parse_island_spec(spec);
  } catch (const yeto::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(FleetSpec, ParsesEveryPartOfTheGrammar) {
  auto s = yf::parse_island_spec("aws:8xH100");
  EXPECT_EQ(s.cloud, "aws");
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.per_node, 8);
  EXPECT_EQ(s.gpu, "H100");
  EXPECT_EQ(s.region, "");
  EXPECT_EQ(s.ranks(), 8);
  s = yf::parse_island_spec("gcp:2x8xA100-80GB@us-central1");
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.per_node, 8);
  EXPECT_EQ(s.gpu, "A100-80GB");
  EXPECT_EQ(s.region, "us-central1");
  EXPECT_EQ(s.ranks(), 16);
  EXPECT_EQ(s.to_string(), "gcp:2x8xA100-80GB@us-central1");
  s = yf::parse_island_spec("runpod:4x3090");  // an accelerator name made of digits
  EXPECT_EQ(s.per_node, 4);
  EXPECT_EQ(s.gpu, "3090");
  s = yf::parse_island_spec("slurm:3x2xcpu");
  EXPECT_TRUE(s.cpu_only());
  EXPECT_TRUE(s.default_cloud());
  EXPECT_EQ(s.ranks(), 6);
  s = yf::parse_island_spec("lambda:1xGH200@us-east-3");
  EXPECT_EQ(yf::parse_island_spec(s.to_string()).to_string(), "lambda:1xGH200@us-east-3");
  EXPECT_EQ(yf::parse_island_spec("aws:1x8xH100").to_string(), "aws:8xH100");
}

TEST(FleetSpec, BadEntriesNameTheBadPart) {
  EXPECT_NE(usage_error("8xH100").find("no 'cloud:' prefix"), std::string::npos);
  EXPECT_NE(usage_error(":8xH100").find("cloud before ':' is empty"), std::string::npos);
  EXPECT_NE(usage_error("aws:H100").find("no '<count>x'"), std::string::npos);
  EXPECT_NE(usage_error("aws:0xH100").find("'0' is not a count"), std::string::npos);
  EXPECT_NE(usage_error("aws:8x").find("accelerator name after 'x' is empty"), std::string::npos);
  EXPECT_NE(usage_error("aws:8xH100@").find("region after '@' is empty"), std::string::npos);
  EXPECT_NE(usage_error("aws:8xH1 00").find("accelerator name 'H1 00'"), std::string::npos);
  EXPECT_NE(usage_error("aws:32xH100").find("32 GPUs per node"), std::string::npos);
  EXPECT_NE(usage_error("a$s:8xH100").find("the cloud 'a$s'"), std::string::npos);
  // Every message shows the grammar.
  EXPECT_NE(usage_error("aws:H100").find("cloud:[nodes x]<count>x<gpu>[@region]"), std::string::npos);
}

TEST(FleetNames, RunNamesBecomeDnsLabels) {
  EXPECT_EQ(yf::fleet_name("My Run_2"), "yeto-my-run-2");
  EXPECT_EQ(yf::fleet_name("--"), "yeto-run");
  EXPECT_EQ(yf::fleet_name(std::string(100, 'a')).size(), 40u);
  EXPECT_EQ(yf::shell_quote("plain/path-1.toml"), "plain/path-1.toml");
  EXPECT_EQ(yf::shell_quote("it's $HOME"), "'it'\\''s $HOME'");
  EXPECT_EQ(yf::shell_quote(""), "''");
}

// A fleet with fixed paths, so its manifests are byte-stable.
yf::Fleet sample_fleet(yf::Engine engine, std::vector<std::string> specs, bool spot, const fs::path& run_dir) {
  yf::Fleet f;
  f.name = "yeto-demo";
  f.run_dir = run_dir;
  f.config_file = "/home/ada/runs/demo.toml";
  f.sets = {"train.max_steps=200", "run.name=it's a demo"};
  for (const auto& s : specs) f.islands.push_back(yf::parse_island_spec(s));
  f.s.engine = engine;
  f.s.spot = spot;
  f.s.host_bin = engine == yf::Engine::slurm ? "/opt/yeto/bin/yeto-host" : "yeto-host";
  f.s.setup = "module load cuda/12.4";
  f.s.time_limit = engine == yf::Engine::slurm ? "02:00:00" : "";
  f.s.image = "ghcr.io/example/yeto:1.0";
  f.s.queue = engine == yf::Engine::kubernetes ? "team-a" : "";
  f.s.volume_claim = engine == yf::Engine::kubernetes ? "yeto-runs" : "";
  return f;
}

// tests/fixtures/fleet/<case>/<file>; YETO_UPDATE_GOLDEN=1 rewrites them.
void expect_golden(const std::string& case_name, const std::vector<yf::Manifest>& ms) {
  const fs::path dir = fs::path(YETO_TEST_FIXTURES) / "fleet" / case_name;
  const bool update = std::getenv("YETO_UPDATE_GOLDEN") != nullptr;
  for (const auto& m : ms) {
    const fs::path golden = dir / m.path.filename();
    if (update) {
      fs::create_directories(dir);
      std::ofstream(golden, std::ios::binary) << m.text;
      continue;
    }
    ASSERT_TRUE(fs::exists(golden)) << golden << " (run with YETO_UPDATE_GOLDEN=1 to write it)";
    EXPECT_EQ(m.text, yeto::read_file(golden)) << golden;
  }
}

struct Case {
  const char* name;
  yf::Engine engine;
  std::vector<std::string> specs;
  bool spot;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"slurm-1", yf::Engine::slurm, {"slurm:2xcpu"}, true},
      {"slurm-3", yf::Engine::slurm, {"gpu:8xH100", "slurm:2x4xA100", "slurm:1xcpu"}, true},
      {"skypilot-1-ondemand", yf::Engine::skypilot, {"aws:8xH100@us-east-1"}, false},
      {"skypilot-3-spot", yf::Engine::skypilot, {"aws:8xH100@us-east-1", "gcp:2x8xA100-80GB", "default:4xL4"}, true},
      {"kubernetes-1", yf::Engine::kubernetes, {"k8s:8xH100"}, false},
      {"kubernetes-3", yf::Engine::kubernetes, {"h100-pool:2x8xH100", "k8s:4xL4", "k8s:2xcpu"}, true},
  };
  return c;
}

TEST(FleetManifests, MatchTheGoldenFiles) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    expect_golden(c.name, yf::render(sample_fleet(c.engine, c.specs, c.spot, "/home/ada/runs/demo")));
  }
}

// Writes every case's manifests and the client commands, then parses them back with Python's
// YAML reader (SkyPilot, Kubernetes) or bash -n (Slurm) and checks them field by field.
TEST(FleetManifests, ParseBackFieldByField) {
  yeto::test::TempDir dir;
  std::string cases_json = "[";
  for (const auto& c : cases()) {
    const fs::path run = dir / c.name;
    const auto f = sample_fleet(c.engine, c.specs, c.spot, run);
    const auto ms = yf::render(f);
    yf::write_manifests(f, ms);
    // Private: the manifests, their directory, the secret.
    struct stat sb {};
    ASSERT_EQ(::stat(ms[0].path.c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0600u) << ms[0].path;
    ASSERT_EQ(::stat(ms[0].path.parent_path().c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat((run / "run.secret").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0600u);
    const std::string secret = yeto::read_file(run / "run.secret");
    for (const auto& m : ms) EXPECT_EQ(m.text.find(secret.substr(0, 64)), std::string::npos) << m.path;
    for (const auto& cmd : yf::submit_commands(f, ms))
      for (const auto& a : cmd.argv) EXPECT_EQ(a.find(secret.substr(0, 64)), std::string::npos) << a;
    if (cases_json.size() > 1) cases_json += ",";
    cases_json += "{\"name\":\"" + std::string(c.name) + "\",\"engine\":\"" + yf::engine_name(c.engine) + "\",\"dir\":\"" +
                  ms[0].path.parent_path().string() + "\",\"spot\":" + (c.spot ? "true" : "false") + ",\"specs\":[";
    for (std::size_t i = 0; i < c.specs.size(); ++i) cases_json += (i ? ",\"" : "\"") + c.specs[i] + "\"";
    cases_json += "]}";
  }
  cases_json += "]";
  dir.write("cases.json", cases_json);
  const auto py = yeto::test::run_process({"python3", "-c", "import yaml"});
  if (py.exit_code != 0) GTEST_SKIP() << "python3 with PyYAML is needed to parse the manifests back (scripts/setup.sh installs python3-yaml)";
  const auto r = yeto::test::run_process({"python3", YETO_FLEET_CHECK_PY, (dir / "cases.json").string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.out.find("checked 6 cases"), std::string::npos) << r.all();
}

// A multi-rank island runs the run's shard mode: fsdp when train.shard = "fsdp", ddp otherwise
// (none included); a one-rank island gets no train.shard of its own.
TEST(FleetManifests, MultiRankIslandsRunTheRunsShardMode) {
  for (const auto engine : {yf::Engine::slurm, yf::Engine::skypilot, yf::Engine::kubernetes}) {
    SCOPED_TRACE(yf::engine_name(engine));
    for (const std::string shard : {"none", "ddp", "fsdp"}) {
      auto f = sample_fleet(engine, {"slurm:2xcpu", "slurm:1xcpu"}, true, "/r");
      f.shard = shard;
      const auto ms = yf::render(f);
      ASSERT_EQ(ms.size(), 3u);
      const std::string want = shard == "fsdp" ? "train.shard=fsdp" : "train.shard=ddp";
      const std::string other = shard == "fsdp" ? "train.shard=ddp" : "train.shard=fsdp";
      EXPECT_NE(ms[1].text.find("--set " + want), std::string::npos) << shard;
      EXPECT_EQ(ms[1].text.find(other), std::string::npos) << shard;
      EXPECT_EQ(ms[2].text.find("train.shard"), std::string::npos) << shard;
    }
  }
}

TEST(FleetManifests, KubernetesNeedsAnImage) {
  auto f = sample_fleet(yf::Engine::kubernetes, {"k8s:8xH100"}, true, "/tmp/x");
  f.s.image.clear();
  EXPECT_THROW(yf::render(f), yeto::UsageError);
  f.islands.clear();
  f.s.image = "img";
  EXPECT_THROW(yf::render(f), yeto::UsageError);
}

TEST(FleetManifests, ClientCommandsKeepTheSecretInTheEnvironment) {
  const auto f = sample_fleet(yf::Engine::skypilot, {"aws:8xH100", "gcp:8xL4"}, true, "/r");
  const auto cmds = yf::submit_commands(f, yf::render(f));
  ASSERT_EQ(cmds.size(), 3u);
  EXPECT_EQ(cmds[0].argv[0], "sky");
  EXPECT_EQ(cmds[0].argv[1], "launch");
  EXPECT_EQ(cmds[1].argv[1], "jobs");  // spot islands are managed jobs (recovered on preemption)
  for (const auto& c : cmds) EXPECT_NE(std::find(c.env.begin(), c.env.end(), "YETO_RUN_SECRET"), c.env.end());
  const auto kf = sample_fleet(yf::Engine::kubernetes, {"k8s:8xH100"}, true, "/r");
  const auto k = yf::submit_commands(kf, yf::render(kf));
  ASSERT_GE(k.size(), 3u);
  EXPECT_EQ(k[0].role, "secret");
  EXPECT_EQ(k[0].argv.back(), "--from-file=run.secret=/r/run.secret");
  const auto sf = sample_fleet(yf::Engine::slurm, {"slurm:1xcpu"}, true, "/r");
  const auto s = yf::submit_commands(sf, yf::render(sf));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].argv, (std::vector<std::string>{"sbatch", "--parsable", "/r/launch/slurm/island-0.sbatch"}));
}

TEST(FleetRecord, RoundTripsAndRefusesGarbage) {
  yeto::test::TempDir dir;
  EXPECT_THROW(yf::read_record(dir.path()), yeto::Error);
  yf::FleetRecord r{"slurm", "yeto-x", "default", {{"syncer", "", "/m/s", "12", "t", ""}, {"island-0", "slurm:1xcpu", "/m/i", "13", "t", ""}}};
  yf::write_record(dir.path(), r);
  const auto back = yf::read_record(dir.path());
  ASSERT_EQ(back.jobs.size(), 2u);
  EXPECT_EQ(back.jobs[1].job, "13");
  EXPECT_EQ(back.jobs[1].spec, "slurm:1xcpu");
  EXPECT_EQ(back.jobs[1].kind, "");
  r.engine = "skypilot";
  r.jobs[1].kind = "managed-job";
  yf::write_record(dir.path(), r);
  EXPECT_EQ(yf::read_record(dir.path()).jobs[1].kind, "managed-job");
  r.jobs[1].kind = "pod";
  yf::write_record(dir.path(), r);
  EXPECT_THROW(yf::read_record(dir.path()), yeto::Error);
  dir.write("launch/fleet.json", "{\"format\": 1, \"engine\": \"pbs\", \"name\": \"x\", \"jobs\": []}");
  try {
    yf::read_record(dir.path());
    FAIL() << "accepted an unknown engine";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fleet.json"), std::string::npos) << e.what();
  }
}

TEST(FleetClient, CapturesOutputAndReportsMissingPrograms) {
  const auto r = yf::run_client({"sh", "-c", "printf out; printf err >&2; printf %s \"$YETO_T\"; exit 3"}, {{"YETO_T", "v"}});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "outv");
  EXPECT_EQ(r.err, "err");
  EXPECT_EQ(yf::run_client({"yeto-no-such-program"}).exit_code, 127);
  EXPECT_TRUE(yf::on_path("sh"));
  EXPECT_FALSE(yf::on_path("yeto-no-such-program"));
  // The shared runner (tests drive yeto-host through it too): a working directory, and a
  // program found on the PATH the child is given, not on this process's.
  yeto::test::TempDir dir;
  const auto script = dir.write("bin/yeto-t", "#!/bin/sh\npwd\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  EXPECT_EQ(yeto::run_captured({"yeto-t"}).exit_code, 127);
  const auto c = yeto::run_captured({"yeto-t"}, {{"PATH", (dir / "bin").string() + ":/usr/bin:/bin"}},
                                    (dir / "bin").string());
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, std::filesystem::canonical(dir / "bin").string() + "\n");
  EXPECT_EQ(yeto::run_captured({"./yeto-t"}, {}, (dir / "bin").string()).exit_code, 0);
}

}  // namespace
