// `yeto-host init-model --family flux --preset tiny` end to end: the repository it writes is
// complete (inspect finds every component implemented), deterministic per seed, loads as a
// pipeline whose generated tokenizers and encoders run (`cache` encodes an image and a
// prompt with it), and the command refuses what it should.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
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

}  // namespace
}  // namespace yeto::initmodel
