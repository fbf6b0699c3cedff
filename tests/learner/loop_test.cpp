// The generic learner loop driving the tinyden test plugin on a generated captioned PNG dataset:
// val_loss drops, runs are bit-reproducible, a graceful stop (save_quit file, SIGTERM) and a
// kill -9 after a checkpoint both resume bit-identically, and bad rows are reported with their
// row numbers under both on_bad_row policies. The tinyden test plugin is not Flux: these tests
// prove the loop is generic.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "learner/outer_sync.hpp"
#include "learner/trainer.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "dataset.hpp"
#include "tinyden_model.hpp"

namespace yeto::learner {
namespace {

namespace fs = std::filesystem;
using yeto::test::TempDir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Toml {
  int steps = 10;
  int validation_every = 0;
  int seed = 11;
  std::string data;       // extra [data] lines
  std::string train;      // extra [train] lines
  std::string diffusion;  // extra [diffusion] lines
  std::string micro = "4";
  std::string split = "0.25";  // validation.split
};

std::string run_toml(const Toml& t) {
  return "[data]\npath = \"data/train.jsonl\"\nheight = 16\nwidth = 16\nworkers = 1\n" + t.data +
         "[validation]\nsplit = " + t.split + "\nmax_rows = 8\nevery = " + std::to_string(t.validation_every) +
         "\n[train]\nmax_steps = " + std::to_string(t.steps) + "\nmicro_batch_size = " + t.micro +
         "\ncheckpoint_every = 4\nmax_grad_norm = 1.0\n" + t.train +
         "[optimizer]\nlearning_rate = 0.03\nweight_decay = 0.0\nschedule = \"cosine\"\nwarmup_steps = 2\n"
         "[diffusion]\nseed = " + std::to_string(t.seed) + "\ntimestep_sampling = \"logit-normal\"\n" + t.diffusion;
}

std::string run_toml(int steps) {
  Toml t;
  t.steps = steps;
  return run_toml(t);
}

// A run directory layout: DIR/run.toml, DIR/data/, DIR/run/.
struct TrialRun {
  TempDir dir;
  explicit TrialRun(const std::string& toml, int rows = 24, const std::map<int, std::string>& bad = {}) {
    test::write_dataset(dir / "data", rows, bad);
    dir.write("run.toml", toml);
  }
  config::Config config() const { return config::Config::resolve(dir / "run.toml", {}); }
  fs::path out() const { return dir / "run"; }
  RunResult train(OuterSync* sync = nullptr, bool full_step = false) const {
    auto m = full_step ? test::open_fullstep_model() : test::open_tinyden_model();
    RunOptions o;
    o.run_dir = out();
    o.console = false;
    return learner::train(*m.model, config(), o, sync);
  }
};

std::map<std::int64_t, double> losses(const fs::path& run_dir, const std::string& field = "loss") {
  std::map<std::int64_t, double> out;
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(field)) out[j.at("step").get<std::int64_t>()] = j.at(field).get<double>();
  }
  return out;
}

// Writes save_quit into the run directory after step `step`, the way a user would drop it.
class DropFileAtStep final : public OuterSync {
 public:
  DropFileAtStep(fs::path dir, std::int64_t step) : dir_(std::move(dir)), step_(step) {}
  void start(const Trainable&) override { started = true; }
  void after_step(std::int64_t step, std::int64_t samples, const Trainable&) override {
    last_samples = samples;
    if (step == step_) atomic_write(dir_ / "save_quit", "");
  }
  bool stop_requested() const override { return false; }
  bool finish(const Trainable&) override {
    finished = true;
    return true;
  }
  bool started = false, finished = false;
  std::int64_t last_samples = 0;

 private:
  fs::path dir_;
  std::int64_t step_;
};

// The syncer's budget cutoff announced once step `step` is done.
class CutoffAfterStep final : public OuterSync {
 public:
  explicit CutoffAfterStep(std::int64_t step) : step_(step) {}
  void start(const Trainable&) override {}
  void after_step(std::int64_t step, std::int64_t, const Trainable&) override { cut_ = cut_ || step >= step_; }
  bool stop_requested() const override { return cut_; }
  bool finish(const Trainable&) override {
    finished = true;
    return true;
  }
  bool finished = false;

 private:
  std::int64_t step_;
  bool cut_ = false;
};

