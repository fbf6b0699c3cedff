// The pixart plugin through yeto-host, as a user runs it: trusted loading, the parity cases
// (transformer and both PixArt scheduler configurations), the recorded end-to-end PixArt-Alpha run
// on the unchanged pixart-tiny repository, the PNG written by `sample` against that run, and
// init-model -> train -> export -> sample on a preset repository.
#include <gtest/gtest.h>

#include <stb_image.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "../learner/dataset.hpp"
#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/fp8_run.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepos = fs::path(YETO_TEST_FIXTURES) / "repos";
const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";
using yeto::test::read_text;

// The check-parity cases (null after a failed run, which the run has already reported).
nlohmann::json parity_json(const std::vector<fs::path>& cases) {
  nlohmann::json out;
  yeto::test::run_check_parity(cases, &out);
  return out;
}

void print_comparisons(const nlohmann::json& c) {
  for (const auto& cmp : c.at("comparisons"))
    std::printf("  %-26s %-48s max abs %.3g (atol %.3g)\n", c.at("case").get<std::string>().c_str(),
                cmp.at("name").get<std::string>().c_str(), cmp.value("max_abs", 0.0), cmp.value("atol", 0.0));
}


}  // namespace

TEST(PixArtHost, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json manifest;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("pixart", &manifest));
  EXPECT_EQ(manifest.at("aliases"), nlohmann::json({"pixart-alpha", "pixart-sigma"})) << manifest.dump();
}

