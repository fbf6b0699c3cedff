// The nava family end to end through yeto-host on its tiny init-model preset: LoRA training on
// generated cached rows (video latents of a moving blob, audio latents with a burst when it moves,
// caption embeddings per class; one speaker token per row) through the generic learner's full-step
// path, both modalities' losses falling, export, sampling the exported adapter's latents, the same
// seed giving the same bytes, two islands through the syncer, and bad rows refused naming the row
// and what to do.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "nava_model.hpp"
#include "nava_train.hpp"
#include "support/av_clips.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace nava = yeto::nava;

namespace {

constexpr int kClasses = 3, kPerClass = 4;

void init_tiny(const fs::path& out) {
  const auto r = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
}

struct Row {
  torch::Tensor video, audio, text, speaker, positions;
};

// Class k: a blob of class-specific channels that moves one latent column per frame, starting at
// column k; the audio carries a class-specific burst on the tokens of the second frame (when the
// blob moves); 6 caption rows of class-specific embeddings; a speaker token at caption row 2.
Row make_row(int k, int i) {
  torch::manual_seed(300 + k);
  const auto channels = torch::randn({12});
  const auto tone = torch::randn({16});
  const auto text = torch::randn({6, 20});
  const auto voice = torch::randn({1, 192});
  torch::manual_seed(400 + 10 * k + i);
  auto video = 0.05 * torch::randn({2, 4, 4, 12});
  for (int f = 0; f < 2; ++f) video[f][1 + f % 2][(k + f) % 4] += channels;
  auto audio = 0.05 * torch::randn({8, 16});
  for (int p = 4; p < 8; ++p) audio[p] += tone;
  return {video, audio, text, voice, torch::tensor({2}, torch::kLong)};
}

// with_audio false: no audio latents; captions: the rows carry a caption per class instead of its
// cached encoding.
void write_rows(const fs::path& dir, bool with_audio = true, bool captions = false) {
  fs::create_directories(dir);
  std::string manifest;
  for (int k = 0; k < kClasses; ++k)
    for (int i = 0; i < kPerClass; ++i) {
      const auto r = make_row(k, i);
      const auto name = "clip" + std::to_string(k) + "-" + std::to_string(i);
      yeto::io::save_safetensors(dir / (name + ".latents.safetensors"), {{"latents", r.video}});
      yeto::io::save_safetensors(dir / (name + ".audio.safetensors"), {{"audio_latents", r.audio}});
      yeto::io::save_safetensors(dir / (name + ".text.safetensors"), {{"prompt_embeds", r.text}});
      yeto::io::save_safetensors(dir / (name + ".spk.safetensors"),
                                 {{"speaker_embeds", r.speaker}, {"speaker_positions", r.positions}});
      nlohmann::json tensors = {{"speaker_embeds", name + ".spk.safetensors#speaker_embeds"},
                                {"speaker_positions", name + ".spk.safetensors#speaker_positions"}};
      if (!captions) tensors["prompt_embeds"] = name + ".text.safetensors";
      if (with_audio) tensors["audio_latents"] = name + ".audio.safetensors";
      const std::string prompt = captions ? std::vector<std::string>{"a red ball rolls left with a thud",
                                                                     "a blue cube slides with a hiss",
                                                                     "a green star bounces and rings"}[k]
                                          : "";
      manifest += nlohmann::json{{"latents", name + ".latents.safetensors"}, {"prompt", prompt}, {"tensors", tensors}}
                      .dump() +
                  "\n";
    }
  std::ofstream(dir / "train.jsonl") << manifest;
}

std::string train_toml(const fs::path& repo, int steps, int seed = 5) {
  yeto::test::TinyLoraRun run{repo.string(), "nava"};
  run.data = "";
  run.validation_rows = 3;
  run.steps = steps;
  run.micro_batch_size = 3;
  run.checkpoint_every = 1000;
  run.learning_rate = "0.05";
  run.seed = seed;
  return run.toml();
}

// The tiny repository's WanAVModel, with the run's LoRA when `lora` names a file.
nava::WanAVModel tiny_model(const fs::path& repo, const fs::path& lora = {}) {
  const auto config = nlohmann::json::parse(yeto::test::read_text(repo / "transformer" / "config.json"));
  auto model = nava::WanAVModel(nava::NavaConfig::from_json(config));
  yeto::nn::load_named_tensors(*model, yeto::io::load_safetensors(repo / "transformer" / "diffusion_pytorch_model.safetensors"));
  if (!lora.empty()) {
    yeto::nn::LoraConfig lc;
    lc.r = 4;
    lc.alpha = 4.0;
    lc.init = "zeros";
    yeto::nn::load_lora_state_dict(*model, yeto::io::load_safetensors(lora), lc, "default", "transformer.");
  }
  model->eval();
  return model;
}

// NAVA's per-modality losses (without the timestep reweighting) over `rows` at fixed draws:
// timesteps 100 .. 900, one noise per row.
std::pair<double, double> modality_losses(nava::WanAVModel& model, const std::vector<Row>& rows) {
  torch::NoGradGuard no_grad;
  double video = 0, audio = 0;
  int n = 0;
  for (const auto& r : rows)
    for (int id = 100; id < 1000; id += 200) {
      nava::StepBatch b;
      b.video = {r.video};
      b.audio = {r.audio};
      b.text = {r.text};
      b.speaker = r.speaker;
      b.speaker_positions = {r.speaker.defined() ? std::vector<std::int64_t>{2} : std::vector<std::int64_t>{}};
      auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + id);
      b.video_noise = {at::randn(r.video.sizes(), gen)};
      b.audio_noise = {at::randn(r.audio.sizes(), gen)};
      b.timestep_id = torch::tensor({id}, torch::kLong);
      const auto s = nava::train_step(model, nava::training_schedule(), b, {});
      video += s.losses.at("ddpm_vid_noreweight").item<double>();
      audio += s.losses.at("ddpm_audio_noreweight").item<double>();
      ++n;
    }
  return {video / n, audio / n};
}