TEST(LearnerLoop, ValLossDropsAndTheRunDirectoryIsComplete) {
  Toml t;
  t.steps = 40;
  t.validation_every = 20;
  TrialRun run(run_toml(t));
  const auto r = run.train();
  EXPECT_EQ(r.steps, 40);
  ASSERT_TRUE(r.first_val_loss && r.last_val_loss);
  std::cout << "val_loss " << *r.first_val_loss << " -> " << *r.last_val_loss << "\n";
  EXPECT_LT(*r.last_val_loss, 0.8 * *r.first_val_loss) << "val_loss did not drop clearly";

  // metrics.jsonl: one record per step with the required fields, val_loss at 0, 20, 40.
  const auto val = losses(run.out(), "val_loss");
  EXPECT_EQ(val.size(), 3u);
  EXPECT_TRUE(val.count(0) && val.count(20) && val.count(40));
  std::istringstream in(read_file(run.out() / "metrics.jsonl"));
  std::string line;
  int step_records = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++step_records;
    for (const char* k : {"step", "loss", "lr", "grad_norm", "samples_per_s", "time_data_s", "time_forward_s",
                          "time_backward_s", "time_optimizer_s", "peak_rss_mb"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
  }
  EXPECT_EQ(step_records, 40);
  bool events = false;
  for (const auto& e : fs::directory_iterator(run.out() / "tensorboard"))
    events = events || contains(e.path().filename().string(), "tfevents");
  EXPECT_TRUE(events);
  EXPECT_TRUE(fs::exists(run.out() / "lora.safetensors"));
  EXPECT_TRUE(contains(read_file(run.out() / "config.toml"), "max_steps = 40"));
  const auto prov = nlohmann::json::parse(read_file(run.out() / "provenance.json"));
  EXPECT_TRUE(contains(prov.dump(), "plugin tinyden")) << prov.dump();
  EXPECT_TRUE(fs::exists(run.out() / "checkpoints/latest"));
}

// validation.draws: each held-out row is evaluated with that many timestep / noise draws (draw
// 0 is the single draw of the default), val_loss is their mean and val_loss_stderr their
// standard error; the training itself is untouched (the same losses, step for step).
TEST(LearnerLoop, ValidationDrawsAverageAndReportTheirStandardError) {
  std::map<int, std::map<std::int64_t, double>> val, se, loss;
  for (const int draws : {1, 2, 5}) {
    Toml t;
    t.steps = 6;
    t.validation_every = 3;
    std::string toml = run_toml(t);
    toml.replace(toml.find("max_rows = 8"), 12, "max_rows = 8\ndraws = " + std::to_string(draws));
    TrialRun run(toml);
    run.train();
    val[draws] = losses(run.out(), "val_loss");
    se[draws] = losses(run.out(), "val_loss_stderr");
    loss[draws] = losses(run.out(), "loss");
  }
  ASSERT_EQ(val[1].size(), 3u);
  EXPECT_TRUE(se[1].empty()) << "one draw has no standard error";
  for (const int draws : {2, 5}) {
    EXPECT_EQ(loss[draws], loss[1]) << draws << " draws changed the training";
    ASSERT_EQ(se[draws].size(), 3u) << draws << " draws";
    for (const auto& [step, v] : val[draws]) {
      EXPECT_NE(v, val[1].at(step)) << "step " << step << ": " << draws << " draws gave the one draw's loss";
      EXPECT_GT(se[draws].at(step), 0.0) << "step " << step;
    }
  }
  // Two draws a and b: the mean (a + b) / 2 and the standard error |a - b| / 2, with a the
  // single draw of validation.draws = 1, so the standard error is |mean - a|.
  for (const auto& [step, mean] : val[2])
    EXPECT_NEAR(se[2].at(step), std::abs(mean - val[1].at(step)), 1e-9 * std::max(1.0, mean)) << "step " << step;
}

TEST(LearnerLoop, SameSeedSameBytesOtherSeedOtherBytes) {
  Toml other;
  other.steps = 6;
  other.seed = 12;
  TrialRun a(run_toml(6)), b(run_toml(6)), c(run_toml(other));
  a.train();
  b.train();
  c.train();
  const auto bytes = read_file(a.out() / "lora.safetensors");
  EXPECT_EQ(bytes, read_file(b.out() / "lora.safetensors"));
  EXPECT_NE(bytes, read_file(c.out() / "lora.safetensors"));
  EXPECT_EQ(losses(a.out()), losses(b.out()));
}

TEST(LearnerLoop, SaveQuitFileThenResumeIsBitIdentical) {
  TrialRun full(run_toml(10)), split(run_toml(10));
  full.train();
  DropFileAtStep drop(split.out(), 6);
  const auto first = split.train(&drop);
  EXPECT_TRUE(drop.started);
  EXPECT_FALSE(drop.finished) << "a stopped run must not run the terminal handshake";
  EXPECT_TRUE(first.stopped_early);
  EXPECT_EQ(first.steps, 6);
  EXPECT_EQ(drop.last_samples, 4 * 4 + 2 + 4);  // 18 training rows: an epoch is 4 + 4 + 4 + 4 + 2
  EXPECT_TRUE(fs::exists(split.out() / "checkpoints/step-00000006/state.json"));
  EXPECT_FALSE(fs::exists(split.out() / "lora.safetensors"));
  EXPECT_FALSE(fs::exists(split.out() / "save_quit"));
  const auto second = split.train();
  EXPECT_FALSE(second.stopped_early);
  EXPECT_EQ(second.steps, 10);
  EXPECT_EQ(read_file(full.out() / "lora.safetensors"), read_file(split.out() / "lora.safetensors"));
  EXPECT_EQ(losses(full.out()), losses(split.out()));
  EXPECT_EQ(losses(full.out(), "val_loss"), losses(split.out(), "val_loss"));
  // TensorBoard is told the run resumed at step 7 (a session START there), so steps 7.. of the
  // first part are not drawn twice.
  std::string events;
  for (const auto& e : fs::directory_iterator(split.out() / "tensorboard")) events += read_file(e.path());
  EXPECT_TRUE(contains(events, "resumed from step 6"));
}

// A damaged newest checkpoint (one byte of its weights changed, or its directory gone) is
// passed over: the run resumes from the older one kept and still ends bit-identical.
TEST(LearnerLoop, ADamagedLatestCheckpointFallsBackToTheOlderOne) {
  TrialRun full(run_toml(10));
  full.train();
  for (const bool remove_dir : {false, true}) {
    SCOPED_TRACE(remove_dir ? "latest removed" : "latest damaged");
    TrialRun split(run_toml(10));
    DropFileAtStep drop(split.out(), 6);
    split.train(&drop);
    const fs::path newest = split.out() / "checkpoints/step-00000006";
    ASSERT_TRUE(fs::exists(newest / "state.json"));
    ASSERT_TRUE(fs::exists(split.out() / "checkpoints/step-00000004/state.json"));
    if (remove_dir) {
      fs::remove_all(newest);
    } else {
      std::string bytes = read_file(newest / "trainable.safetensors");
      bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x40);
      atomic_write(newest / "trainable.safetensors", bytes);
    }
    const auto second = split.train();
    EXPECT_EQ(second.steps, 10);
    EXPECT_EQ(read_file(full.out() / "lora.safetensors"), read_file(split.out() / "lora.safetensors"));
    EXPECT_EQ(losses(full.out()), losses(split.out()));
  }
  // With nothing intact the resume is refused, naming the damage, and nothing is trained.
  TrialRun broken(run_toml(10));
  DropFileAtStep drop(broken.out(), 6);
  broken.train(&drop);
  for (const char* step : {"step-00000004", "step-00000006"})
    atomic_write(broken.out() / "checkpoints" / step / "optimizer.safetensors", "damaged");
  try {
    broken.train();
    FAIL() << "resumed from damaged checkpoints";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::bad_input);
    EXPECT_TRUE(contains(e.what(), "no intact checkpoint")) << e.what();
    EXPECT_TRUE(contains(e.what(), "step-00000006/optimizer.safetensors: contents do not match")) << e.what();
  }
  // `latest` naming a checkpoint that is gone, with none older: refused too, not a fresh start.
  for (const char* step : {"step-00000004", "step-00000006"}) fs::remove_all(broken.out() / "checkpoints" / step);
  try {
    broken.train();
    FAIL() << "started over although checkpoints/latest names a checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::bad_input);
    EXPECT_TRUE(contains(e.what(), "step-00000006 is missing")) << e.what();
  }
}

