// Drives the built yeto-host as a user would: exit codes, help, errors, config printing.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "support/process.hpp"
#include "support/temp_dir.hpp"

using yeto::test::run_host;
using yeto::test::TempDir;

namespace {
bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }
}  // namespace

TEST(Cli, ProgramHelpExitsZeroAndDocumentsEveryFlag) {
  const auto r = run_host({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Commands:"));
  for (const char* flag : {"--model ", "--lora-r ", "--micro-batch-size ", "--bucket-by-shape", "--fragment-pattern ",
                           "--pooled-text-embeds-column ", "--output ", "--set KEY=VALUE"})
    EXPECT_TRUE(contains(r.out, flag)) << flag;
  for (const char* cmd : {"train", "syncer", "learner", "export", "sample", "cache", "plugins", "init-model",
                          "report", "version", "config"})
    EXPECT_TRUE(contains(r.out, std::string("\n  ") + cmd + " ")) << cmd;
}

TEST(Cli, EveryCommandHasHelpExitingZero) {
  for (const char* cmd : {"train", "syncer", "learner", "export", "merge", "sample", "cache", "data", "plugins",
                          "init-model", "inspect", "check-parity", "report", "version", "config", "launch"}) {
    const auto r = run_host({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    EXPECT_TRUE(contains(r.out, std::string("Usage: yeto-host ") + cmd)) << cmd << ": " << r.out;
    const auto h = run_host({cmd, "-h"});
    EXPECT_EQ(h.exit_code, 0) << cmd;
  }
}

TEST(Cli, NoArgumentsIsUsageError) {
  const auto r = run_host({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "no command given"));
}

TEST(Cli, UnknownCommandSuggests) {
  const auto r = run_host({"trian"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "unknown command 'trian'; did you mean 'train'?")) << r.err;
}

TEST(Cli, UnknownOptionSuggests) {
  const auto r = run_host({"config", "--lora-rank", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "unknown option '--lora-rank'")) << r.err;
  EXPECT_TRUE(contains(r.err, "did you mean")) << r.err;
}

TEST(Cli, MissingOptionValueIsUsageError) {
  const auto r = run_host({"config", "--lora-r"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "needs a value")) << r.err;
}

TEST(Cli, RunConfigFlagRefusedByCommandWithoutConfig) {
  const auto r = run_host({"version", "--lora-r", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "takes no run configuration")) << r.err;
}

TEST(Cli, VersionPrintsBuildIdentity) {
  const auto r = run_host({"version", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["version"].get<std::string>().empty());
  EXPECT_FALSE(j["torch_version"].get<std::string>().empty());
  EXPECT_EQ(run_host({"--version"}).exit_code, 0);
}

TEST(Cli, ConfigPrintShowsOriginOfEachValue) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 4\n");
  const auto r = run_host({"config", "--print", "--config", f.string(), "--lora-alpha", "2", "--set", "train.max_steps=7",
                           "--bucket-by-shape"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "# file " + f.string() + ":2:1")) << r.out;
  EXPECT_TRUE(contains(r.out, "# flag --lora-alpha")) << r.out;
  EXPECT_TRUE(contains(r.out, "max_steps = 7")) << r.out;
  EXPECT_TRUE(contains(r.out, "# flag --set train.max_steps")) << r.out;
  EXPECT_TRUE(contains(r.out, "bucket_by_shape = true")) << r.out;
  EXPECT_TRUE(contains(r.out, "# default")) << r.out;
  const auto neg = run_host({"config", "--json", "--config", f.string(), "--bucket-by-shape", "--no-bucket-by-shape"});
  ASSERT_EQ(neg.exit_code, 0) << neg.err;
  EXPECT_EQ(nlohmann::json::parse(neg.out)["data.bucket_by_shape"]["value"], false);
}

TEST(Cli, ConfigErrorsExitTwoWithLocation) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nrr = 4\n");
  const auto r = run_host({"config", "--config", f.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, f.string() + ":2:1: unknown key 'lora.rr'")) << r.err;
  EXPECT_TRUE(contains(r.err, "did you mean 'lora.r'?")) << r.err;
}

TEST(Cli, MalformedAndMissingConfigFiles) {
  TempDir t;
  const auto bad = t.write("bad.toml", "[lora\nr = 4\n");
  const auto r = run_host({"config", "--config", bad.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, bad.string() + ":1:")) << r.err;
  const auto m = run_host({"config", "--config", (t / "missing.toml").string()});
  EXPECT_EQ(m.exit_code, 31);
  EXPECT_TRUE(contains(m.err, "config file not found")) << m.err;
}

TEST(Cli, BareConfigRunsTrainAndValidatesFirst) {
  TempDir t;
  const auto bad = t.write("bad.toml", "[train]\nmax_steps = -1\n");
  EXPECT_EQ(run_host({"--config", bad.string()}).exit_code, 2);
}

TEST(Cli, ConfigKeysMarkdownMatchesDoc) {
  const auto r = run_host({"config", "--keys", "--markdown"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, yeto::test::read_text(std::string(YETO_SOURCE_DIR) + "/docs/CONFIG.md"));
}

TEST(Cli, LogFileGetsDebugRecordsWhileConsoleStaysQuiet) {
  TempDir t;
  const auto log = t / "logs/yeto.log";
  const auto r = run_host({"config", "--check", "--set", "log.file=" + log.string(), "--log-level", "warn"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "run configuration resolved")) << r.err;
  const std::string text = yeto::test::read_text(log);
  EXPECT_TRUE(contains(text, "[debug] run configuration resolved (sha256:")) << text;
  const auto bad = run_host({"config", "--check", "--log-level", "loud"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "log.level")) << bad.err;
}

TEST(Cli, BuiltinComponentClassesAreRegisteredAtStartup) {
  // yeto-host registers its own classes before dispatching, so inspecting a FLUX.1 repository
  // finds implementations for everything but the family's denoiser (which its plugin serves).
  const auto r = run_host({"inspect", std::string(YETO_TEST_FIXTURES) + "/repos/flux-tiny"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  for (const char* line : {"scheduler: FlowMatchEulerDiscreteScheduler [diffusers]  implemented",
                           "text_encoder: CLIPTextModel [transformers]  implemented",
                           "text_encoder_2: T5EncoderModel [transformers]  implemented",
                           "tokenizer: CLIPTokenizer [transformers]  implemented",
                           "tokenizer_2: T5TokenizerFast [transformers]  implemented",
                           "vae: AutoencoderKL [diffusers]  implemented"})
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
}

TEST(Cli, InspectReadsPythonStyleNonFiniteConfigValues) {
  // PixArt's scheduler_config.json holds "lambda_min_clipped": -Infinity, as Python writes it.
  const auto r = run_host({"inspect", std::string(YETO_TEST_FIXTURES) + "/repos/pixart-tiny"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "scheduler: DPMSolverMultistepScheduler [diffusers]  implemented")) << r.out;
}

// `launch` where the engine's client is not installed: the manifests are written and the exact
// commands printed; a bad island entry is a usage error naming the bad part.
TEST(Cli, LaunchWithoutTheEngineClientWritesTheManifestsAndPrintsTheCommands) {
  TempDir dir;
  const auto run = dir / "run";
  const std::map<std::string, std::string> env{{"PATH", "/nonexistent"}};
  const auto r = run_host({"launch", "up", "--engine", "skypilot", "--gpu", "aws:8xH100@us-east-1", "--gpu", "gcp:2x8xL4",
                           "--output", run.string(), "--set", "run.name=Ada Run"},
                          "", env);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "sky is not on PATH here")) << r.out;
  EXPECT_TRUE(contains(r.out, "export YETO_RUN_SECRET=\"$(cat " + (run / "run.secret").string() +
                                  ")\"; export YETO_SYNCER=\"$(sky status --ip yeto-ada-run-syncer):29400\"; sky jobs launch "
                                  "--yes --name yeto-ada-run-island-1 --env YETO_SYNCER --secret YETO_RUN_SECRET"))
      << r.out;
  EXPECT_TRUE(std::filesystem::exists(run / "launch" / "skypilot" / "island-1.yaml"));
  EXPECT_FALSE(std::filesystem::exists(run / "launch" / "fleet.json"));  // nothing was submitted
  const auto k = run_host({"launch", "plan", "--engine", "kubernetes", "--gpu", "k8s:8xH100", "--output", run.string()});
  EXPECT_EQ(k.exit_code, 2) << k.all();
  EXPECT_TRUE(contains(k.err, "launch.image")) << k.err;
  const auto bad = run_host({"launch", "plan", "--gpu", "aws:8H100", "--output", run.string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "--gpu 'aws:8H100': no '<count>x' before the accelerator name")) << bad.err;
  const auto none = run_host({"launch", "status", "--output", (dir / "other").string()});
  EXPECT_EQ(none.exit_code, 31) << none.all();
  EXPECT_TRUE(contains(none.err, "no fleet launched from this run directory")) << none.err;
  const auto sub = run_host({"launch", "stat", "--output", run.string()});
  EXPECT_EQ(sub.exit_code, 2);
  EXPECT_TRUE(contains(sub.err, "status")) << sub.err;
}

// SkyPilot through a stand-in `sky` that records its arguments: spot islands are submitted as
// managed jobs and the syncer as a cluster, the record says which, and `logs` / `down` address
// each job as it was submitted even when launch.spot says otherwise afterwards.
TEST(Cli, LaunchSkyPilotLogsAndDownFollowTheRecordNotTheConfig) {
  TempDir dir;
  const auto run = dir / "run";
  const auto calls = dir / "sky-calls.txt";
  const auto sky = dir.write("bin/sky", "#!/bin/sh\necho \"$*\" >> '" + calls.string() +
                                            "'\ncase \"$*\" in *status*--ip*) echo 10.1.2.3 ;; *logs*) echo log-of-$# ;; esac\n");
  std::filesystem::permissions(sky, std::filesystem::perms::owner_all);
  const std::map<std::string, std::string> env{{"PATH", (dir / "bin").string() + ":/usr/bin:/bin"}};
  const auto up = run_host({"launch", "up", "--engine", "skypilot", "--gpu", "aws:1xH100", "--output", run.string(),
                            "--set", "launch.spot=true", "--set", "run.name=r"},
                           "", env);
  ASSERT_EQ(up.exit_code, 0) << up.all();
  const auto rec = nlohmann::json::parse(yeto::test::read_text(run / "launch" / "fleet.json"));
  ASSERT_EQ(rec["jobs"].size(), 2u);
  EXPECT_EQ(rec["jobs"][0]["kind"], "cluster");
  EXPECT_EQ(rec["jobs"][1]["kind"], "managed-job");
  const auto logs = run_host({"launch", "logs", "--island", "0", "--output", run.string(), "--set", "launch.spot=false"},
                             "", env);
  EXPECT_EQ(logs.exit_code, 0) << logs.all();
  const auto down = run_host({"launch", "down", "--output", run.string(), "--set", "launch.spot=false"}, "", env);
  EXPECT_EQ(down.exit_code, 0) << down.all();
  const std::string log = yeto::test::read_text(calls);
  EXPECT_TRUE(contains(log, "jobs logs --no-follow --name yeto-r-island-0\n")) << log;
  EXPECT_TRUE(contains(log, "jobs cancel --yes --name yeto-r-island-0\n")) << log;
  EXPECT_TRUE(contains(log, "down --yes yeto-r-syncer\n")) << log;
  EXPECT_FALSE(contains(log, "down --yes yeto-r-island-0")) << log;  // no cluster of that name was made
  EXPECT_FALSE(contains(log, "cancel --yes --name yeto-r-syncer")) << log;
}