// The generated rows of every class.
std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (int k = 0; k < kClasses; ++k)
    for (int i = 0; i < kPerClass; ++i) rows.push_back(make_row(k, i));
  return rows;
}
std::pair<double, double> modality_losses(nava::WanAVModel& model) { return modality_losses(model, all_rows()); }

// Class k's caption embedding of the media rows.
torch::Tensor class_caption(int k) {
  torch::manual_seed(500 + k);
  return torch::randn({6, 20});
}

// Rows of short clips with sound (tests/support/av_clips, 64x64 at 24 fps, 0.25 s, 16 kHz AAC):
// class k's white square shows on frames [k, k + 2) exactly while its tone (300, 700 or 1500 Hz)
// plays, at an amplitude that differs per row; the caption's cached embedding per class.
void write_media_rows(const fs::path& dir) {
  fs::create_directories(dir);
  std::string manifest;
  for (int k = 0; k < kClasses; ++k) {
    const auto text = "caption" + std::to_string(k) + ".safetensors";
    yeto::io::save_safetensors(dir / text, {{"prompt_embeds", class_caption(k)}});
    for (int i = 0; i < kPerClass; ++i) {
      yeto::test::AvClipSpec spec;
      spec.seconds = 0.25;
      spec.sample_rate = 16000;
      spec.tone_hz = std::vector<double>{300.0, 700.0, 1500.0}[static_cast<std::size_t>(k)];
      spec.amplitude = 0.3 + 0.1 * i;
      spec.bursts = {{k / 24.0, (k + 2) / 24.0}};
      const auto name = "clip" + std::to_string(k) + "-" + std::to_string(i) + ".mp4";
      yeto::test::av_clip(dir / name, spec);
      manifest += nlohmann::json{{"video", name}, {"prompt", ""}, {"tensors", {{"prompt_embeds", text}}}}.dump() + "\n";
    }
  }
  std::ofstream(dir / "train.jsonl") << manifest;
}

std::string media_toml(const fs::path& repo, int steps) {
  yeto::test::TinyLoraRun run{repo.string(), "nava"};
  run.data = "height = 64\nwidth = 64\nnum_frames = 5\nfps = 24\n";
  run.validation_rows = 3;
  run.steps = steps;
  run.micro_batch_size = 3;
  run.checkpoint_every = 1000;
  run.learning_rate = "0.05";
  return run.toml();
}

