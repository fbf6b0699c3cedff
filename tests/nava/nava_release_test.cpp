// NAVA's release layout through yeto-host: a directory with config.json (NAVA_6B.json's layout)
// and NAVA.safetensors, every WanAVModel tensor under "backbone.", trains to the same bytes as the
// same weights in the pipeline layout; the bf16 release trains in float32 and with fp8 storage; an
// unknown tensor or a bad config is refused naming it; the alias and the hub id open it from the
// hub cache.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

// Rows of the tiny preset's shapes: a moving blob, an audio burst, class captions.
void write_rows(const fs::path& dir) {
  fs::create_directories(dir);
  std::string manifest;
  torch::manual_seed(11);
  for (int i = 0; i < 8; ++i) {
    const auto name = "row" + std::to_string(i);
    auto video = 0.05 * torch::randn({2, 4, 4, 12});
    video[0][1][i % 4] += 1.0;
    yeto::io::save_safetensors(dir / (name + ".v.safetensors"), {{"latents", video}});
    yeto::io::save_safetensors(dir / (name + ".a.safetensors"), {{"audio_latents", torch::randn({6, 16})}});
    yeto::io::save_safetensors(dir / (name + ".t.safetensors"), {{"prompt_embeds", torch::randn({5, 20})}});
    manifest += nlohmann::json{{"latents", name + ".v.safetensors"},
                               {"prompt", ""},
                               {"tensors",
                                {{"audio_latents", name + ".a.safetensors"}, {"prompt_embeds", name + ".t.safetensors"}}}}
                    .dump() +
                "\n";
  }
  std::ofstream(dir / "train.jsonl") << manifest;
}

std::string toml(const fs::path& model) {
  yeto::test::TinyLoraRun run{model.string(), "nava"};
  run.data = "";
  run.validation_rows = 2;
  run.steps = 3;
  run.micro_batch_size = 2;
  run.checkpoint_every = 1000;
  return run.toml();
}

// config.json as NAVA ships it: NAVA_6B.json's keys (no _class_name, no text_dim in the release
// file; the tiny one needs its text width).
void write_release_config(const fs::path& repo, const fs::path& out) {
  auto config = nlohmann::json::parse(yeto::test::read_text(repo / "transformer" / "config.json"));
  config.erase("_class_name");
  config.erase("add_spk_emb");
  config.erase("no_split_norm_ffn");
  fs::create_directories(out);
  std::ofstream(out / "config.json") << config.dump(2);
}

std::map<std::string, at::Tensor> tiny_weights(const fs::path& repo) {
  return yeto::io::load_safetensors(repo / "transformer" / "diffusion_pytorch_model.safetensors");
}

std::vector<std::pair<std::string, at::Tensor>> with_prefix(const std::map<std::string, at::Tensor>& w) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [n, t] : w) out.emplace_back("backbone." + n, t);
  return out;
}

double first_val_loss(const fs::path& run) { return yeto::test::metric_series(run, "val_loss", true).at(0); }

}  // namespace

TEST(NavaRelease, TheReleaseLayoutTrainsToTheSameBytesAsThePipelineLayout) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  write_rows(tmp / "data");
  const auto release = tmp / "release";
  write_release_config(repo, release);
  yeto::io::save_safetensors(release / "NAVA.safetensors", with_prefix(tiny_weights(repo)));

  tmp.write("pipeline.toml", toml(repo));
  tmp.write("release.toml", toml(release));
  auto r = yeto::test::train(tmp / "pipeline.toml", tmp / "a");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::train(tmp / "release.toml", tmp / "b");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("release layout"), std::string::npos) << r.all();
  EXPECT_EQ(yeto::test::read_text(tmp / "a" / "lora.safetensors"), yeto::test::read_text(tmp / "b" / "lora.safetensors"));

  // An unknown tensor under backbone. is refused by name (strict).
  auto extra = with_prefix(tiny_weights(repo));
  extra.emplace_back("backbone.double_blocks.0.norm1_audio.weight", torch::ones({20}));
  yeto::io::save_safetensors(release / "NAVA.safetensors", extra);
  r = yeto::test::train(tmp / "release.toml", tmp / "c");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("norm1_audio"), std::string::npos) << r.all();
  // A config option this implementation does not serve, named with the file.
  auto config = nlohmann::json::parse(yeto::test::read_text(release / "config.json"));
  config["no_split_norm_ffn"] = false;
  std::ofstream(release / "config.json") << config.dump(2);
  yeto::io::save_safetensors(release / "NAVA.safetensors", with_prefix(tiny_weights(repo)));
  r = yeto::test::train(tmp / "release.toml", tmp / "d");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("config.json: WanAVModel config: 'no_split_norm_ffn'"), std::string::npos) << r.all();
}

