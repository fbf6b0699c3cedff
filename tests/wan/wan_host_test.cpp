// The wan plugin through yeto-host: trusted loading, every wan / umt5 / unipc parity case, the
// recorded Wan 2.1 and Wan 2.2 pipeline runs, init-model presets, MP4 sampling with the 1 + 4k
// frame rule, and short LoRA training runs on raw video (one and two denoisers).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <tuple>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
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

// Runs check-parity on `dirs` and expects every case and comparison to pass; prints the errors.
nlohmann::json check_parity(const std::vector<fs::path>& dirs) {
  nlohmann::json cases;
  yeto::test::run_check_parity(dirs, &cases);  // a failed run leaves `cases` null
  EXPECT_EQ(cases.size(), dirs.size());
  for (const auto& c : cases) {
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    double worst = 0.0;
    std::string worst_name;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
      const double ratio = cmp.at("max_abs").get<double>() / std::max(1e-30, cmp.at("atol").get<double>());
      if (ratio >= worst) {
        worst = ratio;
        worst_name = cmp.at("name").get<std::string>();
      }
    }
    std::printf("  %-24s %3zu comparisons, closest to its tolerance: %s (%.2g of atol)\n",
                c.at("case").get<std::string>().c_str(), c.at("comparisons").size(), worst_name.c_str(), worst);
  }
  return cases;
}

// Test clips of mixed sizes, rates and lengths made with the ffmpeg CLI.
void write_video_dataset(const fs::path& dir) {
  fs::create_directories(dir);
  struct Clip {
    const char* source;
    const char* size;
    int rate;
    const char* prompt;
  };
  const std::vector<Clip> clips = {{"testsrc", "64x48", 8, "a test pattern moving"},
                                   {"testsrc2", "48x64", 12, "a colorful test card"},
                                   {"smptebars", "80x48", 16, "vertical color bars"},
                                   {"rgbtestsrc", "48x48", 8, "red green and blue stripes"},
                                   {"testsrc", "96x64", 10, "a test pattern moving"},
                                   {"testsrc2", "64x64", 8, "a colorful test card"},
                                   {"smptebars", "64x96", 12, "vertical color bars"},
                                   {"rgbtestsrc", "80x64", 16, "red green and blue stripes"}};
  std::ofstream manifest(dir / "train.jsonl");
  for (std::size_t i = 0; i < clips.size(); ++i) {
    const std::string name = "clip" + std::to_string(i) + ".mp4";
    const auto r = yeto::test::run_process(
        {"/usr/bin/ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         std::string(clips[i].source) + "=size=" + clips[i].size + ":rate=" + std::to_string(clips[i].rate), "-t",
         "1", "-c:v", "libx264", "-pix_fmt", "yuv420p", (dir / name).string()});
    ASSERT_EQ(r.exit_code, 0) << r.all();
    manifest << nlohmann::json{{"video", name}, {"prompt", clips[i].prompt}}.dump() << "\n";
  }
}

std::string train_toml(const fs::path& repo, int steps, double lr) {
  yeto::test::TinyLoraRun run{repo.string(), "wan"};
  run.data = "height = 32\nwidth = 32\nnum_frames = 5\nfps = 8.0\nresize_mode = \"center-crop\"\n"
             "bucket_by_shape = true\n";
  run.validation_rows = 4;
  run.steps = steps;
  run.micro_batch_size = 2;
  run.checkpoint_every = 1000;
  run.learning_rate = std::to_string(lr);
  run.seed = 7;
  run.timestep_sampling = "uniform";
  return run.toml();
}

}  // namespace

TEST(WanHost, PluginIsBuiltSignedAndVerifies) {
  nlohmann::json m;
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("wan", &m));
  for (const char* alias : {"wan21-t2v-1.3b", "wan21-t2v-14b", "wan22-t2v-a14b", "wan22-ti2v-5b"})
    EXPECT_NE(m.dump().find(alias), std::string::npos) << alias;
}

TEST(WanHost, ExampleConfigsValidate) {
  for (const char* f : {"configs/wan21.toml", "configs/wan22.toml"}) {
    const auto r = yeto::test::run_host({"config", "--config", (fs::path(YETO_SOURCE_DIR) / f).string()});
    EXPECT_EQ(r.exit_code, 0) << f << "\n" << r.all();
    EXPECT_NE(r.out.find("adapter = \"wan\""), std::string::npos) << r.out;
  }
}