void init_tiny_av(const fs::path& out) {
  const auto r = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny-av", "--seed", "3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
}

}  // namespace

TEST(NavaTrain, TinyPresetTrainsBothModalitiesOnCachedRowsAndExports) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  const auto index = nlohmann::json::parse(yeto::test::read_text(repo / "model_index.json"));
  EXPECT_EQ(index.at("_class_name"), "AudioVideoPipeline") << index.dump();
  EXPECT_EQ(index.at("transformer"), nlohmann::json::array({"nava", "WanAVModel"})) << index.dump();

  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  const int steps = 30;
  tmp.write("run.toml", train_toml(repo, steps));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto metrics = yeto::test::read_text(tmp / "run" / "metrics.jsonl");
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", steps, "nava tiny", 0.8, metrics));
  for (const char* m : {"model/ddpm_vid", "model/ddpm_audio", "model/ddpm_vid_noreweight", "model/ddpm_audio_noreweight"})
    EXPECT_EQ(yeto::test::metric_series(tmp / "run", m).size(), static_cast<std::size_t>(steps)) << m;

  // The run's adapter: auto = the attention projections of both modalities (48 layers).
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  int b_total = 0, b_moved = 0;
  for (const auto& [name, t] : lora) {
    EXPECT_EQ(name.find("ffn"), std::string::npos) << name;
    if (name.find("lora_B") == std::string::npos) continue;
    ++b_total;
    b_moved += t.abs().max().item<double>() > 0;
  }
  EXPECT_EQ(b_total, 48);
  EXPECT_EQ(b_moved, b_total);

  // Both modalities' losses fall at fixed draws (the base model against base + the run's LoRA).
  auto base = tiny_model(repo);
  auto tuned = tiny_model(repo, tmp / "run" / "lora.safetensors");
  const auto before = modality_losses(base), after = modality_losses(tuned);
  std::printf("  nava tiny video loss %.4f -> %.4f, audio loss %.4f -> %.4f\n", before.first, after.first,
              before.second, after.second);
  EXPECT_LT(after.first, 0.9 * before.first);
  EXPECT_LT(after.second, 0.9 * before.second);

  // Export: the Diffusers LoRA file holds the run's tensors under the same names; loaded back into
  // the model it gives the same outputs as the run's file.
  const auto e = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(e.exit_code, 0) << e.all();
  const auto exported = yeto::io::load_safetensors(tmp / "adapter" / "pytorch_lora_weights.safetensors");
  EXPECT_EQ(exported.size(), lora.size());
  for (const auto& [name, t] : lora) {
    ASSERT_TRUE(exported.count(name)) << name << " (exported: " << exported.begin()->first << ", ...)";
    EXPECT_TRUE(torch::equal(exported.at(name), t)) << name;
  }
  auto reloaded = tiny_model(repo, tmp / "adapter" / "pytorch_lora_weights.safetensors");
  EXPECT_EQ(modality_losses(reloaded), after);

  // Sampling (generate): class 0's caption and speaker as a .safetensors prompt; the latents the
  // VAEs would receive, written by name. The adapter changes them; the same seed repeats them.
  const auto row = make_row(0, 0);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", row.text},
                                                          {"speaker_embeds", row.speaker},
                                                          {"speaker_positions", row.positions}});
  auto sample = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"sample", "--model", repo.string(), "--diffusion-adapter", "nava", "--prompt",
                                     (tmp / "prompt.safetensors").string(), "--seed", "4", "--steps", "4", "--height",
                                     "64", "--width", "64", "--num-frames", "7", "--output", (tmp / out).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto s = yeto::test::run_host(args);
    EXPECT_EQ(s.exit_code, 0) << s.all();
    return s.all();
  };
  const auto log = sample("base.safetensors", {});
  EXPECT_NE(log.find("5 frames (7 asked; 4k + 1)"), std::string::npos) << log;
  EXPECT_NE(log.find("the repository has no vae (Wan 2.2 VAE); returning the video latents"), std::string::npos) << log;
  EXPECT_NE(log.find("no audio_vae / vocoder (LTX-2's); returning the audio latents"), std::string::npos) << log;
  sample("adapted.safetensors", {"--adapter-dir", (tmp / "adapter").string()});
  sample("again.safetensors", {"--adapter-dir", (tmp / "adapter").string()});
  const auto latents = yeto::io::load_safetensors(tmp / "adapted.safetensors");
  ASSERT_TRUE(latents.count("video_latents") && latents.count("audio_latents"));
  EXPECT_EQ(latents.at("video_latents").sizes(), (std::vector<std::int64_t>{2, 4, 4, 12}));
  EXPECT_EQ(latents.at("audio_latents").sizes(), (std::vector<std::int64_t>{1, 16, 5}));
  EXPECT_TRUE(torch::isfinite(latents.at("video_latents")).all().item<bool>());
  const auto adapted = yeto::test::read_text(tmp / "adapted.safetensors");
  EXPECT_EQ(adapted, yeto::test::read_text(tmp / "again.safetensors"));
  EXPECT_NE(adapted, yeto::test::read_text(tmp / "base.safetensors"));
}

