// `yeto-host sample` end to end on the tiny FLUX.1 repository: the recorded reference picture
// from its prompt and seed alone, bit-identical reruns, one PNG per prompt, and the errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <stb_image.h>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "sample/png.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRepo = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";
const fs::path kReference = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny-reference";
const char* kPrompt = "a red circle on a white background";

std::vector<std::string> args(const fs::path& out, const std::string& seed = "42") {
  return {"sample",  "--model",  kRepo.string(), "--diffusion-adapter",   "flux", "--prompt", kPrompt,
          "--seed",  seed,       "--steps",      "4",                     "--guidance", "3.5", "--height",
          "64",      "--width",  "64",           "--max-sequence-length", "32",   "--output", out.string()};
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The PNG as a [H, W, 3] uint8 tensor.
at::Tensor decode(const fs::path& p) {
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(p.string().c_str(), &w, &h, &n, 3);
  if (!px) return {};
  auto t = torch::from_blob(px, {h, w, 3}, torch::kUInt8).clone();
  stbi_image_free(px);
  return t;
}

}  // namespace

TEST(Sample, ReproducesTheReferenceImageFromPromptAndSeed) {
  yeto::test::TempDir tmp;
  const auto r = yeto::test::run_host(args(tmp / "ref.png"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto img = decode(tmp / "ref.png");
  ASSERT_TRUE(img.defined());
  ASSERT_EQ(img.sizes(), (std::vector<int64_t>{64, 64, 3}));
  // Diffusers' numpy_to_pil of the recorded image_postprocessed: (x * 255).round().
  const auto expected = yeto::io::load_safetensors(kReference / "expected.safetensors").at("image_postprocessed")[0];
  const auto want = (expected * 255).round().to(torch::kInt).permute({1, 2, 0});
  const auto diff = (img.to(torch::kInt) - want).abs();
  const int max_diff = diff.max().item<int>();
  std::printf("  max |png - reference| = %d / 255 over %lld pixels, %lld differ\n", max_diff,
              static_cast<long long>(diff.numel() / 3), static_cast<long long>(diff.gt(0).sum().item<int64_t>()));
  // The reference's tolerance on image_postprocessed is ~1e-3, far below one 8-bit level, so
  // only values sitting on a rounding boundary may move by one level.
  EXPECT_LE(max_diff, 1);
  EXPECT_LT(diff.gt(0).sum().item<int64_t>(), diff.numel() / 100);
}

TEST(Sample, SameSeedIsBitIdenticalAndAnotherSeedIsNot) {
  yeto::test::TempDir tmp;
  ASSERT_EQ(yeto::test::run_host(args(tmp / "a.png")).exit_code, 0);
  ASSERT_EQ(yeto::test::run_host(args(tmp / "b.png")).exit_code, 0);
  ASSERT_EQ(yeto::test::run_host(args(tmp / "c.png", "7")).exit_code, 0);
  EXPECT_EQ(read_bytes(tmp / "a.png"), read_bytes(tmp / "b.png"));
  EXPECT_NE(read_bytes(tmp / "a.png"), read_bytes(tmp / "c.png"));
}

TEST(Sample, PromptsFileWritesOnePngPerPrompt) {
  yeto::test::TempDir tmp;
  const auto file = tmp.write("prompts.txt", std::string(kPrompt) + "\n\na blue square\r\n");
  auto a = args(tmp / "out.png");
  a[5] = "--prompts";
  a[6] = file.string();
  const auto r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "out.png"));
  ASSERT_TRUE(fs::exists(tmp / "out-000.png"));
  ASSERT_TRUE(fs::exists(tmp / "out-001.png"));
  EXPECT_EQ(decode(tmp / "out-001.png").sizes(), (std::vector<int64_t>{64, 64, 3}));
  ASSERT_EQ(yeto::test::run_host(args(tmp / "single.png")).exit_code, 0);
  EXPECT_EQ(read_bytes(tmp / "out-000.png"), read_bytes(tmp / "single.png"));  // per prompt, same seed
  EXPECT_NE(read_bytes(tmp / "out-000.png"), read_bytes(tmp / "out-001.png"));
}

TEST(Sample, ErrorsNameWhatIsWrong) {
  yeto::test::TempDir tmp;
  auto a = args(tmp / "x.png");
  a.insert(a.end(), {"--adapter-dir", tmp.path().string()});
  auto r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 3) << r.all();
  EXPECT_NE(r.all().find("not in this build"), std::string::npos) << r.all();

  r = yeto::test::run_host(
      {"sample", "--model", kRepo.string(), "--diffusion-adapter", "flux", "--output", (tmp / "x.png").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--prompt"), std::string::npos) << r.all();

  a = args(tmp / "x.png");
  a[8] = "forty-two";
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("--seed"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "x.png"));
}

TEST(SamplePng, EncodesAndDecodesBack) {
  yeto::test::TempDir tmp;
  std::vector<std::uint8_t> rgb(5 * 7 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 37);
  yeto::sample::write_png(tmp / "t.png", rgb, 5, 7);
  const auto img = decode(tmp / "t.png");
  ASSERT_EQ(img.sizes(), (std::vector<int64_t>{5, 7, 3}));
  EXPECT_TRUE(std::equal(rgb.begin(), rgb.end(), img.data_ptr<std::uint8_t>()));
  EXPECT_THROW(yeto::sample::encode_png(rgb, 5, 8), std::exception);
  EXPECT_EQ(yeto::sample::output_path("d/o.png", 0, 1), fs::path("d/o.png"));
  EXPECT_EQ(yeto::sample::output_path("d/o.png", 12, 20), fs::path("d/o-012.png"));
}
