// The sd35 plugin through yeto-host: signed and verifiable, the parity cases (transformer,
// SD3.5 scheduler, the recorded end-to-end StableDiffusion3Pipeline run) through check-parity,
// the refusal of an unsigned copy, the reference picture through `sample`, and a tiny preset
// from init-model trained by `train` (val_loss drops), exported and sampled reproducibly.
#include <gtest/gtest.h>

#include <stb_image.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "dataset.hpp"
#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/fp8_run.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepos = fs::path(YETO_TEST_FIXTURES) / "repos";
const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";
const char* kPrompt = "a red circle on a white background";

using yeto::test::read_text;

// The reference call of sd35-tiny-reference as a sample command.
std::vector<std::string> sample_args(const fs::path& repo, const fs::path& out) {
  return {"sample",   "--model",  repo.string(), "--diffusion-adapter", "sd35",   "--prompt", kPrompt,
          "--seed",   "42",       "--steps",     "4",                   "--guidance", "5.0",  "--height",
          "64",       "--width",  "64",          "--max-sequence-length", "32",   "--output", out.string()};
}


}  // namespace

TEST(Sd35Host, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json manifest;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("sd35", &manifest));
  EXPECT_EQ(manifest.at("families"), nlohmann::json::array({"sd35"})) << manifest.dump();
}

TEST(Sd35Host, CheckParityPassesEverySd35Case) {
  // The transformer (kind model: forward, loss, gradients), the SD3.5 scheduler and the recorded
  // end-to-end run (kind pipeline_end_to_end), in one yeto-host process.
  nlohmann::json cases;
  ASSERT_NO_FATAL_FAILURE(yeto::test::run_check_parity(
      {kParity / "sd35-transformer", kParity / "scheduler-flow-match-euler-shift3", kRepos / "sd35-tiny-reference"},
      &cases));
  ASSERT_EQ(cases.size(), 3u);
  const std::map<std::string, fs::path> dirs = {{"sd35-transformer", kParity / "sd35-transformer"},
                                                {"scheduler-flow-match-euler-shift3",
                                                 kParity / "scheduler-flow-match-euler-shift3"},
                                                {"sd35-tiny-reference", kRepos / "sd35-tiny-reference"}};
  for (const auto& c : cases) {
    const auto name = c.at("case").get<std::string>();
    ASSERT_TRUE(dirs.count(name)) << name;
    EXPECT_TRUE(c.at("supported").get<bool>()) << c.dump(1);
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    const auto case_json = nlohmann::json::parse(read_text(dirs.at(name) / "case.json"));
    if (name != "scheduler-flow-match-euler-shift3") {  // the scheduler case compares per call
      EXPECT_EQ(c.at("comparisons").size(), case_json.at("compare").size()) << name;
    }
    double worst_ratio = 0.0;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
      const double atol = cmp.at("atol").get<double>(), err = cmp.at("max_abs").get<double>();
      if (atol > 0) worst_ratio = std::max(worst_ratio, err / atol);
      std::printf("  %-34s %-30s max abs %.3g (atol %.3g)\n", name.c_str(), cmp.at("name").get<std::string>().c_str(),
                  err, atol);
    }
    std::printf("  %s: %zu outputs, worst max_abs / atol %.3g\n", name.c_str(), c.at("comparisons").size(),
                worst_ratio);
  }
}

TEST(Sd35Host, UnsignedCopyIsRefused) {
  yeto::test::TempDir tmp;
  yeto::test::expect_unsigned_copy_refused("sd35", sample_args(kRepos / "sd35-tiny", tmp / "out.png"), tmp / "out.png",
                                           tmp);
}