TEST(NavaTrain, TheSameSeedGivesTheSameBytes) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  tmp.write("run.toml", train_toml(repo, 4));
  tmp.write("other.toml", train_toml(repo, 4, 6));
  for (const char* run : {"a", "b"}) {
    const auto r = yeto::test::train(tmp / "run.toml", tmp / run);
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }
  const auto r = yeto::test::train(tmp / "other.toml", tmp / "c");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto a = yeto::test::read_text(tmp / "a" / "lora.safetensors");
  EXPECT_EQ(a, yeto::test::read_text(tmp / "b" / "lora.safetensors"));
  EXPECT_NE(a, yeto::test::read_text(tmp / "c" / "lora.safetensors"));
}

TEST(NavaTrain, BadRowsAreRefusedNamingTheRowAndWhatToDo) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  tmp.write("run.toml", train_toml(repo, 2));
  // Named by the plugin ("nava: row N") or, for what its plan declares of the rows, by the loader
  // ("train.jsonl line N").
  auto expect_refused = [&](const std::string& run, const std::string& words, const std::string& where = "nava: row ") {
    const auto r = yeto::test::train(tmp / "run.toml", tmp / run);
    EXPECT_NE(r.exit_code, 0) << r.all();
    EXPECT_NE(r.all().find(words), std::string::npos) << r.all();
    EXPECT_NE(r.all().find(where), std::string::npos) << r.all();
  };
  // No audio latents.
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", /*with_audio=*/false));
  expect_refused("no-audio", "the row has cached latents but no 'audio_latents', which the model needs with them (shape [-1, 16])",
                 "train.jsonl line ");
  // Audio shorter than the clip: 4 tokens for 2 latent frames (5 video frames need 5).
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  for (const auto& entry : fs::directory_iterator(tmp / "data"))
    if (entry.path().string().find(".audio.") != std::string::npos)
      yeto::io::save_safetensors(entry.path(), {{"audio_latents", torch::randn({4, 16})}});
  expect_refused("short-audio", "the audio is shorter than the clip: 4 audio latent tokens for 2 latent frames");
  // Video latents of the wrong channel count.
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  for (const auto& entry : fs::directory_iterator(tmp / "data"))
    if (entry.path().string().find(".latents.") != std::string::npos)
      yeto::io::save_safetensors(entry.path(), {{"latents", torch::randn({2, 4, 4, 16})}});
  expect_refused("channels", "tensor 'latents' has shape [2, 4, 4, 16] but the model expects [-1, -1, -1, 12] per row",
                 "train.jsonl line ");
}