TEST(PixArtHost, ExampleRunConfigIsValid) {
  const auto r = yeto::test::run_host(
      {"config", "--check", "--config", (fs::path(YETO_SOURCE_DIR) / "configs" / "pixart.toml").string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
}

TEST(PixArtHost, CheckParityTransformerAndSchedulerCases) {
  // The `model` kind builds PixArtTransformer2DModel through the plugin's registered constructor
  // (forward, loss, six named gradients); the scheduler cases are the DDPM training view and the
  // DPM-Solver++ sampling view of the PixArt scheduler config.
  const auto cases = parity_json({kParity / "pixart-transformer", kParity / "scheduler-ddpm-pixart",
                                  kParity / "scheduler-dpmsolver-pixart"});
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    print_comparisons(c);
    for (const auto& cmp : c.at("comparisons")) EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
  }
  EXPECT_EQ(cases[0].at("kind"), "model");
  EXPECT_EQ(cases[0].at("comparisons").size(), 8u);  // sample, loss, 6 gradients
  EXPECT_GE(cases[1].at("comparisons").size(), 3u);
  EXPECT_GE(cases[2].at("comparisons").size(), 3u);
}

TEST(PixArtHost, CheckParityReproducesTheRecordedPipelineRun) {
  // Tokens and masks, masked T5 embeddings, the guidance batch, every DPM-Solver++ step (learned-
  // sigma split after guidance on all 8 channels), the decoded image: all recorded outputs.
  const auto cases = parity_json({kRepos / "pixart-tiny-reference"});
  ASSERT_EQ(cases.size(), 1u);
  const auto& c = cases[0];
  EXPECT_EQ(c.at("kind"), "pipeline_end_to_end");
  EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
  const auto case_json = nlohmann::json::parse(read_text(kRepos / "pixart-tiny-reference" / "case.json"));
  EXPECT_EQ(c.at("comparisons").size(), case_json.at("compare").size());
  print_comparisons(c);
  for (const auto& cmp : c.at("comparisons")) EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
}

TEST(PixArtHost, LegacyTransformer2DModelSnapshotReproducesTheSameRun) {
  // PixArt-XL-2 snapshots name the transformer class Transformer2DModel with that class's key set;
  // a copy of the tiny repository rewritten that way reproduces the recorded run.
  yeto::test::TempDir tmp;
  fs::copy(kRepos / "pixart-tiny", tmp / "pixart-tiny", fs::copy_options::recursive);
  fs::copy(kRepos / "pixart-tiny-reference", tmp / "pixart-tiny-reference", fs::copy_options::recursive);
  auto index = nlohmann::json::parse(read_text(tmp / "pixart-tiny/model_index.json"));
  index["transformer"] = {"diffusers", "Transformer2DModel"};
  tmp.write("pixart-tiny/model_index.json", index.dump(2));
  auto cfg = nlohmann::json::parse(read_text(tmp / "pixart-tiny/transformer/config.json"));
  cfg["_class_name"] = "Transformer2DModel";
  cfg.erase("interpolation_scale");
  cfg.erase("use_additional_conditions");
  cfg.update({{"double_self_attention", false}, {"num_vector_embeds", nullptr}, {"only_cross_attention", false},
              {"use_linear_projection", false}});
  tmp.write("pixart-tiny/transformer/config.json", cfg.dump(2));
  const auto cases = parity_json({tmp / "pixart-tiny-reference"});
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_TRUE(cases[0].at("pass").get<bool>()) << cases[0].dump(1);
  EXPECT_EQ(cases[0].at("comparisons").size(), 49u);
}

TEST(PixArtHost, SampleWritesTheReferenceImage) {
  // `yeto-host sample` with the reference run's settings: the PNG is (image_postprocessed * 255)
  // rounded, within one level where float rounding meets a .5 boundary; the same seed gives the
  // same bytes.
  yeto::test::TempDir tmp;
  auto args = [&](const fs::path& out) {
    return std::vector<std::string>{"sample", "--model", (kRepos / "pixart-tiny").string(), "--diffusion-adapter",
                                    "pixart", "--prompt", "a red circle on a white background", "--seed", "42",
                                    "--steps", "4", "--guidance", "4.5", "--height", "64", "--width", "64",
                                    "--max-sequence-length", "32", "--output", out.string()};
  };
  const auto a = yeto::test::run_host(args(tmp / "a.png"));
  ASSERT_EQ(a.exit_code, 0) << a.all();
  const auto b = yeto::test::run_host(args(tmp / "b.png"));
  ASSERT_EQ(b.exit_code, 0) << b.all();
  EXPECT_EQ(read_text(tmp / "a.png"), read_text(tmp / "b.png"));

  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load((tmp / "a.png").c_str(), &w, &h, &n, 3);
  ASSERT_NE(px, nullptr);
  ASSERT_EQ(w, 64);
  ASSERT_EQ(h, 64);
  const auto expected = yeto::io::load_safetensors(kRepos / "pixart-tiny-reference" / "expected.safetensors")
                            .at("image_postprocessed")[0];
  const auto want = (expected * 255).round().permute({1, 2, 0}).contiguous().to(at::kInt);
  const auto got = at::from_blob(px, {64, 64, 3}, at::kByte).to(at::kInt);
  const auto diff = (got - want).abs();
  std::printf("  sample vs reference: max |pixel diff| %d, %lld of %d pixels differ\n", diff.max().item<int>(),
              static_cast<long long>((diff > 0).sum().item<std::int64_t>()), 64 * 64 * 3);
  EXPECT_LE(diff.max().item<int>(), 1);
  stbi_image_free(px);
}

// fp8 storage of the frozen base (bf16 compute): the step runs (the inputs take the layers'
// compute dtype, not the uint8 codes' dtype) and every adapter matrix moves.
TEST(PixArtHost, Fp8StorageTrains) {
  yeto::test::TempDir tmp;
  yeto::learner::test::write_dataset(tmp / "data", 8, {}, 32);
  yeto::test::TinyLoraRun config{(fs::path(YETO_TEST_FIXTURES) / "repos" / "pixart-tiny").string(), "pixart"};
  config.validation_rows = 2;
  config.steps = 3;
  config.timestep_sampling = "uniform";
  tmp.write("run.toml", yeto::test::with_fp8_storage(config.toml()));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto [moved, total] = yeto::test::lora_b_moved(tmp / "run" / "lora.safetensors");
  EXPECT_EQ(total, 20);  // auto targets of 2 blocks
  EXPECT_EQ(moved, total);
}

TEST(PixArtHost, InitModelTrainExportSample) {
  yeto::test::TempDir tmp;
  const fs::path model = tmp / "pixart-tiny";
  auto r = yeto::test::run_host(
      {"init-model", "--family", "pixart", "--preset", "tiny", "--seed", "7", "--out", model.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  for (const char* f : {"model_index.json", "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors",
                        "vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
                        "tokenizer/spiece.model", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::exists(model / f)) << f;

  yeto::learner::test::write_dataset(tmp / "data", 24, {}, 32);
  yeto::test::TinyLoraRun config{model.string(), "pixart"};
  config.validation_rows = 6;
  config.steps = 40;
  config.timestep_sampling = "uniform";
  tmp.write("run.toml", config.toml());
  const fs::path run = tmp / "run";
  r = yeto::test::train(tmp / "run.toml", run);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(run, 40, "pixart-tiny (preset)", 0.9, r.all()));
  EXPECT_TRUE(fs::exists(run / "lora.safetensors"));

  r = yeto::test::export_adapter(run, tmp / "adapter");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto record = nlohmann::json::parse(read_text(tmp / "adapter" / "yeto_diffusion_adapter.json"));
  EXPECT_EQ(record.at("plugin").at("name"), "pixart");
  EXPECT_EQ(record.at("base_model").at("class_name"), "PixArtTransformer2DModel");
  EXPECT_EQ(record.at("trainable_modules").size(), 20u);  // auto targets of 2 blocks
  EXPECT_TRUE(fs::exists(tmp / "adapter" / "pytorch_lora_weights.safetensors"));
  const auto peft = nlohmann::json::parse(read_text(tmp / "adapter" / "adapter_config.json"));
  EXPECT_EQ(peft.at("auto_mapping").at("parent_library"), "diffusers.models.transformers.pixart_transformer_2d");

  auto sample = [&](const fs::path& out, bool adapter) {
    std::vector<std::string> a = {"sample", "--model", model.string(), "--diffusion-adapter", "pixart",
                                  "--prompt", "a green checkerboard", "--seed", "3", "--steps", "4", "--guidance",
                                  "4.5", "--height", "32", "--width", "32", "--max-sequence-length", "16",
                                  "--output", out.string()};
    if (adapter) a.insert(a.end(), {"--adapter-dir", (tmp / "adapter").string()});
    return yeto::test::run_host(a);
  };
  for (const char* f : {"x.png", "y.png"}) {
    r = sample(tmp / f, true);
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }
  r = sample(tmp / "base.png", false);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto x = read_text(tmp / "x.png");
  EXPECT_GT(x.size(), 8u);
  EXPECT_EQ(x.substr(1, 3), "PNG");
  EXPECT_EQ(x, read_text(tmp / "y.png"));
  EXPECT_NE(x, read_text(tmp / "base.png")) << "the trained adapter should change the picture";

  // The cache keeps the T5 padding mask next to the embeddings, and training from it runs.
  std::string cached = read_text(tmp / "run.toml");
  r = yeto::test::run_host({"cache", "--config", (tmp / "run.toml").string(), "--output", (tmp / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto manifest = read_text(tmp / "cache" / "manifest.jsonl");
  EXPECT_NE(manifest.find("\"prompt_attention_mask\""), std::string::npos) << manifest.substr(0, 400);
  cached.replace(cached.find("data/train.jsonl"), 16, "cache");
  cached.replace(cached.find("max_steps = 40"), 14, "max_steps = 3");
  tmp.write("cached.toml", cached);
  r = yeto::test::train(tmp / "cached.toml", tmp / "run-cached");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(yeto::test::metric_series(tmp / "run-cached", "loss").size(), 3u);
}