// The same, through a separate process: SIGTERM (graceful) and SIGKILL after checkpoint 4.
TEST(LearnerLoop, SigtermAndKillNineThenResumeAreBitIdentical) {
  TrialRun full(run_toml(10)), term(run_toml(10)), kill(run_toml(10));
  auto drive = [](const TrialRun& r, std::vector<std::string> extra) {
    std::vector<std::string> argv = {YETO_LEARNER_DRIVER, (r.dir / "run.toml").string(), r.out().string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return yeto::test::run_process(argv);
  };
  auto res = drive(full, {});
  ASSERT_EQ(res.exit_code, 0) << res.all();

  res = drive(term, {"--term-at-step", "7"});
  ASSERT_EQ(res.exit_code, 0) << res.all();
  EXPECT_TRUE(contains(res.all(), "stopped_early 1")) << res.all();
  EXPECT_TRUE(fs::exists(term.out() / "checkpoints/step-00000007"));
  res = drive(term, {});
  ASSERT_EQ(res.exit_code, 0) << res.all();

  // Killed during step 6, after checkpoint 4: steps 5 and 6 are redone on resume.
  res = drive(kill, {"--kill-at-step", "6"});
  EXPECT_EQ(res.exit_code, 128 + SIGKILL) << res.all();
  EXPECT_EQ(read_file(kill.out() / "checkpoints/latest"), "step-00000004\n");
  EXPECT_EQ(losses(kill.out()).rbegin()->first, 5) << "step 5's record was written before the kill";
  res = drive(kill, {});
  ASSERT_EQ(res.exit_code, 0) << res.all();

  const auto want = read_file(full.out() / "lora.safetensors");
  EXPECT_EQ(want, read_file(term.out() / "lora.safetensors"));
  EXPECT_EQ(want, read_file(kill.out() / "lora.safetensors"));
  EXPECT_EQ(losses(full.out()), losses(term.out()));
  EXPECT_EQ(losses(full.out()), losses(kill.out()));
}

// A run the syncer cuts off before max_steps still ends with an evaluation, so the last
// metrics record carries val_loss; without validation configured it carries none.
TEST(LearnerLoop, SyncerCutoffEvaluatesAtTheLastStep) {
  {
    Toml t;
    t.steps = 10;
    t.validation_every = 4;
    TrialRun run(run_toml(t));
    CutoffAfterStep cut(3);
    const auto r = run.train(&cut);
    EXPECT_EQ(r.steps, 3);
    EXPECT_FALSE(r.stopped_early) << "a budget cutoff is a normal end";
    EXPECT_TRUE(cut.finished);
    EXPECT_TRUE(fs::exists(run.out() / "lora.safetensors"));
    const auto val = losses(run.out(), "val_loss");
    ASSERT_EQ(val.size(), 2u) << read_file(run.out() / "metrics.jsonl");
    EXPECT_TRUE(val.count(0) && val.count(3)) << read_file(run.out() / "metrics.jsonl");
    ASSERT_TRUE(r.last_val_loss);
    EXPECT_EQ(*r.last_val_loss, val.at(3));
    EXPECT_EQ(losses(run.out()).rbegin()->first, 3);
  }
  {
    Toml t;
    t.steps = 10;
    t.split = "0.0";
    TrialRun run(run_toml(t));
    CutoffAfterStep cut(2);
    const auto r = run.train(&cut);
    EXPECT_EQ(r.steps, 2);
    EXPECT_FALSE(r.last_val_loss);
    EXPECT_TRUE(losses(run.out(), "val_loss").empty());
  }
}

TEST(LearnerLoop, BadRowsAreReportedWithTheirRowNumbersUnderBothPolicies) {
  const std::map<int, std::string> bad = {{3, "missing"}, {8, "corrupt"}};
  {
    TrialRun run(run_toml(4), 24, bad);
    try {
      run.train();
      FAIL() << "bad rows accepted under on_bad_row = error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::bad_input) << e.what();
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "line 3") || contains(what, "line 8")) << what;
    }
  }
  {
    Toml t;
    t.steps = 12;
    t.data = "on_bad_row = \"skip\"\n";
    TrialRun run(run_toml(t), 24, bad);
    const auto r = run.train();
    EXPECT_EQ(r.steps, 12);
    EXPECT_EQ(r.skipped_rows, 2);
    ASSERT_EQ(r.bad_rows.size(), 2u);
    const std::string all = r.bad_rows[0] + "\n" + r.bad_rows[1];
    EXPECT_TRUE(contains(all, "train.jsonl line 3")) << all;
    EXPECT_TRUE(contains(all, "train.jsonl line 8")) << all;
  }
}