TEST(WanHost, CheckParityComponentAndSchedulerCases) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = kFixtures / "parity";
  check_parity({p / "wan-transformer", p / "wan-vae", p / "wan22-vae", p / "umt5-encoder", p / "scheduler-unipc-default",
                p / "scheduler-unipc-wan"});
  std::printf("  (%.1f s)\n", seconds_since(t0));
}

TEST(WanHost, CheckParityReproducesTheRecordedWan21Run) {
  const auto cases = check_parity({kFixtures / "repos" / "wan21-tiny-reference"});
  const auto info = read_json(kFixtures / "repos" / "wan21-tiny-reference" / "case.json");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].at("comparisons").size(), info.at("compare").size());
}

// Wan 2.2 TI2V-5B (48-channel VAE, one timestep per latent token, flow shift 5.0).
TEST(WanHost, CheckParityReproducesTheRecordedTi2vRun) {
  const auto cases = check_parity({kFixtures / "repos" / "wan22-ti2v-tiny-reference"});
  const auto info = read_json(kFixtures / "repos" / "wan22-ti2v-tiny-reference" / "case.json");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].at("comparisons").size(), info.at("compare").size());
}

TEST(WanHost, PromptIsCleanedAsWanPipelineDoes) {
  // The recorded run with a prompt that prompt_clean turns into the recorded one (HTML entity,
  // whitespace runs, padding): every recorded tensor must still match.
  yeto::test::TempDir tmp;
  const auto ref = kFixtures / "repos" / "wan21-tiny-reference";
  for (const char* f : {"inputs.safetensors", "expected.safetensors"}) fs::copy_file(ref / f, tmp / f);
  auto info = read_json(ref / "case.json");
  info["repository"] = (kFixtures / "repos" / "wan21-tiny").string();
  info["call"]["arguments"]["prompt"] = "  waves  crossing&#32;a \n dark shoreline ";
  tmp.write("case.json", info.dump());
  check_parity({tmp.path()});
}

// The Wan 2.2 recordings (both Diffusers timestep rules): wan22_timestep_rules_test.cpp.

TEST(WanHost, InitModelPresetsLoadAndSample) {
  yeto::test::TempDir tmp;
  for (const auto& [preset, denoisers] : {std::pair{"tiny", 1}, std::pair{"tiny-a14b", 2}, std::pair{"tiny-ti2v", 1}}) {
    const fs::path out = tmp / preset;
    const auto r = yeto::test::run_host(
        {"init-model", "--family", "wan", "--preset", preset, "--out", out.string(), "--seed", "3"});
    ASSERT_EQ(r.exit_code, 0) << r.all();
    const auto index = read_json(out / "model_index.json");
    EXPECT_EQ(index.contains("transformer_2"), denoisers == 2) << preset;
    EXPECT_EQ(index.contains("boundary_ratio"), denoisers == 2) << preset;
    for (const char* c : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
      EXPECT_TRUE(fs::exists(out / c)) << preset << " " << c;
    // The generated repository samples (2 steps, 1 frame).
    const auto s = yeto::test::run_host({"sample", "--model", out.string(), "--diffusion-adapter", "wan", "--prompt",
                                         "a boat", "--steps", "2", "--height", "32", "--width", "32", "--num-frames",
                                         "1", "--max-sequence-length", "16", "--output", (tmp / (std::string(preset) + ".png")).string()});
    EXPECT_EQ(s.exit_code, 0) << s.all();
  }
}

TEST(WanHost, SampleWritesAnMp4WithTheVaeFrameRule) {
  yeto::test::TempDir tmp;
  const auto out = tmp / "clip.mp4";
  const auto r = yeto::test::run_host({"sample", "--model", (kFixtures / "repos" / "wan21-tiny").string(),
                                       "--diffusion-adapter", "wan", "--prompt", "waves crossing a dark shoreline",
                                       "--seed", "42", "--steps", "2", "--guidance", "5.0", "--height", "48",
                                       "--width", "64", "--num-frames", "7", "--fps", "8",
                                       "--max-sequence-length", "32", "--output", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("--num-frames 7 to 5 frames"), std::string::npos) << r.all();
  const auto probe = yeto::test::run_process({"/usr/bin/ffprobe", "-v", "error", "-count_frames", "-select_streams",
                                              "v:0", "-show_entries", "stream=nb_read_frames,width,height", "-of",
                                              "json", out.string()});
  ASSERT_EQ(probe.exit_code, 0) << probe.all();
  const auto s = nlohmann::json::parse(probe.out).at("streams").at(0);
  EXPECT_EQ(s.at("nb_read_frames"), "5");
  EXPECT_EQ(s.at("width"), 64);
  EXPECT_EQ(s.at("height"), 48);
}

TEST(WanHost, SampleGuidance2DrivesTheLowNoiseDenoiser) {
  yeto::test::TempDir tmp;
  auto sample = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"sample", "--model", (kFixtures / "repos" / "wan22-tiny").string(),
                                     "--diffusion-adapter", "wan", "--prompt", "a boat", "--seed", "5", "--steps", "4",
                                     "--guidance", "4.0", "--height", "32", "--width", "32", "--num-frames", "1",
                                     "--max-sequence-length", "16", "--output", (tmp / out).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = yeto::test::run_host(args);
    EXPECT_EQ(r.exit_code, 0) << r.all();
    return read_text(tmp / out);
  };
  const auto base = sample("a.png", {});
  EXPECT_EQ(sample("b.png", {"--guidance-2", "4.0"}), base);  // default: the first guidance
  EXPECT_NE(sample("c.png", {"--guidance-2", "1.5"}), base);
}

TEST(WanHost, Wan21LoraOnRawVideoLowersValLoss) {
  const auto t0 = std::chrono::steady_clock::now();
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  tmp.write("run.toml", train_toml(kFixtures / "repos" / "wan21-tiny", 20, 0.03));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  char took[32];
  std::snprintf(took, sizeof took, " in %.1f s", seconds_since(t0));
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", 20, "wan21-tiny", 0.85,
                                                            read_text(tmp / "run" / "metrics.jsonl"), took));
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  for (const auto& [name, t] : lora) EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name;
}