// The release as NAVA ships it, stored in bf16: trained in float32 (the tensors converted on load)
// and with model.storage = "fp8" (the frozen Linears kept as e4m3 codes with a scale per row, the
// nn fp8 path every family's denoiser has): both run, the fp8 one from within the codes' rounding
// of the same validation loss. NAVA_fp8.safetensors alone is refused with what to use instead.
TEST(NavaRelease, TheBf16ReleaseTrainsInFloat32AndWithFp8Storage) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  write_rows(tmp / "data");
  const auto release = tmp / "release";
  write_release_config(repo, release);
  std::vector<std::pair<std::string, at::Tensor>> bf16;
  for (auto& [n, t] : with_prefix(tiny_weights(repo))) bf16.emplace_back(n, t.to(torch::kBFloat16));
  yeto::io::save_safetensors(release / "NAVA.safetensors", bf16);
  tmp.write("fp32.toml", toml(release));
  auto text = yeto::test::read_text(tmp / "fp32.toml");
  text.replace(text.find("precision = \"fp32\"\n"), std::string("precision = \"fp32\"\n").size(),
               "precision = \"fp32\"\nstorage = \"fp8\"\n");
  tmp.write("fp8.toml", text);
  auto r = yeto::test::train(tmp / "fp32.toml", tmp / "fp32");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::train(tmp / "fp8.toml", tmp / "fp8");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const double a = first_val_loss(tmp / "fp8"), b = first_val_loss(tmp / "fp32");
  std::printf("  bf16 release: val_loss %.5f with fp8 storage, %.5f in float32\n", a, b);
  EXPECT_NE(a, b);
  EXPECT_LT(std::abs(a - b), 0.05 * b);

  fs::rename(release / "NAVA.safetensors", release / "NAVA_fp8.safetensors");
  r = yeto::test::train(tmp / "fp32.toml", tmp / "refused");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("NAVA_fp8.safetensors (FP8Linear codes with their weight_scale) is not read"), std::string::npos)
      << r.all();
}

// The alias: `nava` (and the hub id ernie-research/NAVA) opens the release from the hub cache
// without --diffusion-adapter and samples the same latents as the pipeline layout.
TEST(NavaRelease, TheAliasAndTheHubIdOpenTheReleaseFromTheHubCache) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  const auto hub_root = tmp / "hub/models--ernie-research--NAVA";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(hub_root / "refs");
  std::ofstream(hub_root / "refs/main") << commit;
  const auto snapshot = hub_root / "snapshots" / commit;
  write_release_config(repo, snapshot);
  yeto::io::save_safetensors(snapshot / "NAVA.safetensors", with_prefix(tiny_weights(repo)));
  torch::manual_seed(21);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", torch::randn({5, 20})}});
  auto sample = [&](const std::string& model, const std::string& out, bool adapter) {
    std::vector<std::string> args = {"sample", "--model", model, "--prompt", (tmp / "prompt.safetensors").string(),
                                     "--seed", "2", "--steps", "2", "--height", "64", "--width", "64",
                                     "--num-frames", "5", "--output", (tmp / out).string(),
                                     "--set", "model.hub_cache=" + (tmp / "hub").string()};
    if (adapter) args.insert(args.end(), {"--diffusion-adapter", "nava"});
    const auto r = yeto::test::run_host(args);
    EXPECT_EQ(r.exit_code, 0) << r.all();
    return yeto::test::read_text(tmp / out);
  };
  const auto base = sample(repo.string(), "pipeline.safetensors", true);
  EXPECT_EQ(sample("nava", "alias.safetensors", false), base);
  EXPECT_EQ(sample("ernie-research/NAVA", "id.safetensors", false), base);
}
