// The ltx plugin through yeto-host: trusted loading, every ltx-* parity case and the recorded
// LTXPipeline run through check-parity, init-model's tiny preset, a short LoRA run on raw videos
// made with FFmpeg (mixed shapes, bucketed) and an MP4 sample that follows the VAE's frame rule.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/family_host.hpp"
#include "support/fp8_run.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(YETO_TEST_FIXTURES);

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

using yeto::test::read_text;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs check-parity on the case directories; every case must pass and report every key of its
// case.json `compare`.
void expect_parity(const std::vector<fs::path>& dirs, const std::string& kind) {
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json cases;
  yeto::test::run_check_parity(dirs, &cases);
  std::printf("  check-parity (%zu case(s)) %.1f s\n", dirs.size(), seconds_since(t0));
  if (testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(cases.size(), dirs.size());
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    const auto& c = cases[i];
    if (!kind.empty()) {
      EXPECT_EQ(c.at("kind"), kind);
    }
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    const auto compare = read_json(dirs[i] / "case.json").at("compare");
    EXPECT_EQ(c.at("comparisons").size(), compare.size()) << c.dump(1);
    double worst = 0.0;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
      const double ratio = cmp.at("max_abs").get<double>() / std::max(cmp.at("atol").get<double>(), 1e-30);
      worst = std::max(worst, ratio);
      std::printf("  %-22s %-40s max abs %.3g (atol %.3g)\n", c.at("case").get<std::string>().c_str(),
                  cmp.at("name").get<std::string>().c_str(), cmp.at("max_abs").get<double>(),
                  cmp.at("atol").get<double>());
    }
    std::printf("  %-22s worst max_abs / atol = %.3g\n", c.at("case").get<std::string>().c_str(), worst);
  }
}

int ffprobe_frames(const fs::path& video) {
  const auto r = yeto::test::run_process({"ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                                          "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", video.string()});
  if (r.exit_code != 0) return -1;
  return std::atoi(r.out.c_str());
}

// Clips made with FFmpeg's test sources: three kinds (caption per kind), two source sizes; rows
// alternate between the run's 64x64 and their own 64x128 target, so two shape buckets.
void write_video_dataset(const fs::path& dir, int rows) {
  fs::create_directories(dir / "clips");
  const char* sources[] = {"testsrc", "smptebars", "rgbtestsrc"};
  const char* captions[] = {"a moving test pattern", "colour bars", "red green and blue stripes"};
  std::string manifest;
  for (int i = 0; i < rows; ++i) {
    const int k = i % 3;
    const std::string size = (i / 3) % 2 ? "160x96" : "96x96";
    const std::string name = "clips/" + std::to_string(i) + ".mp4";
    const auto r = yeto::test::run_process({"ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                                            std::string(sources[k]) + "=size=" + size + ":rate=30", "-t", "0.6",
                                            "-c:v", "libx264", "-pix_fmt", "yuv420p", (dir / name).string()});
    ASSERT_EQ(r.exit_code, 0) << r.all();
    nlohmann::json row = {{"video", name}, {"prompt", captions[k]}};
    if (i % 2) row["width"] = 128;
    manifest += row.dump() + "\n";
  }
  std::ofstream(dir / "train.jsonl") << manifest;
}

std::string train_toml(int steps) {
  yeto::test::TinyLoraRun run{(kFixtures / "repos/ltx-tiny").string(), "ltx"};
  run.data = "height = 64\nwidth = 64\nnum_frames = 9\nfps = 25.0\nresize_mode = \"center-crop\"\n"
             "bucket_by_shape = true\n";
  run.validation_rows = 6;
  run.steps = steps;
  run.micro_batch_size = 2;
  run.checkpoint_every = 100;
  return run.toml();
}

}  // namespace

TEST(LtxHost, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json m;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("ltx", &m));
  EXPECT_NE(m.dump().find("ltx-video"), std::string::npos) << m.dump();
}

TEST(LtxHost, CheckParityRunsEveryLtxCaseThroughThePlugin) {
  const auto p = kFixtures / "parity";
  expect_parity({p / "ltx-transformer"}, "model");
  expect_parity({p / "ltx-vae", p / "ltx-vae-tc"}, "autoencoder");
  expect_parity({p / "ltx-pipeline-latents"}, "pipeline_helpers");
}

TEST(LtxHost, CheckParityReproducesTheRecordedPipelineRun) {
  // The upstream-written repository as it is (sharded transformer and T5, T5Tokenizer entry,
  // VAE buffers): masks, guidance batching, every step and the decoded video.
  expect_parity({kFixtures / "repos/ltx-tiny-reference"}, "pipeline_end_to_end");
}