TEST(NavaTrain, TwoIslandsTrainTheTinyPreset) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  tmp.write("run.toml",
            "[run]\nthreads = 1\n[model]\nid = \"" + repo.string() +
                "\"\nadapter = \"nava\"\nprecision = \"fp32\"\n"
                "[data]\npath = \"data/train.jsonl\"\nworkers = 1\n[lora]\nr = 4\nalpha = 4.0\n"
                "[train]\nmax_steps = 8\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
                "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\nwarmup_steps = 1\n[diffusion]\nseed = 5\n"
                "[sync]\nfragments = 2\ninner_steps = 2\nquorum = 2\nheartbeat_s = 0.2\nlearner_timeout_s = 3\n"
                "grace_max_s = 4\nround_deadline_s = 8\nreconnect_budget_s = 30\nfinal_timeout_s = 10\n");
  const fs::path run = tmp / "run";
  std::size_t merges = 0;
  ASSERT_NO_FATAL_FAILURE(yeto::test::train_two_islands(tmp / "run.toml", run, 8, &merges));
  const auto a = yeto::io::load_safetensors(run / "island-0" / "lora.safetensors");
  const auto b = yeto::io::load_safetensors(run / "island-1" / "lora.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  std::printf("  two nava islands: %zu merges\n", merges);
}

// Rows with captions instead of their encodings: a repository with a umT5 text encoder
// (tiny-text) encodes them and trains; one without says so, naming the row. A text prompt samples
// through the same encoder (the same bytes again; another caption, other latents).
TEST(NavaTrain, CaptionsGoThroughTheRepositorysUmT5) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny-text";
  const auto made = yeto::test::run_host(
      {"init-model", "--family", "nava", "--preset", "tiny-text", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(made.exit_code, 0) << made.all();
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", true, /*captions=*/true));
  tmp.write("run.toml", train_toml(repo, 6));
  auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto val = yeto::test::metric_series(tmp / "run", "val_loss", true);
  ASSERT_TRUE(val.count(6)) << yeto::test::read_text(tmp / "run" / "metrics.jsonl");
  EXPECT_TRUE(std::isfinite(val.at(6)));

  const auto tiny = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(tiny));
  tmp.write("plain.toml", train_toml(tiny, 2));
  r = yeto::test::train(tmp / "plain.toml", tmp / "plain");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("the repository has no umT5 text encoder for the captions"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("nava: row "), std::string::npos) << r.all();

  auto sample = [&](const std::string& prompt, const std::string& out) {
    const auto s = yeto::test::run_host({"sample", "--model", repo.string(), "--diffusion-adapter", "nava", "--prompt",
                                         prompt, "--seed", "4", "--steps", "2", "--height", "64", "--width", "64",
                                         "--num-frames", "5", "--output", (tmp / out).string()});
    EXPECT_EQ(s.exit_code, 0) << s.all();
    return yeto::test::read_text(tmp / out);
  };
  const auto a = sample("a red ball", "a.safetensors");
  EXPECT_EQ(a, sample("a red ball", "a2.safetensors"));
  EXPECT_NE(a, sample("a blue cube", "b.safetensors"));
}

// bf16 (the precision NAVA runs in) with per-block activation checkpointing: the tiny preset
// trains (every loss finite, the masking_modality steps included) and samples.
TEST(NavaTrain, Bf16WithActivationCheckpointingTrainsAndSamples) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  auto toml = train_toml(repo, 6);
  toml.replace(toml.find("precision = \"fp32\""), std::string("precision = \"fp32\"").size(), "precision = \"bf16\"");
  toml.replace(toml.find("checkpoint_every = 1000\n"), std::string("checkpoint_every = 1000\n").size(),
               "checkpoint_every = 1000\nactivation_checkpointing = true\n");
  tmp.write("run.toml", toml);
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto losses = yeto::test::metric_series(tmp / "run", "loss");
  ASSERT_EQ(losses.size(), 6u);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  const auto row = make_row(1, 0);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", row.text}});
  const auto s = yeto::test::run_host({"sample", "--model", repo.string(), "--diffusion-adapter", "nava", "--prompt",
                                       (tmp / "prompt.safetensors").string(), "--steps", "2", "--height", "64", "--width",
                                       "64", "--num-frames", "5", "--output", (tmp / "bf16.safetensors").string(),
                                       "--set", "model.precision=bf16"});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  const auto latents = yeto::io::load_safetensors(tmp / "bf16.safetensors");
  EXPECT_TRUE(torch::isfinite(latents.at("audio_latents")).all().item<bool>());
}

