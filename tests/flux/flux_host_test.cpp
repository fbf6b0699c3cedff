// The flux plugin through yeto-host: trusted loading, the end-to-end parity case, the refusal
// of an unsigned copy, and a save -> load round trip of the tiny repository.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepos = fs::path(YETO_TEST_FIXTURES) / "repos";
using yeto::test::read_text;

std::vector<std::string> sample_args(const fs::path& repo, const fs::path& out) {
  return {"sample", "--model", repo.string(), "--diffusion-adapter", "flux", "--prompt", "a red circle on a white background", "--seed", "42",
          "--steps", "4", "--guidance", "3.5", "--height", "64", "--width", "64", "--max-sequence-length", "32",
          "--output", out.string()};
}

}  // namespace

TEST(FluxHost, PluginIsBuiltSignedAndVerifies) {
  ASSERT_NO_FATAL_FAILURE(yeto::test::verify_staged_plugin("flux"));
}

TEST(FluxHost, CheckParityReproducesTheRecordedPipelineRun) {
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(yeto::test::run_check_parity({kRepos / "flux-tiny-reference"}, &j));
  ASSERT_EQ(j.size(), 1u);
  const auto& c = j[0];
  EXPECT_EQ(c.at("kind"), "pipeline_end_to_end");
  EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
  std::ifstream in(kRepos / "flux-tiny-reference" / "case.json");
  const auto case_json = nlohmann::json::parse(in);
  EXPECT_EQ(c.at("comparisons").size(), case_json.at("compare").size());
  for (const auto& cmp : c.at("comparisons")) {
    std::printf("  %-28s max abs %.3g (atol %.3g)\n", cmp.at("name").get<std::string>().c_str(),
                cmp.at("max_abs").get<double>(), cmp.at("atol").get<double>());
    EXPECT_TRUE(cmp.at("pass").get<bool>()) << cmp.dump();
  }
}

TEST(FluxHost, UnsignedCopyIsRefused) {
  yeto::test::TempDir tmp;
  // Then the signed original next to it loads.
  yeto::test::expect_unsigned_copy_refused("flux", sample_args(kRepos / "flux-tiny", tmp / "out.png"), tmp / "out.png",
                                           tmp, /*then_signed_loads=*/true);
}

TEST(FluxHost, SavedAndReloadedRepositoryGivesIdenticalOutputs) {
  // Save: the sharded transformer of the loaded tiny repository as one safetensors file in a
  // copy of the repository; load: sample from both; the pictures must be bit-identical.
  yeto::test::TempDir tmp;
  const fs::path copy = tmp / "flux-tiny-saved";
  fs::copy(kRepos / "flux-tiny", copy, fs::copy_options::recursive);
  std::vector<std::pair<std::string, at::Tensor>> all;
  std::map<std::string, at::Tensor> originals;
  for (const auto& e : fs::directory_iterator(kRepos / "flux-tiny" / "transformer")) {
    if (e.path().extension() != ".safetensors") continue;
    for (auto& [n, t] : yeto::io::load_safetensors(e.path())) originals.emplace(n, t);
  }
  for (auto& [n, t] : originals) all.emplace_back(n, t);
  for (const auto& e : fs::directory_iterator(copy / "transformer"))
    if (e.path().filename() != "config.json") fs::remove(e.path());
  yeto::io::save_safetensors(copy / "transformer" / "diffusion_pytorch_model.safetensors", all, {{"format", "pt"}});
  const auto reloaded = yeto::io::load_safetensors(copy / "transformer" / "diffusion_pytorch_model.safetensors");
  ASSERT_EQ(reloaded.size(), originals.size());
  for (const auto& [n, t] : originals) EXPECT_TRUE(at::equal(reloaded.at(n), t)) << n;

  const auto a = yeto::test::run_host(sample_args(kRepos / "flux-tiny", tmp / "a.png"));
  ASSERT_EQ(a.exit_code, 0) << a.all();
  const auto b = yeto::test::run_host(sample_args(copy, tmp / "b.png"));
  ASSERT_EQ(b.exit_code, 0) << b.all();
  EXPECT_EQ(read_text(tmp / "a.png"), read_text(tmp / "b.png"));
}

TEST(FluxHost, CheckParityRunsTheTransformerCasesThroughThePlugin) {
  // The `model` kind: FluxTransformer2DModel built by the plugin's registered constructor,
  // forward, loss and named gradients against the Diffusers recordings.
  const auto fixtures = fs::path(YETO_TEST_FIXTURES) / "parity";
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(
      yeto::test::run_check_parity({fixtures / "flux-transformer", fixtures / "flux-transformer-guidance"}, &j));
  ASSERT_EQ(j.size(), 2u);
  for (const auto& c : j) {
    EXPECT_EQ(c.at("kind"), "model");
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    EXPECT_EQ(c.at("comparisons").size(), 7u) << c.dump(1);  // sample, loss, 5 gradients
    for (const auto& cmp : c.at("comparisons"))
      std::printf("  %-26s %-52s max abs %.3g\n", c.at("case").get<std::string>().c_str(),
                  cmp.at("name").get<std::string>().c_str(), cmp.at("max_abs").get<double>());
  }
}
