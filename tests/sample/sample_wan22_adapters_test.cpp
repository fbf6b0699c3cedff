// Wan 2.2's two experts with one adapter each, in the Diffusers convention: the low-noise
// expert's pytorch_lora_weights.safetensors names its keys "transformer." (Diffusers loads it
// with load_into_transformer_2=True) and Yeto's record keeps transformer_2. `sample` with both
// adapter directories equals the repository both were merged into; the bare Diffusers files
// (no record) give the same picture with DIR:COMPONENT and are refused without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "artifacts/adapter.hpp"
#include "io/tensors.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kWan22 = fs::path(YETO_TEST_FIXTURES) / "repos" / "wan22-tiny";

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An adapter for one expert on every attention projection of the tiny Wan transformer, written
// as `yeto-host export` writes it (Diffusers + PEFT + record).
void write_expert_adapter(const fs::path& dir, const std::string& component, std::uint64_t seed) {
  std::map<std::string, at::Tensor> weights;
  for (const auto& e : fs::directory_iterator(kWan22 / component))
    if (e.path().extension() == ".safetensors")
      for (auto& [n, t] : yeto::io::load_safetensors(e.path())) weights.emplace(n, t);
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  yeto::artifacts::AdapterExport x;
  x.component = component;
  x.r = 2;
  x.alpha = 4;
  x.base_model_class = "WanTransformer3DModel";
  for (const auto& [n, w] : weights) {
    const bool proj = n.find(".attn1.to_") != std::string::npos || n.find(".attn2.to_") != std::string::npos;
    if (!proj || n.size() < 7 || n.compare(n.size() - 7, 7, ".weight") != 0) continue;
    yeto::artifacts::LoraModule m;
    m.A = at::randn({2, w.size(1)}, g) * 0.5;
    m.B = at::randn({w.size(0), 2}, g) * 0.5;
    x.modules.emplace(n.substr(0, n.size() - 7), m);
  }
  ASSERT_EQ(x.modules.size(), 16u) << component;  // 2 blocks x 2 attentions x (q, k, v, out)
  yeto::artifacts::write_adapter_dir(dir, x);
}

std::vector<std::string> sample_args(const fs::path& model, const fs::path& out) {
  return {"sample", "--model", model.string(), "--diffusion-adapter", "wan", "--prompt", "a boat", "--steps", "2",
          "--height", "32", "--width", "32", "--num-frames", "1", "--max-sequence-length", "16", "--output",
          out.string()};
}

}  // namespace

TEST(SampleWan22Adapters, BothExpertsDiffusersFilesFoldIntoTheRightExpert) {
  yeto::test::TempDir tmp;
  ASSERT_NO_FATAL_FAILURE(write_expert_adapter(tmp / "high", "transformer", 1));
  ASSERT_NO_FATAL_FAILURE(write_expert_adapter(tmp / "low", "transformer_2", 2));
  // The low-noise expert's Diffusers file uses the keys Diffusers' Wan loader reads.
  for (const auto& [name, t] : yeto::io::load_safetensors(tmp / "low" / "pytorch_lora_weights.safetensors"))
    EXPECT_EQ(name.rfind("transformer.blocks.", 0), 0u) << name;
  // The bare Diffusers files, as they are shared without our record.
  for (const char* d : {"high", "low"}) {
    fs::create_directories(tmp / (std::string("bare-") + d));
    fs::copy_file(tmp / d / "pytorch_lora_weights.safetensors",
                  tmp / (std::string("bare-") + d) / "pytorch_lora_weights.safetensors");
  }

  auto run = [&](const fs::path& model, const std::string& out, const std::vector<std::string>& adapters) {
    auto a = sample_args(model, tmp / out);
    for (const auto& d : adapters) a.insert(a.end(), {"--adapter-dir", d});
    return yeto::test::run_host(a);
  };
  const std::string high = (tmp / "high").string(), low = (tmp / "low").string();
  const std::string bare_high = (tmp / "bare-high").string(), bare_low = (tmp / "bare-low").string();

  auto r = run(kWan22, "base.png", {});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = run(kWan22, "both.png", {high, low});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("16 LoRA modules of transformer from " + high), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("16 LoRA modules of transformer_2 from " + low), std::string::npos) << r.all();
  EXPECT_NE(bytes_of(tmp / "both.png"), bytes_of(tmp / "base.png"));

  // Record-less files: the expert is chosen with DIR:COMPONENT; the same picture.
  r = run(kWan22, "bare.png", {bare_high + ":transformer", bare_low + ":transformer_2"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(bytes_of(tmp / "bare.png"), bytes_of(tmp / "both.png"));
  // Swapped experts give another picture (the routing matters).
  r = run(kWan22, "swapped.png", {bare_high + ":transformer_2", bare_low + ":transformer"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(bytes_of(tmp / "swapped.png"), bytes_of(tmp / "both.png"));

  // Without a choice a record-less file is ambiguous on a two-expert model: refused, saying what to pass.
  r = run(kWan22, "x.png", {bare_high, bare_low});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_NE(r.all().find("pass --adapter-dir " + bare_high + ":transformer or " + bare_high + ":transformer_2"),
            std::string::npos)
      << r.all();
  // A choice that contradicts the record is refused; a component the model lacks is a usage error.
  r = run(kWan22, "x.png", {low + ":transformer"});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_NE(r.all().find("records the adapter for transformer_2"), std::string::npos) << r.all();
  r = run(kWan22, "x.png", {bare_low + ":unet"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("the model's denoisers are transformer, transformer_2"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.png"));

  // merge: the high-noise directory, then the low-noise bare file with DIR:transformer_2, gives a
  // repository that samples (without adapters) to the same picture; the bare file alone is refused.
  r = yeto::test::run_host({"merge", "--model", kWan22.string(), "--adapter-dir", bare_low, "--output-dir",
                            (tmp / "refused").string()});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_NE(r.all().find(bare_low + ":transformer_2"), std::string::npos) << r.all();
  r = yeto::test::run_host({"merge", "--model", kWan22.string(), "--adapter-dir", high, "--output-dir",
                            (tmp / "merged-high").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::run_host({"merge", "--model", (tmp / "merged-high").string(), "--adapter-dir",
                            bare_low + ":transformer_2", "--output-dir", (tmp / "merged").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("transformer_2: 16 LoRA modules merged"), std::string::npos) << r.all();
  r = run(tmp / "merged", "merged.png", {});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(bytes_of(tmp / "merged.png"), bytes_of(tmp / "both.png"));
}