// The tiny-av preset (the tiny denoiser with a 12-channel Wan 2.2 VAE, LTX-2's audio VAE and a
// vocoder): trained, exported, and the exported adapter sampled to an MP4 whose picture the Wan 2.2
// VAE decoded and whose AAC track the audio VAE + vocoder made, lasting as long as the picture;
// the same seed gives the same bytes, and a .safetensors output keeps the latents next to the
// decoded clip.
TEST(NavaTrain, TheExportedAdapterSamplesAnMp4WithSound) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny-av";
  ASSERT_NO_FATAL_FAILURE(init_tiny_av(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  tmp.write("run.toml", train_toml(repo, 3));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto e = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(e.exit_code, 0) << e.all();

  const auto row = make_row(0, 0);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", row.text},
                                                          {"speaker_embeds", row.speaker},
                                                          {"speaker_positions", row.positions}});
  auto sample = [&](const std::string& out, const std::string& seed, const std::string& precision = "fp32") {
    const auto s = yeto::test::run_host({"sample", "--model", repo.string(), "--diffusion-adapter", "nava",
                                         "--adapter-dir", (tmp / "adapter").string(), "--prompt",
                                         (tmp / "prompt.safetensors").string(), "--seed", seed, "--steps", "3",
                                         "--height", "64", "--width", "64", "--num-frames", "7", "--fps", "24",
                                         "--output", (tmp / out).string(), "--set", "model.precision=" + precision});
    EXPECT_EQ(s.exit_code, 0) << s.all();
    return s.all();
  };
  const auto log = sample("clip.mp4", "4");
  EXPECT_NE(log.find("video latents decoded by the Wan 2.2 VAE to 5 frames of 64x64 px"), std::string::npos) << log;
  EXPECT_NE(log.find("5 audio latent tokens decoded by the audio VAE to 17 mel frames and by the vocoder to 2 "
                     "channel(s) of 4080 samples at 24000 Hz"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the clip is 5 frames at 24 fps = 0.208 s: padded with 920 samples of silence"), std::string::npos)
      << log;
  const auto clip = tmp / "clip.mp4";
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "v", "nb_frames"), "5");
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "codec_name"), "aac");
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "sample_rate"), "24000");
  EXPECT_EQ(yeto::test::ffprobe_stream(clip, "a", "channels"), "2");
  const double video = std::stod(yeto::test::ffprobe_stream(clip, "v", "duration"));
  const double audio = std::stod(yeto::test::ffprobe_stream(clip, "a", "duration"));
  EXPECT_NEAR(video, 5.0 / 24.0, 1e-6);
  EXPECT_NEAR(audio, video, 1024.0 / 24000);
  sample("again.mp4", "4");
  sample("other.mp4", "5");
  const auto bytes = yeto::test::read_text(clip);
  EXPECT_EQ(bytes, yeto::test::read_text(tmp / "again.mp4"));
  EXPECT_NE(bytes, yeto::test::read_text(tmp / "other.mp4"));

  sample("clip.safetensors", "4");
  const auto t = yeto::io::load_safetensors(tmp / "clip.safetensors");
  for (const char* name : {"video_latents", "audio_latents", "video", "audio", "audio_sample_rate"})
    EXPECT_TRUE(t.count(name)) << name;
  EXPECT_EQ(t.at("video").sizes(), (std::vector<std::int64_t>{1, 3, 5, 64, 64}));
  EXPECT_EQ(t.at("audio").sizes(), (std::vector<std::int64_t>{1, 2, 4080}));
  EXPECT_GE(t.at("video").min().item<float>(), 0.0f);
  EXPECT_LE(t.at("video").max().item<float>(), 1.0f);
  EXPECT_GT(t.at("audio").abs().max().item<float>(), 0.0f);

  // In bf16 the decoders run too (LibTorch 1.13's CPU kernels lack bf16 transposed convolutions
  // and replicate padding; the vocoders run those in float32), and the same seed gives the same
  // bytes there as well (docs/DESIGN.md, determinism).
  sample("bf16.mp4", "4", "bf16");
  sample("bf16-again.mp4", "4", "bf16");
  EXPECT_EQ(yeto::test::ffprobe_stream(tmp / "bf16.mp4", "a", "codec_name"), "aac");
  EXPECT_EQ(yeto::test::read_text(tmp / "bf16.mp4"), yeto::test::read_text(tmp / "bf16-again.mp4"));
}