// fp8 storage of the frozen base (bf16 compute): the step runs (the inputs take the layers'
// compute dtype, not the uint8 codes' dtype) and every adapter matrix moves.
TEST(WanHost, Fp8StorageTrains) {
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  tmp.write("run.toml", yeto::test::with_fp8_storage(train_toml(kFixtures / "repos" / "wan21-tiny", 3, 0.03)));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto [moved, total] = yeto::test::lora_b_moved(tmp / "run" / "lora.safetensors");
  EXPECT_EQ(total, 16);
  EXPECT_EQ(moved, total);
}

// A repository with only the transformer and the scheduler (vae, text encoder and tokenizer
// [null, null]) trains on latents and text embeddings cached elsewhere; the VAE layout is then
// the default one and nothing encodes.
TEST(WanHost, ATransformerOnlyRepositoryTrainsOnCachedLatents) {
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  const auto full = kFixtures / "repos" / "wan21-tiny";
  const auto toml = train_toml(full, 2, 0.01);
  tmp.write("cache.toml", toml);
  auto r = yeto::test::run_host({"cache", "--config", (tmp / "cache.toml").string(), "--output", (tmp / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  fs::copy(tmp / "cache", tmp / "precomputed", fs::copy_options::recursive);
  fs::remove(tmp / "precomputed/yeto_diffusion_cache.json");

  const auto tonly = tmp / "transformer-only";
  fs::create_directories(tonly);
  for (const char* c : {"transformer", "scheduler"}) fs::copy(full / c, tonly / c, fs::copy_options::recursive);
  auto index = read_json(full / "model_index.json");
  for (const char* c : {"vae", "text_encoder", "tokenizer"}) index[c] = nlohmann::json::array({nullptr, nullptr});
  tmp.write("transformer-only/model_index.json", index.dump(2));
  auto cached = std::regex_replace(toml, std::regex("id = \"[^\"]*\""), "id = \"" + tonly.string() + "\"");
  tmp.write("raw.toml", cached);
  cached = std::regex_replace(cached, std::regex("data/train\\.jsonl"), "precomputed/manifest.jsonl");
  tmp.write("train.toml", cached);
  r = yeto::test::train(tmp / "train.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(yeto::test::metric_series(tmp / "run", "loss").size(), 2u);

  // Raw clips need the VAE: refused, naming it.
  r = yeto::test::train(tmp / "raw.toml", tmp / "raw");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("lists 'vae' as null"), std::string::npos) << r.all();
}

TEST(WanHost, ClipShapesTheVaeCannotEncodeAreRefusedNamingTheKey) {
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  auto toml = train_toml(kFixtures / "repos" / "wan21-tiny", 2, 0.01);
  tmp.write("frames.toml", std::regex_replace(toml, std::regex("num_frames = 5"), "num_frames = 4"));
  tmp.write("size.toml", std::regex_replace(toml, std::regex("height = 32"), "height = 40"));
  for (const auto& [file, key] : {std::pair{"frames.toml", "data.num_frames"}, std::pair{"size.toml", "data.height"}}) {
    const auto r = yeto::test::run_host({"train", "--config", (tmp / file).string(), "--output", (tmp / file).string() + ".run"});
    EXPECT_NE(r.exit_code, 0) << file;
    EXPECT_NE(r.all().find(key), std::string::npos) << r.all();
  }
}

TEST(WanHost, Wan22LoraTrainsBothDenoisers) {
  const auto t0 = std::chrono::steady_clock::now();
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  // With activation checkpointing: the blocks of both experts are recomputed in backward.
  tmp.write("run.toml", std::regex_replace(train_toml(kFixtures / "repos" / "wan22-tiny", 8, 0.02),
                                           std::regex("\\[train\\]\n"), "[train]\nactivation_checkpointing = true\n"));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  std::map<std::string, int> moved, total;
  for (const auto& [name, t] : lora) {
    if (name.find("lora_B") == std::string::npos) continue;
    const auto denoiser = name.substr(0, name.find('.'));
    ++total[denoiser];
    if (t.abs().max().item<double>() > 0) ++moved[denoiser];  // B starts at zero
  }
  std::printf("  wan22-tiny lora_B moved: transformer %d/%d, transformer_2 %d/%d in %.1f s\n", moved["transformer"],
              total["transformer"], moved["transformer_2"], total["transformer_2"], seconds_since(t0));
  EXPECT_EQ(total["transformer"], 16);
  EXPECT_EQ(total["transformer_2"], 16);
  EXPECT_EQ(moved["transformer"], total["transformer"]);
  EXPECT_EQ(moved["transformer_2"], total["transformer_2"]);

  // Export: one adapter directory per denoiser (--component), refused without it.
  const auto all = yeto::test::export_adapter(tmp / "run", tmp / "both");
  EXPECT_EQ(all.exit_code, 2) << all.all();
  EXPECT_NE(all.all().find("--component"), std::string::npos) << all.all();
  for (const std::string component : {"transformer", "transformer_2"}) {
    const auto dir = tmp / ("adapter-" + component);
    const auto e = yeto::test::export_adapter(tmp / "run", dir, {"--component", component});
    ASSERT_EQ(e.exit_code, 0) << e.all();
    const auto file = yeto::io::load_safetensors(dir / "pytorch_lora_weights.safetensors");
    EXPECT_EQ(file.size(), 32u) << component;
    // Diffusers names either expert's LoRA keys "transformer." (load_into_transformer_2=True picks
    // the low-noise one); the record keeps the component.
    for (const auto& [name, t] : file) EXPECT_EQ(name.rfind("transformer.blocks.", 0), 0u) << name;
    EXPECT_EQ(read_json(dir / "yeto_diffusion_adapter.json").at("lora").at("component"), component);
    EXPECT_EQ(read_json(dir / "adapter_config.json").at("auto_mapping").at("parent_library"),
              "diffusers.models.transformers.transformer_wan");
  }
  // Sampling folds the low-noise adapter into transformer_2, and both adapters when both are given.
  auto sample = [&](const std::string& out, const std::vector<std::string>& components) {
    std::vector<std::string> args = {"sample", "--model", (kFixtures / "repos" / "wan22-tiny").string(),
                                     "--diffusion-adapter", "wan", "--prompt", "a boat", "--steps", "2", "--height",
                                     "32", "--width", "32", "--num-frames", "1", "--max-sequence-length", "16",
                                     "--output", (tmp / out).string()};
    for (const auto& c : components) args.insert(args.end(), {"--adapter-dir", (tmp / ("adapter-" + c)).string()});
    const auto s = yeto::test::run_host(args);
    EXPECT_EQ(s.exit_code, 0) << s.all();
    for (const auto& c : components)
      EXPECT_NE(s.all().find("LoRA modules of " + c + " from"), std::string::npos) << s.all();
    return read_text(tmp / out);
  };
  const auto low = sample("low.png", {"transformer_2"});
  const auto both = sample("both.png", {"transformer", "transformer_2"});
  EXPECT_NE(low, both);
}

// The TI2V-5B layout trains on raw clips (32x32: the 16x VAE and the 2x2 patches) and samples
// an MP4 from the trained adapter.
TEST(WanHost, Ti2vLoraOnRawVideoTrainsAndSamples) {
  const auto t0 = std::chrono::steady_clock::now();
  yeto::test::TempDir tmp;
  write_video_dataset(tmp / "data");
  tmp.write("run.toml", train_toml(kFixtures / "repos" / "wan22-ti2v-tiny", 4, 0.03));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto [moved, total] = yeto::test::lora_b_moved(tmp / "run" / "lora.safetensors");
  std::printf("  wan22-ti2v-tiny lora_B moved: %d/%d in %.1f s\n", moved, total, seconds_since(t0));
  EXPECT_EQ(total, 16);
  EXPECT_EQ(moved, total);
  const auto e = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(e.exit_code, 0) << e.all();
  const auto out = tmp / "clip.mp4";
  const auto s = yeto::test::run_host({"sample", "--model", (kFixtures / "repos" / "wan22-ti2v-tiny").string(),
                                       "--diffusion-adapter", "wan", "--adapter-dir", (tmp / "adapter").string(),
                                       "--prompt", "a boat", "--seed", "3", "--steps", "2", "--height", "32",
                                       "--width", "64", "--num-frames", "5", "--fps", "8",
                                       "--max-sequence-length", "16", "--output", out.string()});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  const auto probe = yeto::test::run_process({"/usr/bin/ffprobe", "-v", "error", "-count_frames", "-select_streams",
                                              "v:0", "-show_entries", "stream=nb_read_frames,width,height", "-of",
                                              "json", out.string()});
  ASSERT_EQ(probe.exit_code, 0) << probe.all();
  const auto st = nlohmann::json::parse(probe.out).at("streams").at(0);
  EXPECT_EQ(st.at("nb_read_frames"), "5");
  EXPECT_EQ(st.at("width"), 64);
  EXPECT_EQ(st.at("height"), 32);
}

// Image-to-video of Wan 2.2 TI2V (`sample --image`): the image's latent is the clean first latent
// frame, so with the same image two seeds decode the same first frame (the causal VAE decodes
// frame 0 from latent frame 0 alone) and other later frames; another image, or no image, changes
// the first frame. A model without expand_timesteps and an image of another size are refused.
TEST(WanHost, Ti2vImageConditionsTheFirstFrame) {
  yeto::test::TempDir tmp;
  for (const auto& [name, source] : {std::pair{"pattern.png", "testsrc=s=64x32:d=1"}, std::pair{"red.png", "color=red:s=64x32:d=1"},
                                     std::pair{"small.png", "color=red:s=32x32:d=1"}}) {
    const auto r = yeto::test::run_process({"/usr/bin/ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", source,
                                            "-frames:v", "1", (tmp / name).string()});
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }
  auto sample = [&](const fs::path& repo, const std::string& image, const std::string& seed, const std::string& out) {
    std::vector<std::string> args = {"sample", "--model", repo.string(), "--diffusion-adapter", "wan", "--prompt",
                                     "a boat", "--seed", seed, "--steps", "2", "--height", "32", "--width", "64",
                                     "--num-frames", "5", "--max-sequence-length", "16", "--output", (tmp / out).string()};
    if (!image.empty()) args.insert(args.end(), {"--image", (tmp / image).string()});
    return yeto::test::run_host(args);
  };
  const auto ti2v = kFixtures / "repos" / "wan22-ti2v-tiny";
  std::map<std::string, torch::Tensor> video;
  for (const auto& [image, seed, out] : {std::tuple{"pattern.png", "3", "a3"}, std::tuple{"pattern.png", "4", "a4"},
                                         std::tuple{"red.png", "3", "b3"}, std::tuple{"", "3", "n3"},
                                         std::tuple{"", "4", "n4"}}) {
    const auto r = sample(ti2v, image, seed, std::string(out) + ".safetensors");
    ASSERT_EQ(r.exit_code, 0) << r.all();
    video[out] = yeto::io::load_safetensors(tmp / (std::string(out) + ".safetensors")).at("video");
  }
  auto frame = [&](const std::string& k, int f) { return video.at(k).select(2, f); };
  EXPECT_EQ(video.at("a3").sizes(), (std::vector<std::int64_t>{1, 3, 5, 32, 64}));
  EXPECT_TRUE(torch::equal(frame("a3", 0), frame("a4", 0)));
  EXPECT_GT((frame("a3", 4) - frame("a4", 4)).abs().max().item<double>(), 1e-3);
  EXPECT_GT((frame("a3", 0) - frame("b3", 0)).abs().max().item<double>(), 1e-3);
  EXPECT_GT((frame("n3", 0) - frame("n4", 0)).abs().max().item<double>(), 1e-3);

  auto r = sample(ti2v, "small.png", "3", "small.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.all().find("the image is 32x32 but the video is 64x32"), std::string::npos) << r.all();
  r = sample(kFixtures / "repos" / "wan21-tiny", "red.png", "3", "t2v.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.all().find("an image conditions the first frame only for Wan 2.2 TI2V"), std::string::npos) << r.all();
}
