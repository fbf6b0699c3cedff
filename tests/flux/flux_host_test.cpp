// The flux plugin through yeto-host: trusted loading, the end-to-end parity case, the refusal
// of an unsigned copy, and a save -> load round trip of the tiny repository.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepos = fs::path(YETO_TEST_FIXTURES) / "repos";
const fs::path kStagePlugins = fs::path(YETO_BUILD_DIR) / "stage" / "plugins";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> sample_args(const fs::path& repo, const fs::path& out) {
  return {"sample", "--model", repo.string(), "--diffusion-adapter", "flux", "--prompt", "a red circle on a white background", "--seed", "42",
          "--steps", "4", "--guidance", "3.5", "--height", "64", "--width", "64", "--max-sequence-length", "32",
          "--output", out.string()};
}

}  // namespace

TEST(FluxHost, PluginIsBuiltSignedAndVerifies) {
  for (const char* f : {"flux.so", "flux.yeto.json", "flux.yeto.sig"})
    ASSERT_TRUE(fs::exists(kStagePlugins / f)) << (kStagePlugins / f);
  const auto r = yeto::test::run_host({"plugins", "verify", (kStagePlugins / "flux.so").string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
}

TEST(FluxHost, CheckParityReproducesTheRecordedPipelineRun) {
  const auto r = yeto::test::run_host({"check-parity", (kRepos / "flux-tiny-reference").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto j = nlohmann::json::parse(r.out).at("cases");
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
  fs::create_directories(tmp / "plugins");
  fs::copy_file(kStagePlugins / "flux.so", tmp / "plugins/flux.so");
  fs::copy_file(kStagePlugins / "flux.yeto.json", tmp / "plugins/flux.yeto.json");
  auto args = sample_args(kRepos / "flux-tiny", tmp / "out.png");
  args.insert(args.end(), {"--set", "plugins.dirs=" + (tmp / "plugins").string()});
  const auto r = yeto::test::run_host(args);
  EXPECT_EQ(r.exit_code, 20) << r.all();
  EXPECT_NE(r.all().find("unsigned"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "out.png"));
  // The signed original next to it loads.
  fs::copy_file(kStagePlugins / "flux.yeto.sig", tmp / "plugins/flux.yeto.sig");
  const auto ok = yeto::test::run_host(args);
  EXPECT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_TRUE(fs::exists(tmp / "out.png"));
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
  EXPECT_EQ(read_bytes(tmp / "a.png"), read_bytes(tmp / "b.png"));
}

TEST(FluxHost, CheckParityRunsTheTransformerCasesThroughThePlugin) {
  // The `model` kind: FluxTransformer2DModel built by the plugin's registered constructor,
  // forward, loss and named gradients against the Diffusers recordings.
  const auto fixtures = fs::path(YETO_TEST_FIXTURES) / "parity";
  const auto r = yeto::test::run_host({"check-parity", (fixtures / "flux-transformer").string(),
                                       (fixtures / "flux-transformer-guidance").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto j = nlohmann::json::parse(r.out).at("cases");
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
