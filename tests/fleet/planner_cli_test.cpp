// `yeto-host launch plan --gpus TABLE` and `inspect --memory` on full-size models given by their
// configs alone (tests/fixtures/memory: FLUX.1-dev, Wan 2.1 T2V 14B; no weights anywhere): the
// inventory is exact and cheap, an H100 80 GB holds a bf16 Flux LoRA at 1024 x 1024, micro batch
// 1, and a 24 GB card needs fp8 storage and block swap for Wan 14B.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace yeto::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The tiny repository without its weights, with the full-size configs over it.
fs::path config_only_repo(const TempDir& tmp, const std::string& tiny, const std::string& full) {
  const fs::path out = tmp / full;
  fs::copy(fs::path(YETO_TEST_FIXTURES) / "repos" / tiny, out, fs::copy_options::recursive);
  for (auto it = fs::recursive_directory_iterator(out); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (name.find(".safetensors") != std::string::npos) fs::remove(it->path());
  }
  fs::copy(fs::path(YETO_TEST_FIXTURES) / "memory" / full, out,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return out;
}

json run_json(const std::vector<std::string>& args) {
  const auto r = run_host(args);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  return json::parse(r.out, nullptr, false);
}

TEST(PlannerCli, FluxDevBf16FitsAnH100At1024) {
  TempDir tmp;
  const fs::path repo = config_only_repo(tmp, "flux-tiny", "flux1-dev");
  const fs::path cfg = tmp.write("run.toml", "[model]\nid = " + json(repo.string()).dump() +
                                                 "\n[data]\nheight = 1024\nwidth = 1024\n[train]\nmicro_batch_size = 1\n");
  // The inventory: FLUX.1-dev's 11.9 B transformer parameters, T5-XXL's 4.76 B, CLIP-L and the VAE.
  const json mem = run_json({"inspect", "--memory", "--json", "--backend", "cuda", "--config", cfg.string()});
  ASSERT_TRUE(mem.is_object());
  EXPECT_GT(mem.at("base_params").get<double>(), 16.8e9);
  EXPECT_LT(mem.at("base_params").get<double>(), 16.95e9);
  EXPECT_EQ(mem.at("blocks"), 57);
  EXPECT_EQ(mem.at("image_tokens"), 4096);
  EXPECT_EQ(mem.at("compute_dtype"), "bf16");
  const fs::path table = tmp.write("gpus.toml",
                                   "[[gpu]]\nname = \"H100\"\nmemory_gb = 80\nprice = 2.49\ntflops = 989\n"
                                   "regions = [\"aws:us-east-1\"]\nmax_per_node = 1\n");
  const json plan = run_json({"launch", "plan", "--config", cfg.string(), "--gpus", table.string(), "--json"});
  ASSERT_TRUE(plan.is_object());
  ASSERT_FALSE(plan.at("chosen").is_null()) << plan.dump(2);
  const json& c = plan.at("chosen");
  EXPECT_EQ(c.at("shape"), "1xH100");
  EXPECT_EQ(c.at("storage"), "bf16");
  EXPECT_EQ(c.at("block_swap"), 0);
  EXPECT_LE(c.at("device_bytes").get<double>(), 0.9 * 80e9);
  EXPECT_EQ(plan.at("launch"), "yeto-host launch up --config " + cfg.string() +
                                   " --engine slurm --gpu aws:1xH100@us-east-1 --set model.storage=auto"
                                   " --set train.activation_checkpointing=" +
                                   (c.at("checkpointing").get<bool>() ? "true" : "false") +
                                   (plan.at("launch").get<std::string>().find("model.block_swap") != std::string::npos
                                        ? " --set model.block_swap=0"
                                        : ""));
}

TEST(PlannerCli, Wan14BOnA24GbCardNeedsFp8AndBlockSwap) {
  TempDir tmp;
  const fs::path repo = config_only_repo(tmp, "wan21-tiny", "wan21-t2v-14b");
  // Trained from cached latents and text embeddings, as such runs are: the repository lists the
  // VAE, the UMT5 encoder and its tokenizer as null, so the pipeline loads the transformer alone.
  json index = json::parse(read_text(repo / "model_index.json"));
  for (const char* c : {"vae", "text_encoder", "tokenizer"}) index[c] = {nullptr, nullptr};
  tmp.write("wan21-t2v-14b/model_index.json", index.dump(2));
  const fs::path cfg = tmp.write("run.toml", "[model]\nid = " + json(repo.string()).dump() +
                                                 "\n[data]\nheight = 480\nwidth = 832\nnum_frames = 33\n");
  const fs::path table = tmp.write("gpus.toml",
                                   "[[gpu]]\nname = \"RTX4090\"\nmemory_gb = 24\nprice = 0.69\ntflops = 165\nmax_per_node = 1\n");
  const json plan =
      run_json({"launch", "plan", "--config", cfg.string(), "--gpus", table.string(), "--cached-latents", "--json"});
  ASSERT_TRUE(plan.is_object());
  ASSERT_FALSE(plan.at("chosen").is_null()) << plan.dump(2);
  const json& c = plan.at("chosen");
  EXPECT_EQ(c.at("storage"), "fp8");
  EXPECT_TRUE(c.at("checkpointing").get<bool>());
  EXPECT_GT(c.at("block_swap").get<int>(), 0);
  EXPECT_LT(c.at("block_swap").get<int>(), 40);
  EXPECT_LE(c.at("device_bytes").get<double>(), 0.9 * 24e9);
  // Why the lighter measures were not enough: fp8 with checkpointing alone, and bf16.
  const std::string rejected = c.at("rejected").dump();
  EXPECT_NE(rejected.find("fp8, checkpointing: needs "), std::string::npos) << rejected;
  EXPECT_NE(rejected.find("bf16: needs "), std::string::npos) << rejected;
  // Without a GPU that fits, the shape is rejected with its need and the command fails.
  const fs::path small = tmp.write("small.toml", "[[gpu]]\nname = \"RTX3070\"\nmemory_gb = 8\nprice = 0.15\ntflops = 20\nmax_per_node = 1\n");
  const auto r = run_host({"launch", "plan", "--config", cfg.string(), "--gpus", small.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("1xRTX3070: does not fit 8 GB per GPU even at the leanest configuration"), std::string::npos) << r.all();
}

TEST(PlannerCli, WanTokensFollowTheRepositorysVae) {
  // Wan 2.1's VAE is 8x in space, Wan 2.2 TI2V-5B's 16x (scale_factor_spatial); the transformer
  // patchifies 2x2 more, and both are 4x in time: 9 frames of 64 x 64 -> 3 x 4 x 4 and 3 x 2 x 2.
  const fs::path repos = fs::path(YETO_TEST_FIXTURES) / "repos";
  for (const auto& [repo, tokens] : {std::pair<std::string, int>{"wan21-tiny", 48}, {"wan22-ti2v-tiny", 12}}) {
    const json m = run_json({"inspect", "--memory", "--json", (repos / repo).string(), "--height", "64", "--width", "64",
                             "--num-frames", "9"});
    ASSERT_TRUE(m.is_object()) << repo;
    EXPECT_EQ(m.at("image_tokens"), tokens) << repo;
  }
}

}  // namespace
}  // namespace yeto::test