TEST(Sd35Host, SampleWritesTheReferencePictureByteIdentically) {
  yeto::test::TempDir tmp;
  const auto a = yeto::test::run_host(sample_args(kRepos / "sd35-tiny", tmp / "a.png"));
  ASSERT_EQ(a.exit_code, 0) << a.all();
  const auto b = yeto::test::run_host(sample_args(kRepos / "sd35-tiny", tmp / "b.png"));
  ASSERT_EQ(b.exit_code, 0) << b.all();
  EXPECT_EQ(read_text(tmp / "a.png"), read_text(tmp / "b.png"));
  // Every pixel is the recorded image's (x * 255).round(), up to one level where the float32
  // result sits on a rounding boundary.
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load((tmp / "a.png").c_str(), &w, &h, &n, 3);
  ASSERT_NE(px, nullptr);
  ASSERT_EQ(w, 64);
  ASSERT_EQ(h, 64);
  const auto ref = yeto::io::load_safetensors(kRepos / "sd35-tiny-reference" / "expected.safetensors")
                       .at("image_postprocessed")[0];
  const auto want = (ref * 255).round().permute({1, 2, 0}).contiguous().to(at::kInt);
  const auto got = at::from_blob(px, {64, 64, 3}, at::kByte).to(at::kInt);
  const auto diff = (got - want).abs();
  std::printf("  sample vs reference: max level difference %d, %lld of %lld values differ\n",
              diff.max().item<int>(), static_cast<long long>(diff.ne(0).sum().item<std::int64_t>()),
              static_cast<long long>(diff.numel()));
  EXPECT_LE(diff.max().item<int>(), 1);
  stbi_image_free(px);
}

// fp8 storage of the frozen base (bf16 compute): three LoRA steps run and every adapter matrix
// that can get a gradient moves (measured 30 of 31: the last block is context_pre_only, so one
// of its text-side adapters gets none).
TEST(Sd35Host, Fp8StorageTrains) {
  yeto::test::TempDir tmp;
  yeto::learner::test::write_dataset(tmp / "data", 8, {}, 32);
  yeto::test::TinyLoraRun run{(kRepos / "sd35-tiny").string(), "sd35"};
  run.validation_rows = 2;
  run.steps = 3;
  tmp.write("run.toml", yeto::test::with_fp8_storage(run.toml()));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto [moved, total] = yeto::test::lora_b_moved(tmp / "run" / "lora.safetensors");
  std::printf("  sd35-tiny fp8: %d of %d lora_B moved\n", moved, total);
  EXPECT_GT(total, 0);
  EXPECT_GE(moved, total - 1);
}

