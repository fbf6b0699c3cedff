// `yeto-host init-model --family flux --preset tiny` end to end: the repository it writes is
// complete (inspect finds every component implemented), deterministic per seed, loads as a
// pipeline whose generated tokenizers and encoders run (`cache` encodes an image and a
// prompt with it), and the command refuses what it should.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace yeto::initmodel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;
using ::testing::HasSubstr;

// One run of init-model, shared by the tests below (building a preset takes a few seconds).
class InitModelFlux : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    result_ = new test::ProcessResult(
        test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--out", (dir_->path() / "m").string(), "--seed", "7"}));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete dir_;
  }
  static fs::path model() { return dir_->path() / "m"; }
  static TempDir* dir_;
  static test::ProcessResult* result_;
};
TempDir* InitModelFlux::dir_ = nullptr;
test::ProcessResult* InitModelFlux::result_ = nullptr;

TEST_F(InitModelFlux, WritesACompleteDiffusersRepository) {
  ASSERT_EQ(result_->exit_code, 0) << result_->all();
  for (const char* f : {"model_index.json", "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors",
                        "vae/config.json", "vae/diffusion_pytorch_model.safetensors", "text_encoder/config.json",
                        "text_encoder/model.safetensors", "text_encoder_2/model.safetensors", "tokenizer/vocab.json",
                        "tokenizer/merges.txt", "tokenizer_2/spiece.model", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::is_regular_file(model() / f)) << f;
  const auto r = test::run_host({"inspect", model().string(), "--diffusion-adapter", "flux", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json j = json::parse(r.out.substr(r.out.find('{')));
  std::set<std::string> seen;
  for (const auto& c : j["components"]) {
    seen.insert(c["name"].get<std::string>());
    EXPECT_TRUE(c["registered"].get<bool>()) << c.dump();  // host classes and the plugin's own
    EXPECT_EQ(c["validation"], "ok") << c.dump();
  }
  EXPECT_EQ(seen, (std::set<std::string>{"scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer", "vae"}));
}

TEST_F(InitModelFlux, TheSameSeedGivesTheSameWeights) {
  ASSERT_EQ(result_->exit_code, 0) << result_->all();
  const fs::path again = dir_->path() / "again", other = dir_->path() / "other";
  ASSERT_EQ(test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--out", again.string(), "--seed", "7"}).exit_code, 0);
  ASSERT_EQ(test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--out", other.string(), "--seed", "8"}).exit_code, 0);
  for (const char* f : {"transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
                        "text_encoder/model.safetensors", "text_encoder_2/model.safetensors", "tokenizer_2/spiece.model"})
    EXPECT_EQ(read_file(again / f), read_file(model() / f)) << f;
  EXPECT_NE(read_file(other / "transformer/diffusion_pytorch_model.safetensors"),
            read_file(model() / "transformer/diffusion_pytorch_model.safetensors"));
}

TEST_F(InitModelFlux, ThePipelineOpensAndItsTokenizersAndEncodersRun) {
  ASSERT_EQ(result_->exit_code, 0) << result_->all();
  TempDir t;
  // A 16x16 grey PNG from the ffmpeg CLI the data tests already rely on.
  ASSERT_EQ(test::run_process({"ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                               "color=c=gray:s=16x16", "-frames:v", "1", (t / "a.png").string()})
                .exit_code,
            0);
  std::ofstream(t / "train.jsonl") << "{\"image\": \"a.png\", \"prompt\": \"a photo of a cat\"}\n";
  const auto r = test::run_host({"cache", "--model", model().string(), "--diffusion-adapter", "flux", "--data", (t / "train.jsonl").string(), "--height", "16",
                                 "--width", "16", "--set", "run.device=cpu", "--output", (t / "cache").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json contract = json::parse(read_file(t / "cache/yeto_diffusion_cache.json"));
  EXPECT_EQ(contract["rows"], 1);
  EXPECT_EQ(contract["tensors"]["latents"]["shape"], json({16, 2, 2}));  // VAE scale factor 8, 16 channels
  EXPECT_TRUE(contract["tensors"].contains("prompt_embeds"));
  EXPECT_TRUE(contract["tensors"].contains("pooled_prompt_embeds"));
  EXPECT_EQ(contract["components"].size(), 7u);
}

TEST_F(InitModelFlux, RefusesUnknownPresetsAndNonEmptyOutput) {
  ASSERT_EQ(result_->exit_code, 0) << result_->all();
  auto r = test::run_host({"init-model", "--family", "flux", "--preset", "tinny", "--out", (dir_->path() / "x").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("no preset 'tinny'"));
  EXPECT_THAT(r.all(), HasSubstr("did you mean 'tiny'"));
  EXPECT_THAT(r.all(), HasSubstr("\n  mid: "));
  EXPECT_FALSE(fs::exists(dir_->path() / "x"));
  r = test::run_host({"init-model", "--family", "flax", "--preset", "tiny", "--out", (dir_->path() / "x").string()});
  EXPECT_EQ(r.exit_code, 28) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("no plugin serves family 'flax'"));

  r = test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--out", model().string()});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("is not empty"));
  const fs::path forced = dir_->path() / "forced";
  fs::create_directories(forced / "stale");
  r = test::run_host({"init-model", "--family", "flux", "--preset", "tiny", "--out", forced.string(), "--force"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_FALSE(fs::exists(forced / "stale"));
  EXPECT_TRUE(fs::is_regular_file(forced / "model_index.json"));
}

// The `demo` preset and what `make demo` builds on it, at a few steps each: init-model writes the
// pixel-codec VAE; a full fine-tune exports as yeto_full_weights.safetensors and `merge` turns it
// into a model whose transformer holds exactly the trained tensors; a LoRA trained on that model
// samples with `--compare-base --grid` (base and adapted images, the labelled grid).
class InitModelDemo : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    init_ = new test::ProcessResult(test::run_host(
        {"init-model", "--family", "flux", "--preset", "demo", "--out", (dir_->path() / "flux-demo").string(), "--seed", "7"}));
    data_ = new test::ProcessResult(
        test::run_process({"bash", (root() / "scripts/demo_data.sh").string(), (dir_->path() / "data").string()}));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete init_;
    delete dir_;
  }
  static fs::path root() { return YETO_SOURCE_DIR; }
  static fs::path dir() { return dir_->path(); }
  // `train` with one of the demo's configs, its paths pointed into this test's directory.
  static test::ProcessResult train(const std::string& config, const fs::path& model, const std::string& rows,
                                   const fs::path& run, int steps) {
    return test::run_host({"train", "--config", (root() / "configs" / config).string(), "--set", "model.id=" + model.string(),
                           "--set", "data.path=" + (dir() / "data" / rows).string(), "--set",
                           "validation.data=" + (dir() / "data/val.jsonl").string(), "--set", "validation.prompts=[]",
                           "--set", "train.max_steps=" + std::to_string(steps), "--set", "run.output=" + run.string()});
  }
  static TempDir* dir_;
  static test::ProcessResult* init_;
  static test::ProcessResult* data_;
};
TempDir* InitModelDemo::dir_ = nullptr;
test::ProcessResult* InitModelDemo::init_ = nullptr;
test::ProcessResult* InitModelDemo::data_ = nullptr;

TEST_F(InitModelDemo, AFullFineTuneMergesIntoAModelTheLoraStageTrainsAndSamplesSideBySide) {
  ASSERT_EQ(init_->exit_code, 0) << init_->all();
  ASSERT_EQ(data_->exit_code, 0) << data_->all();
  EXPECT_THAT(init_->all(), HasSubstr("vae: analytic pixel-codec weights"));
  const json vae = json::parse(read_file(dir() / "flux-demo/vae/config.json"));
  EXPECT_EQ(vae["norm_num_groups"], 1);
  EXPECT_EQ(vae["latent_channels"], 3);

  // The base's short full fine-tune (configs/demo-base.toml), exported and merged.
  auto r = train("demo-base.toml", dir() / "flux-demo", "base.jsonl", dir() / "base-run", 4);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = test::run_host({"export", "--checkpoint", (dir() / "base-run").string(), "--output-dir", (dir() / "base-export").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("fully trained tensors of transformer"));
  EXPECT_TRUE(fs::is_regular_file(dir() / "base-export/yeto_full_weights.safetensors"));
  r = test::run_host({"merge", "--model", (dir() / "flux-demo").string(), "--adapter-dir", (dir() / "base-export").string(),
                      "--output-dir", (dir() / "flux-base").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("transformer: 112 fully trained tensors written"));
  // The merged transformer is the checkpoint's tensors under the transformer's own names (and
  // differs from the random one); every other component is the base's, file for file.
  r = test::run_host({"inspect", (dir() / "flux-base").string(), "--diffusion-adapter", "flux"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(read_file(dir() / "flux-base/transformer/diffusion_pytorch_model.safetensors"),
            read_file(dir() / "flux-demo/transformer/diffusion_pytorch_model.safetensors"));
  for (const char* f : {"vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors", "model_index.json",
                        "transformer/config.json"})
    EXPECT_EQ(read_file(dir() / "flux-base" / f), read_file(dir() / "flux-demo" / f)) << f;
  // Merging it into another base is refused (the record names the base's content).
  r = test::run_host({"init-model", "--family", "flux", "--preset", "demo", "--out", (dir() / "other").string(), "--seed", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = test::run_host({"merge", "--model", (dir() / "other").string(), "--adapter-dir", (dir() / "base-export").string(),
                      "--output-dir", (dir() / "wrong").string()});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("was trained on another base"));
  EXPECT_FALSE(fs::exists(dir() / "wrong"));

  // The LoRA stage (configs/demo.toml) on the merged base, then sampled side by side.
  // (two islands and a syncer, as the demo runs it: the syncer's final cut is the adapter).
  r = train("demo.toml", dir() / "flux-base", "train.jsonl", dir() / "run", 4);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = test::run_host({"export", "--config", (root() / "configs/demo.toml").string(), "--set",
                      "model.id=" + (dir() / "flux-base").string(), "--checkpoint", (dir() / "run/syncer").string(),
                      "--output-dir", (dir() / "adapter").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::vector<std::string> sample = {"sample", "--model", (dir() / "flux-base").string(), "--diffusion-adapter", "flux",
                                           "--prompts", (dir() / "data/prompts.txt").string(), "--seed", "42", "--steps",
                                           "2", "--height", "64", "--width", "64", "--max-sequence-length", "32",
                                           "--output", (dir() / "s" / "sample.png").string()};
  auto without_adapter = sample;
  without_adapter.push_back("--compare-base");
  r = test::run_host(without_adapter);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("give --adapter-dir DIR"));
  auto with = sample;
  with.insert(with.end(), {"--adapter-dir", (dir() / "adapter").string(), "--compare-base", "--grid",
                          (dir() / "grid.png").string()});
  r = test::run_host(with);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  for (int i = 0; i < 4; ++i)
    for (const std::string stem : {"sample-base-00", "sample-00"})
      EXPECT_TRUE(fs::is_regular_file(dir() / "s" / (stem + std::to_string(i) + ".png"))) << stem << i;
  // The grid: a 240-pixel label column and two 192-pixel cells with 8 pixels around each, a row
  // per prompt under the titles.
  const std::string png = read_file(dir() / "grid.png");
  ASSERT_GT(png.size(), 24u);
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(png[at + i]);
    return v;
  };
  EXPECT_EQ(be32(16), 240u + 2 * (192 + 16));
  EXPECT_GE(be32(20), 4u * (192 + 16));
  EXPECT_LE(be32(20), 4u * (192 + 16) + 120);
}

// scripts/demo_check.sh, the demo's verdict, on images whose answer is known: the dataset's own
// pictures of the prompts (as if generated perfectly) against the same shapes on the backgrounds
// the base knows pass (4 of 4 learned); the same images as "base" fail (nothing learned); one
// picture for every prompt fails (the prompts are not told apart).
TEST_F(InitModelDemo, DemoCheckPassesOnlyWhenTheAdaptedImagesMatchTheirPromptsAndTheBaseDoesNot) {
  ASSERT_EQ(data_->exit_code, 0) << data_->all();
  const fs::path data = dir() / "data";
  std::map<std::string, std::string> image_of;
  for (const char* set : {"base.jsonl", "train.jsonl", "val.jsonl"}) {
    std::ifstream in(data / set);
    for (std::string line; std::getline(in, line);) {
      const json row = json::parse(line);
      image_of[row["prompt"].get<std::string>()] = row["image"].get<std::string>();
    }
  }
  std::vector<std::string> prompts;
  {
    std::ifstream in(data / "prompts.txt");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  ASSERT_EQ(prompts.size(), 4u);
  const fs::path c = dir() / "check";
  fs::create_directories(c);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::string n = "-00" + std::to_string(i) + ".png";
    // The same shape and foreground on the background the base knows (purple -> blue, orange -> black).
    std::string known = prompts[i];
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"purple", "blue"}, {"orange", "black"}})
      if (const auto at = known.find(from); at != std::string::npos) known.replace(at, from.size(), to);
    ASSERT_TRUE(image_of.count(prompts[i]) && image_of.count(known)) << prompts[i] << " / " << known;
    fs::copy_file(data / image_of[prompts[i]], c / ("right" + n));
    fs::copy_file(data / image_of[known], c / ("known" + n));
    fs::copy_file(data / image_of[prompts[0]], c / ("same" + n));
  }
  auto check = [&](const std::string& base, const std::string& adapted) {
    return test::run_process({"bash", (root() / "scripts/demo_check.sh").string(), (data / "prompts.txt").string(),
                              (c / base).string(), (c / adapted).string()});
  };
  auto r = check("known", "right");
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("separation: the adapter learned 4 of 4 prompts"));
  EXPECT_THAT(r.out, HasSubstr("a red square on a purple background"));
  r = check("right", "right");
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_THAT(r.out, HasSubstr("separation: NOT reached"));
  r = check("known", "same");
  EXPECT_EQ(r.exit_code, 1) << r.all();
  r = check("known", "missing");
  EXPECT_NE(r.exit_code, 0) << r.all();
}

}  // namespace
}  // namespace yeto::initmodel
