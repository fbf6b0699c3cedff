// `yeto-host merge` as a user runs it: a bad --max-shard-size is a usage error (exit 2) naming
// the flag; a merge writes a valid sharded one-model directory. `export` and `sample` with a
// plugin that keeps its trained state in its own files (capability artifacts, the tinyden test
// plugin).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <random>

#include "core/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "io/weight_source.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {
const fs::path kLoraCase = fs::path(YETO_TEST_FIXTURES) / "parity" / "flux-lora";
const fs::path kFluxTiny = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";

// A learner run directory as `train` leaves it: checkpoints/latest -> step dir with
// trainable.safetensors under the canonical names, LoRA r 4 on the attention projections.
void write_learner_run(const fs::path& run) {
  const auto ws = yeto::io::WeightSource::open(kFluxTiny / "transformer");
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& n : ws.names()) {
    for (const char* t : {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight"}) {
      const std::string suffix = t;
      if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const auto shape = ws.locate(n).info->shape;
      const std::string m = "transformer." + n.substr(0, n.size() - 7);
      names.push_back(m + ".lora_A.weight");
      shapes.push_back({4, shape[1]});
      names.push_back(m + ".lora_B.weight");
      shapes.push_back({shape[0], 4});
    }
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<std::vector<float>> values;
  std::vector<yeto::io::SafetensorsEntry> entries;
  for (std::size_t i = 0; i < names.size(); ++i) {
    values.emplace_back(static_cast<std::size_t>(shapes[i][0] * shapes[i][1]));
    for (auto& v : values.back()) v = nd(rng);
  }
  for (std::size_t i = 0; i < names.size(); ++i)
    entries.push_back({names[i], yeto::io::DType::F32, shapes[i],
                       std::as_bytes(std::span<const float>(values[i]))});
  yeto::io::write_safetensors(run / "checkpoints" / "step-00000003" / "trainable.safetensors", entries);
  yeto::atomic_write(run / "checkpoints" / "latest", "step-00000003\n");
}
// A Diffusers directory the tinyden test plugin serves (one 4-channel YetoTinyDenoiser), a run
// file naming it, and a learner run whose checkpoint holds tinyden's trainable tensors (its
// whole denoiser: no LoRA, so no Diffusers or PEFT file can hold them).
struct TinyDenRun {
  yeto::test::TempDir t;
  TinyDenRun() {
    fs::create_directories(t / "model/transformer");
    t.write("model/model_index.json",
            R"({"_class_name": "YetoTinyPipeline", "transformer": ["yeto", "YetoTinyDenoiser"]})");
    t.write("model/transformer/config.json", R"({"_class_name": "YetoTinyDenoiser", "in_channels": 4})");
    std::vector<float> w(16, 0.1f), b(4, 0.0f), e(4, 0.0f);
    auto bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); };
    yeto::io::write_safetensors(t / "model/transformer/diffusion_pytorch_model.safetensors",
                                {{"proj.weight", yeto::io::DType::F32, {4, 4}, bytes(w)},
                                 {"proj.bias", yeto::io::DType::F32, {4}, bytes(b)},
                                 {"time_embed", yeto::io::DType::F32, {4}, bytes(e)}},
                                {});
    t.write("run.toml", "[model]\nid = \"" + (t / "model").string() +
                            "\"\nadapter = \"tinyden\"\n[run]\ndevice = \"cpu\"\nthreads = 1\n");
    // The trained values: a strong channel mix that moves every generated pixel.
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = (i % 5 == 0 ? -2.0f : 0.3f);
    b = {0.5f, -0.5f, 0.25f, 0.0f};
    e = {1.0f, -1.0f, 0.5f, 0.0f};
    yeto::io::write_safetensors(t / "run/checkpoints/step-00000004/trainable.safetensors",
                                {{"transformer.time_embed", yeto::io::DType::F32, {4}, bytes(e)},
                                 {"transformer.proj.weight", yeto::io::DType::F32, {4, 4}, bytes(w)},
                                 {"transformer.proj.bias", yeto::io::DType::F32, {4}, bytes(b)}});
    yeto::atomic_write(t / "run/checkpoints/latest", "step-00000004\n");
  }
  yeto::test::ProcessResult sample(const std::string& output, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"sample", "--config", (t / "run.toml").string(), "--prompt", "a red cat",
                                     "--height", "16", "--width", "16", "--steps", "3", "--seed", "11",
                                     "--output", (t / output).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return yeto::test::run_host(args);
  }
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Sets the first float32 value of a safetensors file to NaN (its tensors hold float32 here).
void poison_first_value(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  std::uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), sizeof header);
  ASSERT_TRUE(f.good());
  const auto meta = nlohmann::json::parse(yeto::test::read_text(file).substr(8, header));
  for (const auto& [name, t] : meta.items()) {
    if (name == "__metadata__") continue;
    ASSERT_EQ(t.at("dtype"), "F32") << name;
    const std::uint64_t at = 8 + header + t.at("data_offsets")[0].get<std::uint64_t>();
    const float nan = std::nanf("");
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
    ASSERT_TRUE(f.good());
    return;
  }
  FAIL() << file << " holds no tensor";
}

}  // namespace