TEST(LearnerLoop, RefusesAnUnknownLossBeforeTraining) {
  Toml t;
  t.steps = 2;
  t.diffusion = "loss = \"mse\"\n";
  TrialRun run(run_toml(t));
  try {
    run.train();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "accepted: flow_matching")) << e.what();
  }
  EXPECT_FALSE(fs::exists(run.out() / "metrics.jsonl"));
}

// A plugin with loss_step: the learner hands it each batch's rows and tensors and trains what it
// returns, with no scheduler and no denoiser; its metrics are logged as model/<name>.
TEST(LearnerLoop, AFullStepPluginTrainsThroughItsOwnLoss) {
  {
    auto m = test::open_fullstep_model();
    EXPECT_TRUE(m.model->computes_loss());
  }
  Toml t;
  t.steps = 12;
  t.validation_every = 6;
  TrialRun a(run_toml(t)), b(run_toml(t));
  Toml other = t;
  other.seed = 12;
  TrialRun c(run_toml(other));
  const auto r = a.train(nullptr, true);
  EXPECT_EQ(r.steps, 12);
  ASSERT_TRUE(r.first_val_loss && r.last_val_loss);
  EXPECT_LT(*r.last_val_loss, 0.8 * *r.first_val_loss) << *r.first_val_loss << " -> " << *r.last_val_loss;
  std::istringstream in(read_file(a.out() / "metrics.jsonl"));
  std::string line;
  int step_records = 0, short_batches = 0;
  double samples_before = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++step_records;
    ASSERT_TRUE(j.contains("model/mse")) << line;
    EXPECT_DOUBLE_EQ(j.at("model/mse").get<double>(), j.at("loss").get<double>()) << line;
    // The step's rows reached the plugin, each with its caption: micro_batch_size (4) rows, or
    // what is left of the epoch (18 training rows: 4 + 4 + 4 + 4 + 2).
    const double rows = j.at("samples").get<double>() - samples_before;
    samples_before = j.at("samples").get<double>();
    EXPECT_TRUE(rows == 4.0 || rows == 2.0) << line;
    short_batches += rows == 2.0;
    EXPECT_EQ(j.at("model/rows").get<double>(), rows) << line;
    EXPECT_EQ(j.at("model/prompted").get<double>(), rows) << line;
    EXPECT_EQ(j.at("model/training"), 1.0) << line;
    EXPECT_GE(j.at("model/row_sum").get<double>(), rows * (rows - 1) / 2) << line;  // distinct dataset rows
  }
  EXPECT_EQ(step_records, 12);
  EXPECT_EQ(short_batches, 2);
  EXPECT_TRUE(fs::exists(a.out() / "lora.safetensors"));
  // Seeded per row: the same seed gives the same bytes, another seed other ones.
  b.train(nullptr, true);
  c.train(nullptr, true);
  EXPECT_EQ(read_file(a.out() / "lora.safetensors"), read_file(b.out() / "lora.safetensors"));
  EXPECT_NE(read_file(a.out() / "lora.safetensors"), read_file(c.out() / "lora.safetensors"));
}

TEST(LearnerLoop, AutoMicroBatchRebalancesAccumulation) {
  Toml t;
  t.steps = 2;
  t.micro = "\"auto\"";
  t.train = "gradient_accumulation = 4\nmemory_budget_mb = 1000000\n";
  TrialRun run(run_toml(t));
  const auto r = run.train();
  EXPECT_EQ(r.steps, 2);
  const auto prov = nlohmann::json::parse(read_file(run.out() / "provenance.json"));
  // A huge budget: the whole effective batch fits in one micro batch.
  EXPECT_EQ(prov.at("extra").at("learner").at("micro_batch_size"), 4) << prov.dump();
  EXPECT_EQ(prov.at("extra").at("learner").at("gradient_accumulation"), 1) << prov.dump();
}

}  // namespace
}  // namespace yeto::learner
