// `yeto-host merge` as a user runs it: a bad --max-shard-size is a usage error (exit 2) naming
// the flag; a merge writes a valid sharded one-model directory.
#include <gtest/gtest.h>

#include <filesystem>

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
}  // namespace

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
