// sdk/examples/template as a plugin author uses it: the SDK installed into a prefix of its own,
// the template copied to a fresh directory and built there with only find_package(YetoSDK ...)
// (warnings as errors), signed with a freshly made publisher key that the run then trusts; then
// yeto-host makes a repository from its preset (seeded), trains its LoRA for 5 steps on the
// weights it loaded, exports the adapter from another directory and samples with it.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../learner/dataset.hpp"
#include "core/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "sdk_build.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace yeto::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<double> losses(const fs::path& run_dir) {
  std::vector<double> out;
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = json::parse(line);
    if (j.contains("loss")) out.push_back(j.at("loss").get<double>());
  }
  return out;
}

// The tensor names of a safetensors file, in file order.
std::vector<std::string> tensor_names(const fs::path& file) {
  const auto st = io::SafetensorsFile::open(file);
  std::vector<std::string> names;
  for (const auto& t : st.tensors()) names.push_back(t.name);
  return names;
}

TEST(PluginTemplate, BuiltOutOfTreeItIsADitFamilyThatYetoHostTrainsExportsAndSamples) {
  const InstalledSdk sdk = install_sdk(YETO_TEMPLATE_OOT_DIR);
  if (HasFatalFailure()) return;
  const fs::path shipped = sdk.prefix / "share/yeto/sdk/examples/template";
  ASSERT_TRUE(fs::exists(shipped / "CMakeLists.txt"));
  const fs::path src = sdk.root / "my-plugin";
  fs::copy(shipped, src, fs::copy_options::recursive);
  const fs::path plugins = build_against(sdk, src, "build", {"-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror"});
  if (HasFatalFailure()) return;
  ASSERT_TRUE(fs::exists(plugins / "template.so"));

  // The nn blocks and the kit are linked in and stay internal.
  const auto ours = own_exported_symbols(plugins / "template.so");
  ASSERT_EQ(ours.size(), 1u) << [&] {
    std::string all;
    for (const auto& s : ours) all += "  " + s + "\n";
    return all;
  }();
  EXPECT_TRUE(contains(ours[0], " T yeto_plugin_entry")) << ours[0];

  TempDir dir;
  const std::string dirs = "[plugins]\ndirs = [\"" + plugins.string() + "\"]\n";
  dir.write("untrusted.toml", dirs);
  dir.write("plugins.toml", dirs + "trusted_keys = [\"" + sdk.public_key.string() + "\"]\n[run]\nthreads = 1\n");
  const std::string plugins_toml = (dir / "plugins.toml").string();

  // Signed by a key nobody trusts yet: refused (22).
  auto r = run_host({"plugins", "info", "template", "--config", (dir / "untrusted.toml").string()});
  EXPECT_EQ(r.exit_code, 22) << r.all();
  r = run_host({"plugins", "info", "template", "--config", plugins_toml});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "TemplatePipeline")) << r.out;

  // init-model from the plugin's preset: the seed decides the weights.
  auto init = [&](const std::string& name, int seed) {
    const auto res = run_host({"init-model", "--config", plugins_toml, "--family", "template", "--preset", "tiny",
                               "--seed", std::to_string(seed), "--out", (dir / name).string()});
    EXPECT_EQ(res.exit_code, 0) << res.all();
    return read_file(dir / name / "transformer/diffusion_pytorch_model.safetensors");
  };
  const std::string w7 = init("repo7", 7), w7_again = init("repo7-again", 7), w0 = init("repo0", 0);
  if (HasFailure()) return;
  EXPECT_EQ(w7, w7_again) << "one seed, one checkpoint";
  EXPECT_NE(w7, w0) << "--seed must change the weights";
  for (const char* c : {"vae/config.json", "text_encoder/config.json", "tokenizer/vocab.json", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::exists(dir / "repo7" / c)) << c;
  const auto names = tensor_names(dir / "repo7/transformer/diffusion_pytorch_model.safetensors");
  EXPECT_NE(std::find(names.begin(), names.end(), "transformer_blocks.1.attn.to_q.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "time_text_embed.timestep_embedder.linear_1.weight"), names.end());

  // Five LoRA steps on raw images and captions (the host's VAE and CLIP encode them).
  learner::test::write_dataset(dir / "data", 8, {}, 32);
  auto train_toml = [&](const fs::path& repo, int steps) {
    return read_file(dir / "plugins.toml") + "[model]\nid = \"" + repo.string() +
           "\"\nadapter = \"template\"\nprecision = \"fp32\"\n"
           "[data]\npath = \"" + (dir / "data/train.jsonl").string() + "\"\nheight = 32\nwidth = 32\nworkers = 1\n"
           "[lora]\nr = 4\nalpha = 4.0\n"
           "[train]\nmax_steps = " + std::to_string(steps) + "\nmicro_batch_size = 2\ncheckpoint_every = 5\n"
           "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\nwarmup_steps = 1\n"
           "[diffusion]\nseed = 5\n";
  };
  dir.write("train.toml", train_toml(dir / "repo7", 5));
  r = run_host({"train", "--config", (dir / "train.toml").string(), "--output", (dir / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto curve = losses(dir / "run");
  ASSERT_EQ(curve.size(), 5u);
  for (double l : curve) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;

  // The loss is the loaded checkpoint's: the same run on the seed-0 repository starts elsewhere.
  dir.write("train0.toml", train_toml(dir / "repo0", 1));
  r = run_host({"train", "--config", (dir / "train0.toml").string(), "--output", (dir / "run0").string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_EQ(losses(dir / "run0").size(), 1u);
  EXPECT_NE(losses(dir / "run0")[0], curve[0]);

  // Export from another working directory: the run directory is self-contained.
  fs::create_directories(dir / "elsewhere");
  r = run_host({"export", "--checkpoint", (dir / "run").string(), "--output-dir", (dir / "adapter").string()},
               (dir / "elsewhere").string());
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto lora = tensor_names(dir / "adapter/adapter_model.safetensors");
  EXPECT_EQ(lora.size(), 2u * 4u * 2u) << "lora_A and lora_B of to_q, to_k, to_v, to_out.0 in 2 blocks";
  for (const auto& n : lora) EXPECT_TRUE(contains(n, ".attn.to_")) << n;

  // Sample with the adapter folded in: the seed decides the picture.
  auto sample = [&](int seed, const std::string& out) {
    const auto res = run_host({"sample", "--config", plugins_toml, "--model", (dir / "repo7").string(),
                               "--diffusion-adapter", "template", "--adapter-dir", (dir / "adapter").string(),
                               "--prompt", "a red horizontal gradient", "--seed", std::to_string(seed), "--steps", "3",
                               "--guidance", "2.0", "--height", "32", "--width", "32", "--output",
                               (dir / out).string()});
    EXPECT_EQ(res.exit_code, 0) << res.all();
    return fs::exists(dir / out) ? read_file(dir / out) : std::string();
  };
  const std::string a = sample(3, "a.png"), b = sample(3, "b.png"), c = sample(4, "c.png");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.substr(1, 3), "PNG");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace yeto::test