TEST(LtxHost, SampleWritesAnMp4OfOnePlusEightKFrames) {
  yeto::test::TempDir tmp;
  auto args = [&](const std::string& frames, const fs::path& out) {
    return std::vector<std::string>{"sample", "--model", (kFixtures / "repos/ltx-tiny").string(),
                                    "--diffusion-adapter", "ltx", "--prompt", "waves crossing a dark shoreline",
                                    "--seed", "42", "--steps", "2", "--guidance", "3.0", "--height", "64",
                                    "--width", "96", "--max-sequence-length", "32", "--num-frames", frames,
                                    "--fps", "25", "--output", out.string()};
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = yeto::test::run_host(args("12", tmp / "clip.mp4"));
  std::printf("  sample 12 -> 9 frames: %.1f s\n", seconds_since(t0));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("changed --num-frames 12 to 9 frames"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("1 + 8k frames"), std::string::npos) << r.all();
  EXPECT_EQ(ffprobe_frames(tmp / "clip.mp4"), 9);
  // A request that already follows the rule is not rewritten.
  r = yeto::test::run_host(args("17", tmp / "clip17.mp4"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(r.all().find("changed --num-frames"), std::string::npos) << r.all();
  EXPECT_EQ(ffprobe_frames(tmp / "clip17.mp4"), 17);
  // A video cannot be written as one PNG.
  r = yeto::test::run_host(args("9", tmp / "clip.png"));
  EXPECT_NE(r.exit_code, 0);
}

TEST(LtxHost, InitModelTinyPresetIsALoadableLtxRepository) {
  yeto::test::TempDir tmp;
  const auto out = tmp / "ltx";
  auto r = yeto::test::run_host({"init-model", "--family", "ltx", "--preset", "tiny", "--out", out.string(), "--seed", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto repo = kFixtures / "repos/ltx-tiny";
  EXPECT_EQ(read_json(out / "model_index.json"), read_json(repo / "model_index.json"));
  for (const char* c : {"transformer", "vae"}) {
    auto want = read_json(repo / c / "config.json"), got = read_json(out / c / "config.json");
    want.erase("_diffusers_version");
    got.erase("_diffusers_version");
    EXPECT_EQ(got, want) << c;
  }
  EXPECT_TRUE(fs::exists(out / "vae/diffusion_pytorch_model.safetensors"));
  EXPECT_TRUE(fs::exists(out / "tokenizer/spiece.model"));
  r = yeto::test::run_host({"sample", "--model", out.string(), "--diffusion-adapter", "ltx", "--prompt", "a test",
                            "--steps", "2", "--height", "32", "--width", "32", "--num-frames", "9", "--output",
                            (tmp / "init.mp4").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ffprobe_frames(tmp / "init.mp4"), 9);
}

TEST(LtxHost, LoraOnRawVideosLowersValidationLoss) {
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data", 12);
  tmp.write("run.toml", train_toml(40));
  // Center-cropped to two shapes: one bucket per shape.
  const auto check = yeto::test::run_host({"data", "check", "--config", (tmp / "run.toml").string()});
  ASSERT_EQ(check.exit_code, 0) << check.all();
  EXPECT_NE(check.out.find("9x64x64: 6 rows"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("9x64x128: 6 rows"), std::string::npos) << check.out;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  std::printf("  train 40 steps: %.1f s\n", seconds_since(t0));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_NO_FATAL_FAILURE(
      yeto::test::expect_val_loss_drops(tmp / "run", 40, "ltx-tiny", 0.9, read_text(tmp / "run/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(tmp / "run/lora.safetensors"));

  // Export the run (its recorded config is the default for every setting) and sample from base +
  // adapter: the adapter reaches the transformer, so the clip differs from the base model's.
  auto r2 = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(r2.exit_code, 0) << r2.all();
  const auto cfg = read_json(tmp / "adapter/adapter_config.json");
  EXPECT_EQ(cfg.at("auto_mapping").at("base_model_class"), "LTXVideoTransformer3DModel");
  EXPECT_EQ(cfg.at("auto_mapping").at("parent_library"), "diffusers.models.transformers.transformer_ltx");
  auto sample = [&](const fs::path& out, bool adapter) {
    std::vector<std::string> a = {"sample", "--model", (kFixtures / "repos/ltx-tiny").string(), "--diffusion-adapter",
                                  "ltx", "--prompt", "colour bars", "--steps", "2", "--height", "64", "--width",
                                  "64", "--num-frames", "9", "--output", out.string() + "/"};
    if (adapter) a.insert(a.end(), {"--adapter-dir", (tmp / "adapter").string()});
    return yeto::test::run_host(a);
  };
  r2 = sample(tmp / "base", false);
  ASSERT_EQ(r2.exit_code, 0) << r2.all();
  r2 = sample(tmp / "tuned", true);
  ASSERT_EQ(r2.exit_code, 0) << r2.all();
  EXPECT_NE(r2.all().find("folded"), std::string::npos) << r2.all();
  ASSERT_TRUE(fs::exists(tmp / "base/frame-00008.png") && fs::exists(tmp / "tuned/frame-00008.png"));
  EXPECT_NE(read_text(tmp / "base/frame-00008.png"), read_text(tmp / "tuned/frame-00008.png"));
}

TEST(LtxHost, CachedLatentsAndMaskedEmbeddingsTrain) {
  // `yeto-host cache` stores the normalised video latents and both text tensors the plugin returns
  // (embeddings and their attention mask); a run on the cache trains from them.
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data", 6);
  tmp.write("run.toml", train_toml(3));
  auto r = yeto::test::run_host({"cache", "--config", (tmp / "run.toml").string(), "--output", (tmp / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto manifest = read_text(tmp / "cache/manifest.jsonl");
  std::istringstream lines(manifest);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* k : {"latents", "prompt_embeds", "prompt_attention_mask"}) EXPECT_TRUE(j.contains(k)) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 6);
  std::string toml = train_toml(3);
  toml.replace(toml.find("data/train.jsonl"), 16, "cache");
  tmp.write("cached.toml", toml);
  r = yeto::test::run_host({"train", "--config", (tmp / "cached.toml").string(), "--output", (tmp / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(fs::exists(tmp / "run/lora.safetensors"));
}

TEST(LtxHost, Bf16BaseSamplesAndTrainsFloat32Adapters) {
  // model.precision = bf16 on the CPU: the transformer and VAE run in bfloat16, the LoRA matrices
  // stay float32 and the loss is finite.
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data", 4);
  std::string toml = train_toml(3);
  toml.replace(toml.find("precision = \"fp32\""), 18, "precision = \"bf16\"");
  tmp.write("run.toml", toml);
  auto r = yeto::test::run_host({"train", "--config", (tmp / "run.toml").string(), "--output", (tmp / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("bf16 on cpu"), std::string::npos) << r.all();
  const auto loss = yeto::test::metric_series(tmp / "run", "loss");
  ASSERT_EQ(loss.size(), 3u);
  for (const auto& [step, v] : loss) EXPECT_TRUE(std::isfinite(v)) << step;
  const std::string bytes = read_text(tmp / "run/lora.safetensors");
  ASSERT_GT(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::size_t tensors = 0;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(e.at("dtype"), "F32") << name;
    ++tensors;
  }
  EXPECT_GT(tensors, 0u);
  r = yeto::test::run_host({"sample", "--model", (kFixtures / "repos/ltx-tiny").string(), "--diffusion-adapter", "ltx",
                            "--prompt", "colour bars", "--steps", "2", "--height", "64", "--width", "64",
                            "--num-frames", "9", "--set", "model.precision=bf16", "--output",
                            (tmp / "bf16.mp4").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ffprobe_frames(tmp / "bf16.mp4"), 9);
}

// fp8 storage of the frozen base (bf16 compute): three LoRA steps run and every adapter matrix
// moves.
TEST(LtxHost, Fp8StorageTrains) {
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data", 4);
  tmp.write("run.toml", yeto::test::with_fp8_storage(train_toml(3)));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto [moved, total] = yeto::test::lora_b_moved(tmp / "run" / "lora.safetensors");
  EXPECT_GT(total, 0);
  EXPECT_EQ(moved, total);
}

TEST(LtxHost, TrainingRefusesClipsOffTheVaeGrid) {
  // 8 frames (not 1 + 8k) or 48 pixels (not a multiple of 32): refused naming the data keys.
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data", 2);
  std::string toml = train_toml(1);
  toml.replace(toml.find("num_frames = 9"), 14, "num_frames = 8");
  tmp.write("frames.toml", toml);
  auto r = yeto::test::run_host({"train", "--config", (tmp / "frames.toml").string(), "--output", (tmp / "a").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.all().find("set data.num_frames to 1, 9, 17"), std::string::npos) << r.all();
  toml = train_toml(1);
  toml.replace(toml.find("height = 64"), 11, "height = 48");
  tmp.write("size.toml", toml);
  r = yeto::test::run_host({"train", "--config", (tmp / "size.toml").string(), "--output", (tmp / "b").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.all().find("multiples of 32 (data.height, data.width)"), std::string::npos) << r.all();
}
