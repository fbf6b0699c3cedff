// `yeto-host train` end to end with the tiny Flux repository (tests/fixtures/repos/flux-tiny)
// on a generated captioned image dataset: val_loss drops, two runs give identical LoRA bytes,
// a graceful stop (save_quit, SIGTERM) and a kill -9 after a checkpoint both resume to the
// same bytes and loss curve as an uninterrupted run, and bad rows are reported by row number.
// The plugin is chosen from the repository (and a re-signed copy is not), and a
// transformer-only repository trains on precomputed latents.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "dataset.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

extern char** environ;

namespace yeto::learner {
namespace {

namespace fs = std::filesystem;
using yeto::test::TempDir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string flux_toml(int steps, const std::string& data_extra = "") {
  const fs::path repo = fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny";
  return "[run]\nthreads = 1\n"
         "[model]\nid = \"" + repo.string() + "\"\nadapter = \"flux\"\nprecision = \"fp32\"\n"
         "[data]\npath = \"data/train.jsonl\"\nheight = 32\nwidth = 32\nworkers = 1\n" + data_extra +
         "[validation]\nsplit = 0.25\nmax_rows = 8\n"
         "[lora]\nr = 4\nalpha = 4.0\n"
         "[train]\nmax_steps = " + std::to_string(steps) +
         "\nmicro_batch_size = 3\ncheckpoint_every = 3\n"
         "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\nwarmup_steps = 1\n"
         "[diffusion]\nseed = 5\ntimestep_sampling = \"logit-normal\"\n"
         "[log]\ntensorboard = true\n";
}

struct TrialRun {
  TempDir dir;
  explicit TrialRun(const std::string& toml, int rows = 16, const std::map<int, std::string>& bad = {}) {
    test::write_dataset(dir / "data", rows, bad, 32);
    dir.write("run.toml", toml);
  }
  fs::path out() const { return dir / "run"; }
  std::vector<std::string> args() const {
    return {"train", "--config", (dir / "run.toml").string(), "--output", out().string()};
  }
  yeto::test::ProcessResult train() const { return yeto::test::run_host(args()); }
};

std::map<std::int64_t, double> series(const fs::path& run_dir, const std::string& field) {
  std::map<std::int64_t, double> out;
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(field)) out[j.at("step").get<std::int64_t>()] = j.at(field).get<double>();
  }
  return out;
}