// Rows of media on tiny-av: short clips with sound made with FFmpeg, whose pictures the repository's
// Wan 2.2 VAE and whose 16 kHz sound its LTX-2 audio VAE encode inside the training step. The
// joint loss (val_loss) falls; `yeto-host cache` stores the same rows' latents and audio latents
// (the sound itself not), and on those both per-modality losses fall at fixed draws (the base
// model against base + the run's LoRA).
TEST(NavaMedia, ClipsWithSoundTrainBothModalities) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny-av";
  ASSERT_NO_FATAL_FAILURE(init_tiny_av(repo));
  ASSERT_NO_FATAL_FAILURE(write_media_rows(tmp / "data"));
  const int steps = 20;
  tmp.write("run.toml", media_toml(repo, steps));
  const auto check = yeto::test::run_host({"data", "check", "--config", (tmp / "run.toml").string()});
  ASSERT_EQ(check.exit_code, 0) << check.all();
  EXPECT_NE(check.all().find("audio at 16000 Hz, 2 channel(s); audio_latents [-1, 16]; latents [-1, -1, -1, 12]"),
            std::string::npos)
      << check.all();
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto metrics = yeto::test::read_text(tmp / "run" / "metrics.jsonl");
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", steps, "nava media", 0.9, metrics));
  for (const char* m : {"model/ddpm_vid_noreweight", "model/ddpm_audio_noreweight"})
    EXPECT_EQ(yeto::test::metric_series(tmp / "run", m).size(), static_cast<std::size_t>(steps)) << m;

  const auto c = yeto::test::run_host({"cache", "--config", (tmp / "run.toml").string(), "--output", (tmp / "cache").string()});
  ASSERT_EQ(c.exit_code, 0) << c.all();
  std::map<std::string, Row> by_key;
  for (const auto& entry : fs::directory_iterator(tmp / "cache" / "shards"))
    for (const auto& [name, t] : yeto::io::load_safetensors(entry.path())) {
      const auto slash = name.rfind('/');
      auto& row = by_key[name.substr(0, slash)];
      const auto tensor = name.substr(slash + 1);
      EXPECT_NE(tensor, "audio") << "the decoded sound is not stored: " << name;
      if (tensor == "latents") row.video = t;
      if (tensor == "audio_latents") row.audio = t;
      if (tensor == "prompt_embeds") row.text = t;
    }
  ASSERT_EQ(by_key.size(), static_cast<std::size_t>(kClasses * kPerClass));
  std::vector<Row> rows;
  for (const auto& [key, row] : by_key) {
    ASSERT_TRUE(row.video.defined() && row.audio.defined() && row.text.defined()) << key;
    EXPECT_EQ(row.video.sizes(), (std::vector<std::int64_t>{2, 4, 4, 12})) << key;
    EXPECT_EQ(row.audio.sizes(), (std::vector<std::int64_t>{6, 16})) << key;
    rows.push_back(row);
  }
  auto base = tiny_model(repo);
  auto tuned = tiny_model(repo, tmp / "run" / "lora.safetensors");
  const auto before = modality_losses(base, rows), after = modality_losses(tuned, rows);
  std::printf("  nava media video loss %.4f -> %.4f, audio loss %.4f -> %.4f\n", before.first, after.first,
              before.second, after.second);
  EXPECT_LT(after.first, 0.95 * before.first);
  EXPECT_LT(after.second, 0.95 * before.second);
}