TEST(PluginArtifacts, ExportWritesThePluginsOwnFilesAndSampleLoadsThem) {
  TinyDenRun run;
  const fs::path out = run.t / "adapter";
  auto r = yeto::test::run_host({"export", "--config", (run.t / "run.toml").string(), "--checkpoint",
                                 (run.t / "run").string(), "--output-dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.out.find("3 trained tensors through plugin 'tinyden'"), std::string::npos) << r.out;
  // No LoRA: the record and the plugin's folder, written by save_artifact with the record as metadata.
  EXPECT_FALSE(fs::exists(out / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(out / "pytorch_lora_weights.safetensors"));
  const auto record = nlohmann::json::parse(file_bytes(out / "yeto_diffusion_adapter.json"));
  EXPECT_EQ(record.at("artifact"), "plugin");
  ASSERT_EQ(record.at("trainable").size(), 3u);
  EXPECT_EQ(record.at("trainable")[0].at("name"), "transformer.time_embed");
  EXPECT_TRUE(fs::is_regular_file(out / "plugin/tinyden_weights.pt"));
  const auto meta = nlohmann::json::parse(file_bytes(out / "plugin/tinyden_meta.json"));
  EXPECT_EQ(meta.at("plugin").at("name"), "tinyden");
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().rfind(".plugin.tmp", 0), std::string::npos) << "left behind: " << e.path();

  // Sampling: the base model, then with the adapter directory: the plugin reads its files back
  // (the trained denoiser) and the picture changes; the same call gives the same bytes.
  r = run.sample("base.png");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = run.sample("tuned.png", {"--adapter-dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("plugin 'tinyden' loaded its files from " + (out / "plugin").string()), std::string::npos)
      << r.all();
  EXPECT_EQ(r.all().find("folded"), std::string::npos) << r.all();  // no LoRA file to fold
  r = run.sample("tuned-again.png", {"--adapter-dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const std::string base = file_bytes(run.t / "base.png"), tuned = file_bytes(run.t / "tuned.png");
  ASSERT_FALSE(base.empty());
  EXPECT_NE(base, tuned);
  EXPECT_EQ(tuned, file_bytes(run.t / "tuned-again.png"));

  // A damaged plugin folder fails the command naming the plugin's call, and writes no picture.
  fs::remove(out / "plugin/tinyden_weights.pt");
  r = run.sample("broken.png", {"--adapter-dir", out.string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("load_artifact"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(run.t / "broken.png"));
}

TEST(ExportCommand, ExportsALearnerRunThroughTheFluxPluginAndNamesMismatches) {
  yeto::test::TempDir tmp;
  write_learner_run(tmp / "run");
  const std::vector<std::string> common = {"export", "--checkpoint", (tmp / "run").string(), "--model",
                                           kFluxTiny.string(), "--diffusion-adapter", "flux",
                                           "--lora-targets", "to_q,to_k,to_v,to_out.0", "--lora-alpha", "8"};
  auto args = common;
  args.insert(args.end(), {"--lora-r", "8", "--output-dir", (tmp / "bad").string()});
  const auto bad = yeto::test::run_host(args);
  EXPECT_EQ(bad.exit_code, 30) << bad.all();
  EXPECT_NE(bad.all().find("lora.r (--lora-r)"), std::string::npos) << bad.all();
  EXPECT_NE(bad.all().find("pass --lora-r 4"), std::string::npos) << bad.all();
  EXPECT_FALSE(fs::exists(tmp / "bad"));

  args = common;
  args.insert(args.end(), {"--lora-r", "4", "--output-dir", (tmp / "adapter").string(), "--format", "comfyui"});
  const auto ok = yeto::test::run_host(args);
  ASSERT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_NE(ok.out.find("exported 14 LoRA modules of transformer"), std::string::npos) << ok.all();
  for (const char* f : {"pytorch_lora_weights.safetensors", "adapter_config.json", "adapter_model.safetensors",
                        "yeto_diffusion_adapter.json", "comfyui_lora.safetensors"})
    EXPECT_TRUE(fs::exists(tmp / "adapter" / f)) << f;
  const auto record = nlohmann::json::parse(yeto::test::read_text(tmp / "adapter" / "yeto_diffusion_adapter.json"));
  EXPECT_EQ(record.at("plugin").at("name"), "flux");
  EXPECT_TRUE(record.at("plugin").at("signature_verified").get<bool>());
  EXPECT_EQ(record.at("base_model").at("class_name"), "FluxTransformer2DModel");
  EXPECT_EQ(record.at("trainable_modules").size(), 14u);
  EXPECT_FALSE(record.at("base_model").at("components").at("transformer").get<std::string>().empty());

  // The exported adapter merges back into its base; a different --model is refused.
  const auto merged = yeto::test::run_host({"merge", "--model", kFluxTiny.string(), "--adapter-dir",
                                            (tmp / "adapter").string(), "--max-shard-size", "200KB", "--output-dir",
                                            (tmp / "merged").string()});
  ASSERT_EQ(merged.exit_code, 0) << merged.all();
  EXPECT_NO_THROW(yeto::io::WeightSource::open(tmp / "merged" / "transformer").validate());
  const auto other = yeto::test::run_host({"merge", "--model", kLoraCase.string(), "--adapter-dir",
                                           (tmp / "adapter").string(), "--output-dir", (tmp / "m2").string()});
  EXPECT_EQ(other.exit_code, 30) << other.all();
  EXPECT_NE(other.all().find("trained on another base"), std::string::npos) << other.all();

  // A NaN in the adapter is refused by merge and sample, naming the file and the tensor, and
  // neither writes anything.
  fs::copy(tmp / "adapter", tmp / "nan", fs::copy_options::recursive);
  poison_first_value(tmp / "nan" / "adapter_model.safetensors");
  const auto nan_merge = yeto::test::run_host({"merge", "--model", kFluxTiny.string(), "--adapter-dir",
                                               (tmp / "nan").string(), "--output-dir", (tmp / "nan-merged").string()});
  EXPECT_EQ(nan_merge.exit_code, 30) << nan_merge.all();
  EXPECT_NE(nan_merge.all().find("adapter_model.safetensors: tensor transformer."), std::string::npos)
      << nan_merge.all();
  EXPECT_NE(nan_merge.all().find("holds a non-finite value"), std::string::npos) << nan_merge.all();
  EXPECT_FALSE(fs::exists(tmp / "nan-merged"));
  const auto nan_sample = yeto::test::run_host(
      {"sample", "--model", kFluxTiny.string(), "--diffusion-adapter", "flux", "--adapter-dir", (tmp / "nan").string(),
       "--prompt", "a cat", "--height", "32", "--width", "32", "--steps", "1", "--output", (tmp / "nan.png").string()});
  EXPECT_EQ(nan_sample.exit_code, 30) << nan_sample.all();
  EXPECT_NE(nan_sample.all().find("holds a non-finite value"), std::string::npos) << nan_sample.all();
  EXPECT_FALSE(fs::exists(tmp / "nan.png"));
}

TEST(MergeCommand, RefusesBadShardSizesAndWritesShards) {
  yeto::test::TempDir tmp;
  const auto bad = yeto::test::run_host({"merge", "--model", kLoraCase.string(), "--adapter-dir",
                                         (kLoraCase / "lora_peft").string(), "--max-shard-size", "2XB", "--output-dir",
                                         (tmp / "o").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.all();
  EXPECT_NE(bad.all().find("--max-shard-size '2XB'"), std::string::npos) << bad.all();
  EXPECT_FALSE(fs::exists(tmp / "o"));

  const auto ok = yeto::test::run_host({"merge", "--model", kLoraCase.string(), "--adapter-dir",
                                        (kLoraCase / "lora_peft").string(), "--max-shard-size", "100KB", "--output-dir",
                                        (tmp / "o").string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_NE(ok.out.find("7 LoRA modules merged"), std::string::npos) << ok.all();
  const auto ws = yeto::io::WeightSource::open(tmp / "o");
  EXPECT_NO_THROW(ws.validate());
  EXPECT_GE(ws.files().size(), 4u) << "320 KB under a 100 KB cap";
  EXPECT_FALSE(ws.index_file().empty());

  const auto again = yeto::test::run_host({"merge", "--model", kLoraCase.string(), "--adapter-dir",
                                           (kLoraCase / "lora_peft").string(), "--output-dir", (tmp / "o").string()});
  EXPECT_EQ(again.exit_code, 2) << again.all();
  EXPECT_NE(again.all().find("not empty"), std::string::npos) << again.all();

  const auto missing = yeto::test::run_host({"merge", "--model", kLoraCase.string(), "--adapter-dir",
                                             (tmp / "nope").string(), "--output-dir", (tmp / "p").string()});
  EXPECT_EQ(missing.exit_code, 31) << missing.all();
}