TEST(Sd35Host, TinyPresetTrainsExportsAndSamples) {
  yeto::test::TempDir tmp;
  // 1. init-model: a complete repository from the plugin's preset.
  const auto init =
      yeto::test::run_host({"init-model", "--family", "sd35", "--preset", "tiny", "--out", (tmp / "m").string(), "--seed", "3"});
  ASSERT_EQ(init.exit_code, 0) << init.all();
  for (const char* f : {"model_index.json", "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors",
                        "text_encoder_2/model.safetensors", "tokenizer_2/vocab.json", "tokenizer_3/spiece.model",
                        "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::exists(tmp / "m" / f)) << f;

  // 2. train: LoRA on the default targets, val_loss drops clearly.
  yeto::learner::test::write_dataset(tmp / "data", 16, {}, 32);
  const int steps = 40;
  yeto::test::TinyLoraRun run{(tmp / "m").string(), "sd35"};
  run.steps = steps;
  tmp.write("run.toml", run.toml());
  const auto train = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(train.exit_code, 0) << train.all();
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", steps, "sd35 tiny preset", 0.9, train.all()));
  ASSERT_TRUE(fs::exists(tmp / "run" / "lora.safetensors"));
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  EXPECT_TRUE(lora.count("transformer.transformer_blocks.0.attn.add_q_proj.lora_B.weight")) << lora.size();

  // 3. export: the adapter directory.
  const auto exp = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(exp.exit_code, 0) << exp.all();
  for (const char* f : {"pytorch_lora_weights.safetensors", "adapter_config.json", "adapter_model.safetensors",
                        "yeto_diffusion_adapter.json"})
    EXPECT_TRUE(fs::exists(tmp / "adapter" / f)) << f;
  const auto peft = nlohmann::json::parse(read_text(tmp / "adapter" / "adapter_config.json"));
  EXPECT_EQ(peft.at("auto_mapping").at("base_model_class"), "SD3Transformer2DModel") << peft.dump();
  EXPECT_EQ(peft.at("auto_mapping").at("parent_library"), "diffusers.models.transformers.transformer_sd3");
  const auto diffusers_lora = yeto::io::load_safetensors(tmp / "adapter" / "pytorch_lora_weights.safetensors");
  EXPECT_TRUE(diffusers_lora.count("transformer.transformer_blocks.3.attn.to_q.lora_A.weight"));

  // 4. sample: base and adapted pictures, the same bytes for the same seed; the adapter changes them.
  auto args = [&](const fs::path& out, bool adapted) {
    std::vector<std::string> a = {"sample", "--model", (tmp / "m").string(), "--diffusion-adapter", "sd35",
                                  "--prompt", "a green checkerboard", "--seed", "9", "--steps", "3",
                                  "--guidance", "4.0", "--height", "32", "--width", "32", "--max-sequence-length",
                                  "16", "--output", out.string()};
    if (adapted) a.insert(a.end(), {"--adapter-dir", (tmp / "adapter").string()});
    return a;
  };
  for (const auto& [name, adapted] : std::vector<std::pair<std::string, bool>>{
           {"base.png", false}, {"lora-1.png", true}, {"lora-2.png", true}}) {
    const auto s = yeto::test::run_host(args(tmp / name, adapted));
    ASSERT_EQ(s.exit_code, 0) << s.all();
    ASSERT_TRUE(fs::exists(tmp / name));
  }
  EXPECT_EQ(read_text(tmp / "lora-1.png"), read_text(tmp / "lora-2.png"));
  EXPECT_NE(read_text(tmp / "base.png"), read_text(tmp / "lora-1.png"));
}

TEST(Sd35Host, WithoutT5WithoutGuidanceAndBeyondThePositionTable) {
  yeto::test::TempDir tmp;
  auto args = [&](const fs::path& repo, const fs::path& out, const std::string& guidance, const std::string& size) {
    return std::vector<std::string>{"sample", "--model", repo.string(), "--diffusion-adapter", "sd35", "--prompt", kPrompt,
                                    "--seed", "42", "--steps", "2", "--guidance", guidance, "--height", size, "--width",
                                    size, "--max-sequence-length", "32", "--output", out.string()};
  };
  // Guidance 1 runs one batch without the negative prompt (no classifier-free guidance).
  const auto base = yeto::test::run_host(args(kRepos / "sd35-tiny", tmp / "t5.png", "1.0", "64"));
  ASSERT_EQ(base.exit_code, 0) << base.all();
  // SD3 without T5: text_encoder_3 and tokenizer_3 are [null, null]; the pipeline uses zeros.
  const fs::path no_t5 = tmp / "sd35-no-t5";
  fs::copy(kRepos / "sd35-tiny", no_t5, fs::copy_options::recursive);
  fs::remove_all(no_t5 / "text_encoder_3");
  fs::remove_all(no_t5 / "tokenizer_3");
  auto index = nlohmann::json::parse(read_text(no_t5 / "model_index.json"));
  index["text_encoder_3"] = {nullptr, nullptr};
  index["tokenizer_3"] = {nullptr, nullptr};
  std::ofstream(no_t5 / "model_index.json") << index.dump(2);
  const auto r = yeto::test::run_host(args(no_t5, tmp / "no-t5.png", "1.0", "64"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(read_text(tmp / "t5.png"), read_text(tmp / "no-t5.png"));
  // 128 px is a 8x8 patch grid; the tiny transformer's table holds 6x6 (pos_embed_max_size).
  const auto big = yeto::test::run_host(args(kRepos / "sd35-tiny", tmp / "big.png", "5.0", "128"));
  EXPECT_NE(big.exit_code, 0) << big.all();
  EXPECT_NE(big.all().find("pos_embed_max_size 6"), std::string::npos) << big.all();
  EXPECT_FALSE(fs::exists(tmp / "big.png"));
}