// data check (and training) with tiny-av's declared inputs name every bad row by its line and say
// what to do: a clip without a sound track, a sound file shorter than the clip, cached latents of
// the wrong channel count, cached latents without audio latents, audio latents of the wrong width.
// A repository without the encoders refuses media rows naming the row.
TEST(NavaMedia, DataCheckNamesEveryBadRow) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny-av";
  ASSERT_NO_FATAL_FAILURE(init_tiny_av(repo));
  const auto dir = tmp / "data";
  fs::create_directories(dir);
  yeto::io::save_safetensors(dir / "caption.safetensors", {{"prompt_embeds", class_caption(0)}});
  yeto::test::AvClipSpec spec;
  spec.seconds = 0.25;
  spec.sample_rate = 16000;
  yeto::test::av_clip(dir / "good.mp4", spec);
  auto silent = spec;
  silent.audio_codec = "";
  yeto::test::av_clip(dir / "silent.mp4", silent);
  auto brief = spec;
  brief.seconds = 0.1;
  yeto::test::burst_audio(dir / "brief.wav", brief);
  yeto::io::save_safetensors(dir / "wide.safetensors", {{"latents", torch::randn({2, 4, 4, 16})}});
  yeto::io::save_safetensors(dir / "ok.safetensors", {{"latents", torch::randn({2, 4, 4, 12})}});
  yeto::io::save_safetensors(dir / "sound.safetensors", {{"audio_latents", torch::randn({6, 16})}});
  yeto::io::save_safetensors(dir / "narrow.safetensors", {{"audio_latents", torch::randn({6, 12})}});
  const nlohmann::json text = {{"prompt_embeds", "caption.safetensors"}};
  auto row = [&](nlohmann::json r) {
    r["prompt"] = "";
    if (!r.contains("tensors")) r["tensors"] = text;
    return r.dump() + "\n";
  };
  std::ofstream(dir / "train.jsonl")
      << row({{"video", "good.mp4"}})                                                             // line 1
      << row({{"video", "silent.mp4"}})                                                           // line 2
      << row({{"video", "silent.mp4"}, {"audio", "brief.wav"}})                                   // line 3
      << row({{"latents", "wide.safetensors"}, {"tensors", {{"prompt_embeds", "caption.safetensors"},
                                                            {"audio_latents", "sound.safetensors"}}}})  // line 4
      << row({{"latents", "ok.safetensors"}})                                                     // line 5
      << row({{"latents", "ok.safetensors"}, {"tensors", {{"prompt_embeds", "caption.safetensors"},
                                                          {"audio_latents", "narrow.safetensors"}}}})  // line 6
      << row({{"latents", "ok.safetensors"}, {"tensors", {{"prompt_embeds", "caption.safetensors"},
                                                          {"audio_latents", "sound.safetensors"}}}});  // line 7
  tmp.write("run.toml", media_toml(repo, 2));
  const auto check = yeto::test::run_host({"data", "check", "--config", (tmp / "run.toml").string()});
  const auto log = check.all();
  EXPECT_NE(check.exit_code, 0) << log;
  auto expect_line = [&](int line, const std::string& words) {
    const auto at = log.find("train.jsonl line " + std::to_string(line) + ":");
    ASSERT_NE(at, std::string::npos) << "line " << line << ":\n" << log;
    const auto end = log.find('\n', at);
    EXPECT_NE(log.substr(at, end - at).find(words), std::string::npos) << log.substr(at, end - at);
  };
  expect_line(2, "give the row a sound file in its 'audio' field, or use a video with a sound track");
  expect_line(3, "use a sound file as long as the video");
  expect_line(4, "tensor 'latents' has shape [2, 4, 4, 16] but the model expects [-1, -1, -1, 12]");
  expect_line(5, "the row has cached latents but no 'audio_latents', which the model needs with them");
  expect_line(6, "tensor 'audio_latents' has shape [6, 12] but the model expects [-1, 16]");
  EXPECT_EQ(log.find("train.jsonl line 1:"), std::string::npos) << log;
  EXPECT_EQ(log.find("train.jsonl line 7:"), std::string::npos) << log;

  // The tiny preset has no encoders: a media row is refused by the training step, naming the row.
  const auto tiny = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(tiny));
  std::ofstream(dir / "train.jsonl") << row({{"video", "good.mp4"}}) << row({{"video", "good.mp4"}})
                                     << row({{"video", "good.mp4"}}) << row({{"video", "good.mp4"}});
  tmp.write("tiny.toml", media_toml(tiny, 1));
  const auto r = yeto::test::train(tmp / "tiny.toml", tmp / "run");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("nava: row "), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("raw video needs the repository's Wan 2.2 VAE"), std::string::npos) << r.all();
}