// Starts yeto-host in the background; the caller signals and reaps it.
pid_t spawn_host(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {YETO_HOST_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, c[0], &fa, nullptr, c.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (without a deadline of its own: ctest's timeout bounds the test) until `file` exists
// or the process ended.
bool wait_for_file(pid_t pid, const fs::path& file) {
  for (;;) {
    if (fs::exists(file)) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return fs::exists(file);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(LearnerTrainFlux, ValLossDropsClearly) {
  TrialRun run(flux_toml(40));
  const auto r = run.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto val = series(run.out(), "val_loss");
  ASSERT_TRUE(val.count(0) && val.count(40)) << r.all();
  std::cout << "flux-tiny val_loss " << val.at(0) << " -> " << val.at(40) << "\n";
  EXPECT_LT(val.at(40), 0.9 * val.at(0)) << r.all();
  EXPECT_EQ(series(run.out(), "loss").size(), 40u);
  EXPECT_TRUE(fs::exists(run.out() / "lora.safetensors"));
  EXPECT_TRUE(fs::exists(run.out() / "provenance.json"));
  EXPECT_TRUE(contains(read_file(run.out() / "lora.safetensors").substr(0, 4096), "lora_A.weight"));
  // The run report, written at the end and named on stdout.
  const fs::path index = run.out() / "report" / "index.html";
  EXPECT_TRUE(contains(r.out, "report: " + index.string())) << r.out;
  ASSERT_TRUE(fs::exists(index));
  EXPECT_TRUE(contains(read_file(index), "<td data-key=\"final_step\">40</td>"));
  EXPECT_TRUE(fs::exists(run.out() / "report" / "loss.png"));
}

// validation.prompts are rendered at the start, every validation.sample_every steps and on the
// final weights, into RUN_DIR/samples/ (index.jsonl names each PNG) and TensorBoard images; the
// renders do not change what is trained (same adapter bytes as a run without them).
TEST(LearnerTrainFlux, ValidationRendersAreWrittenAndDoNotChangeTraining) {
  std::string with = flux_toml(6);
  const std::string keys = "max_rows = 8\n";
  with.replace(with.find(keys), keys.size(),
               keys + "prompts = [\"a red square\", \"a blue circle\"]\nsample_every = 3\nsample_steps = 2\n"
                      "sample_seed = 11\nsample_height = 32\nsample_width = 32\n");
  // Training and the renders encode prompts at 16 T5 tokens (the family's default is 512).
  const std::string model_keys = "precision = \"fp32\"\n", length = "max_sequence_length = 16\n";
  std::string without = flux_toml(6);
  with.insert(with.find(model_keys) + model_keys.size(), length);
  without.insert(without.find(model_keys) + model_keys.size(), length);
  TrialRun rendered(with), plain(without);
  const auto r = rendered.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_EQ(plain.train().exit_code, 0);
  EXPECT_EQ(read_file(rendered.out() / "lora.safetensors"), read_file(plain.out() / "lora.safetensors"))
      << "rendering changed the training";
  EXPECT_FALSE(fs::exists(plain.out() / "samples"));
  std::vector<nlohmann::json> index;
  std::istringstream in(read_file(rendered.out() / "samples" / "index.jsonl"));
  for (std::string line; std::getline(in, line);) index.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(index.size(), 6u) << r.all();  // 2 prompts x (step 0, step 3, final)
  std::vector<std::string> dirs;
  for (const auto& rec : index) {
    const fs::path png = rendered.out() / rec.at("path").get<std::string>();
    ASSERT_TRUE(fs::exists(png)) << rec.dump();
    EXPECT_EQ(rec.at("width"), 32);
    EXPECT_EQ(rec.at("height"), 32);
    EXPECT_EQ(rec.at("seed"), 11 + rec.at("prompt_index").get<int>());
    EXPECT_EQ(read_file(png).substr(1, 3), "PNG");
    dirs.push_back(png.parent_path().filename().string());
  }
  EXPECT_EQ(dirs, (std::vector<std::string>{"step-00000000", "step-00000000", "step-00000003", "step-00000003",
                                            "final", "final"}));
  EXPECT_EQ(index[4].at("step"), 6);
  EXPECT_TRUE(index[4].at("final").get<bool>());
  // The same seed renders the same picture; training moved the weights, so the final render of
  // a prompt differs from its render before training.
  EXPECT_NE(read_file(rendered.out() / "samples/step-00000000/p0.png"), read_file(rendered.out() / "samples/final/p0.png"));
  std::string events;
  for (const auto& e : fs::directory_iterator(rendered.out() / "tensorboard")) events += read_file(e.path());
  EXPECT_TRUE(contains(events, "samples/p0") && contains(events, "samples/p1")) << "no TensorBoard image summaries";
  EXPECT_TRUE(contains(events, "\x89PNG"));
  EXPECT_TRUE(contains(r.all(), "validation renders of the final weights")) << r.all();

  // The final render is what `sample` draws from the run's adapter with the run's text length
  // (up to the rounding of folding the adapter into the weights); at the family's default length
  // the picture is another one.
  auto sampled = [&](const std::string& tokens) {
    const fs::path png = rendered.dir / ("sample-" + tokens + ".png");
    const auto s = yeto::test::run_host(
        {"sample", "--model", (fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny").string(), "--diffusion-adapter", "flux",
         "--adapter-dir", (rendered.out() / "lora.safetensors").string(), "--prompt", "a red square", "--seed", "11",
         "--steps", "2", "--guidance", "3.5", "--height", "32", "--width", "32", "--max-sequence-length", tokens,
         "--output", png.string()});
    EXPECT_EQ(s.exit_code, 0) << s.all();
    return png;
  };
  auto rgb = [](const fs::path& png) {
    return yeto::test::run_process({"ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-i", png.string(), "-f",
                                    "rawvideo", "-pix_fmt", "rgb24", "-"})
        .out;
  };
  auto mean_abs = [](const std::string& a, const std::string& b) {
    if (a.size() != b.size() || a.empty()) return 255.0;
    double sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      sum += std::abs(static_cast<int>(static_cast<unsigned char>(a[i])) - static_cast<unsigned char>(b[i]));
    return sum / static_cast<double>(a.size());
  };
  const std::string render = rgb(rendered.out() / "samples/final/p0.png");
  ASSERT_EQ(render.size(), 32u * 32 * 3);
  const double same_length = mean_abs(render, rgb(sampled("16"))), default_length = mean_abs(render, rgb(sampled("512")));
  std::cout << "final render vs sample: " << same_length << " at 16 tokens, " << default_length << " at 512 (mean |diff|)\n";
  EXPECT_LT(same_length, 0.5);  // measured 0 (the same bytes)
  EXPECT_GT(default_length, 1.0);  // measured 2.2
}

TEST(LearnerTrainFlux, DeterministicAndResumableBitExactly) {
  TrialRun a(flux_toml(9)), b(flux_toml(9)), quit(flux_toml(9)), term(flux_toml(9)), kill(flux_toml(9));
  auto r = a.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = b.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto want = read_file(a.out() / "lora.safetensors");
  EXPECT_EQ(want, read_file(b.out() / "lora.safetensors")) << "two runs with the same seed differ";

  // save_quit dropped once checkpoint 3 exists: the run stops at the next step boundary.
  pid_t pid = spawn_host(quit.args());
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_file(pid, quit.out() / "checkpoints/step-00000003/state.json"));
  atomic_write(quit.out() / "save_quit", "");
  EXPECT_EQ(wait_exit(pid), 0);
  // SIGTERM once checkpoint 3 exists.
  pid = spawn_host(term.args());
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_file(pid, term.out() / "checkpoints/step-00000003/state.json"));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  // kill -9 once checkpoint 3 exists (wherever the run is then).
  pid = spawn_host(kill.args());
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_file(pid, kill.out() / "checkpoints/step-00000003/state.json"));
  ::kill(pid, SIGKILL);
  wait_exit(pid);

  for (const TrialRun* run : {&quit, &term, &kill}) {
    r = run->train();
    ASSERT_EQ(r.exit_code, 0) << r.all();
    EXPECT_EQ(want, read_file(run->out() / "lora.safetensors")) << run->out();
    EXPECT_EQ(series(a.out(), "loss"), series(run->out(), "loss")) << run->out();
    EXPECT_EQ(series(a.out(), "val_loss"), series(run->out(), "val_loss")) << run->out();
  }
}

// Flips the lowest byte of the first tensor in a safetensors file: still a valid file, other
// weights.
void change_first_weight(const fs::path& file) {
  std::string bytes = read_file(file);
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  bytes[8 + header] = static_cast<char>(bytes[8 + header] ^ 0x01);
  atomic_write(file, bytes);
}

// A cache dataset made by `yeto-host cache` trains; one made with other component weights or
// another preprocessing profile is refused before the first step, naming the field.
TEST(LearnerTrainFlux, TrainsFromAMatchingCacheAndRefusesAMismatchedOne) {
  TempDir dir;
  const fs::path repo = dir / "repo";
  fs::copy(fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny", repo, fs::copy_options::recursive);
  test::write_dataset(dir / "data", 8, {}, 32);
  auto toml = [&](const std::string& data, int height) {
    return "[run]\nthreads = 1\n[model]\nid = \"" + repo.string() + "\"\nadapter = \"flux\"\nprecision = \"fp32\"\n"
           "[data]\npath = \"" + data + "\"\nheight = " + std::to_string(height) + "\nwidth = 32\nworkers = 1\n"
           "[validation]\nsplit = 0.25\n[lora]\nr = 4\nalpha = 4.0\n"
           "[train]\nmax_steps = 2\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
           "[diffusion]\nseed = 5\n";
  };
  dir.write("cache.toml", toml("data/train.jsonl", 32));
  auto r = yeto::test::run_host({"cache", "--config", (dir / "cache.toml").string(), "--output", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_TRUE(fs::exists(dir / "cache/yeto_diffusion_cache.json"));

  dir.write("train.toml", toml("cache", 32));
  auto train = [&](const std::string& config, const std::string& out) {
    return yeto::test::run_host({"train", "--config", (dir / config).string(), "--output", (dir / out).string()});
  };
  r = train("train.toml", "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "matches the model")) << r.all();
  EXPECT_EQ(series(dir / "run", "loss").size(), 2u);
  EXPECT_TRUE(series(dir / "run", "val_loss").count(2)) << "held-out cached rows are scored";

  // Another preprocessing profile: data.height 64 against a cache made at 32.
  dir.write("tall.toml", toml("cache", 64));
  r = train("tall.toml", "run-tall");
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_TRUE(contains(r.all(), "preprocessing.height")) << r.all();
  EXPECT_TRUE(contains(r.all(), "data.path")) << r.all();
  EXPECT_FALSE(fs::exists(dir / "run-tall/metrics.jsonl"));

  // Other VAE weights than the cache was encoded with.
  change_first_weight(repo / "vae/diffusion_pytorch_model.safetensors");
  r = train("train.toml", "run-vae");
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_TRUE(contains(r.all(), "components.vae")) << r.all();
  EXPECT_FALSE(contains(r.all(), "components.transformer")) << r.all();
  EXPECT_FALSE(fs::exists(dir / "run-vae/metrics.jsonl"));
}

// flux_toml without naming the plugin.
std::string unnamed(std::string toml) {
  const std::string line = "adapter = \"flux\"\n";
  toml.erase(toml.find(line), line.size());
  return toml;
}

std::string with_model(std::string toml, const fs::path& repo) {
  const std::string from = (fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny").string();
  toml.replace(toml.find(from), from.size(), repo.string());
  return toml;
}

TEST(LearnerTrainFlux, ChoosesTheShippedPluginFromTheRepository) {
  // The Diffusers fixture: model_index.json names FluxPipeline, which the flux plugin declares.
  TrialRun fixture(unnamed(flux_toml(2)), 8);
  auto r = fixture.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugin flux serves")) << r.all();
  EXPECT_TRUE(contains(r.all(), "FluxPipeline (model_index.json _class_name)")) << r.all();
  EXPECT_EQ(series(fixture.out(), "loss").size(), 2u);

  // What init-model writes trains the same way.
  TrialRun init(unnamed(flux_toml(2)), 8);
  r = yeto::test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--seed", "3", "--out",
                            (init.dir / "model").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  // Named relative to the run file, as users write it.
  init.dir.write("run.toml", with_model(unnamed(flux_toml(2)), "model"));
  r = init.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugin flux serves")) << r.all();
  EXPECT_EQ(series(init.out(), "loss").size(), 2u);

  // The run directory is self-contained: its recorded config.toml locates the model and data
  // absolutely, so export works from any working directory with nothing but --checkpoint.
  const auto recorded = read_file(init.out() / "config.toml");
  EXPECT_TRUE(contains(recorded, "id = \"" + (init.dir / "model").lexically_normal().string() + "\"")) << recorded;
  fs::create_directories(init.dir / "elsewhere");
  r = yeto::test::run_host({"export", "--checkpoint", init.out().string(), "--output-dir", (init.dir / "adapter").string()},
                           (init.dir / "elsewhere").string());
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(fs::exists(init.dir / "adapter/adapter_model.safetensors"));
}

TEST(LearnerTrainFlux, AReSignedCopyIsNotChosenImplicitly) {
  TempDir dir;
  const fs::path stage = fs::path(YETO_BUILD_DIR) / "stage/plugins";
  fs::create_directories(dir / "plugins");
  for (const char* f : {"flux.so", "flux.yeto.json", "flux.yeto.sig"}) fs::copy_file(stage / f, dir / "plugins" / f);
  const std::string sign_bin = (fs::path(YETO_BUILD_DIR) / "bin/yeto-sign").string();
  auto r = yeto::test::run_process({sign_bin, "keygen", "--out", (dir / "other").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::run_process({sign_bin, "sign", "--key", (dir / "other.secret").string(), "--manifest",
                               (dir / "plugins/flux.yeto.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::string plugins = "[plugins]\ndirs = [\"" + (dir / "plugins").string() + "\"]\ntrusted_keys = [\"" +
                              (dir / "other.public").string() + "\"]\n";
  TrialRun run(unnamed(flux_toml(1)) + plugins, 8);
  r = run.train();
  EXPECT_EQ(r.exit_code, 28) << r.all();
  EXPECT_TRUE(contains(r.all(), "'flux' (signed by ed25519:")) << r.all();
  EXPECT_TRUE(contains(r.all(), "--diffusion-adapter")) << r.all();
  EXPECT_FALSE(fs::exists(run.out() / "metrics.jsonl"));
  // Named, the trusted copy is used.
  auto args = run.args();
  args.insert(args.end(), {"--diffusion-adapter", "flux"});
  r = yeto::test::run_host(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(series(run.out(), "loss").size(), 1u);
}

TEST(LearnerTrainFlux, ATransformerOnlyRepositoryTrainsOnCachedLatents) {
  TempDir dir;
  const fs::path full = fs::path(YETO_TEST_FIXTURES) / "repos/flux-tiny";
  test::write_dataset(dir / "data", 8, {}, 32);
  std::string toml = unnamed(flux_toml(2));
  dir.write("cache.toml", toml);
  auto r = yeto::test::run_host({"cache", "--config", (dir / "cache.toml").string(), "--output", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();

  // Latents and text embeddings computed elsewhere: the cache's rows and shards, no contract.
  fs::copy(dir / "cache", dir / "precomputed", fs::copy_options::recursive);
  fs::remove(dir / "precomputed/yeto_diffusion_cache.json");
  // The transformer and scheduler only; every encoder is [null, null].
  const fs::path tonly = dir / "transformer-only";
  fs::create_directories(tonly);
  for (const char* c : {"transformer", "scheduler"}) fs::copy(full / c, tonly / c, fs::copy_options::recursive);
  auto index = nlohmann::json::parse(read_file(full / "model_index.json"));
  for (const char* c : {"vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"})
    index[c] = nlohmann::json::array({nullptr, nullptr});
  dir.write("transformer-only/model_index.json", index.dump(2));

  auto swap_data = [](std::string t, const std::string& path) {
    const std::string from = "path = \"data/train.jsonl\"";
    t.replace(t.find(from), from.size(), "path = \"" + path + "\"");
    return t;
  };
  dir.write("train.toml", swap_data(with_model(toml, tonly), "precomputed/manifest.jsonl"));
  r = yeto::test::run_host({"train", "--config", (dir / "train.toml").string(), "--output", (dir / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(series(dir / "run", "loss").size(), 2u);

  // Raw images need the VAE: refused, naming it.
  dir.write("raw.toml", with_model(toml, tonly));
  r = yeto::test::run_host({"train", "--config", (dir / "raw.toml").string(), "--output", (dir / "raw").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "lists 'vae' as null")) << r.all();
  EXPECT_TRUE(contains(r.all(), "cached latents")) << r.all();

  // The denoiser itself cannot be null.
  index["transformer"] = nlohmann::json::array({nullptr, nullptr});
  dir.write("transformer-only/model_index.json", index.dump(2));
  r = yeto::test::run_host({"train", "--config", (dir / "train.toml").string(), "--output", (dir / "none").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "'transformer' is null, but every flux run needs it")) << r.all();
}

TEST(LearnerTrainFlux, BadRowsAreReportedWithRowNumbers) {
  const std::map<int, std::string> bad = {{2, "missing"}, {6, "corrupt"}};
  TrialRun strict(flux_toml(2), 16, bad);
  auto r = strict.train();
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_TRUE(contains(r.all(), "line 2") || contains(r.all(), "line 6")) << r.all();

  TrialRun lenient(flux_toml(4, "on_bad_row = \"skip\"\n"), 16, bad);
  r = lenient.train();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "skipped 2 bad row(s)")) << r.all();
  EXPECT_TRUE(contains(r.all(), "train.jsonl line 2")) << r.all();
  EXPECT_TRUE(contains(r.all(), "train.jsonl line 6")) << r.all();
}

}  // namespace
}  // namespace yeto::learner
