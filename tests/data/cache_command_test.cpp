// `yeto-host cache` end to end with the tinyden test plugin (its encode_media /
// encode_conditioning hooks stand in for a VAE and a text encoder): what is encoded, what a
// re-run skips, resuming, the cache as a data source, and contract mismatches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/cache_builder.hpp"
#include "data/cache_contract.hpp"
#include "data_test_util.hpp"
#include "io/safetensors.hpp"
#include "support/process.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;
using ::testing::HasSubstr;

// A Diffusers directory the tinyden test plugin serves: one 4-channel YetoTinyDenoiser.
void write_tinyden_model(const fs::path& dir, float scale) {
  fs::create_directories(dir / "transformer");
  std::ofstream(dir / "model_index.json") << R"({"_class_name": "YetoTemplatePipeline", "transformer": ["yeto", "YetoTinyDenoiser"]})";
  std::ofstream(dir / "transformer/config.json") << R"({"_class_name": "YetoTinyDenoiser", "in_channels": 4})";
  std::vector<float> w(16), b(4), t(4);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * static_cast<float>(i % 5);
  for (std::size_t i = 0; i < 4; ++i) b[i] = t[i] = scale;
  auto bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); };
  io::write_safetensors(dir / "transformer/diffusion_pytorch_model.safetensors",
                        {{"proj.weight", io::DType::F32, {4, 4}, bytes(w)},
                         {"proj.bias", io::DType::F32, {4}, bytes(b)},
                         {"time_embed", io::DType::F32, {4}, bytes(t)}},
                        {});
}

struct CacheRun {
  TempDir t;
  fs::path conf, cache;
  CacheRun() {
    write_tinyden_model(t / "model", 0.1f);
    test::solid_png(t / "ds/a.png", 12, 10, {10, 20, 30, 255});
    test::solid_png(t / "ds/b.png", 12, 10, {40, 50, 60, 255});
    test::solid_png(t / "ds/c.png", 12, 10, {70, 80, 90, 255});
    t.write("ds/train.jsonl",
            "{\"image\": \"a.png\", \"prompt\": \"a red cat\"}\n"
            "{\"image\": \"b.png\", \"prompt\": \"b\"}\n"
            "{\"image\": \"c.png\", \"prompt\": \"\"}\n");
    t.write("run.toml",
            "[model]\nid = \"" + (t / "model").string() + "\"\nadapter = \"tinyden\"\n"
            "[run]\ndevice = \"cpu\"\nthreads = 1\n"
            "[data]\npath = \"ds\"\nheight = 8\nwidth = 8\ncache_rows_per_shard = 2\ncache_batch_size = 2\n");
    conf = t / "run.toml";
    cache = t / "cache";
  }
  json run(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"cache", "--config", conf.string(), "--output", cache.string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    last = test::run_host(args);
    EXPECT_EQ(last.exit_code, 0) << last.all();
    const auto brace = last.out.find('{');
    return brace == std::string::npos ? json() : json::parse(last.out.substr(brace));
  }
  test::ProcessResult last;
};

TEST(CacheCommand, EncodesEveryRowThenOnlyWhatChanged) {
  CacheRun c;
  json r = c.run();
  EXPECT_EQ(r["computed"], 3);
  EXPECT_EQ(r["skipped"], 0);
  EXPECT_EQ(r["rows"], 3);
  EXPECT_THAT(c.last.all(), HasSubstr("rows/s, ETA"));  // progress on the log

  // The contract: the model, its component hash, the preprocessing and the per-row tensors
  // tinyden's hooks produce (2x2-pooled 8x8 pixels, a 4-wide prompt embedding).
  const json contract = json::parse(test::read_bytes(c.cache / kCacheContractFile));
  EXPECT_EQ(contract["format"], kCacheFormat);
  EXPECT_EQ(contract["model"]["id"], (c.t / "model").string());
  EXPECT_EQ(contract["components"]["transformer"].get<std::string>().size(), 64u);
  EXPECT_EQ(contract["preprocessing"]["height"], 8);
  EXPECT_EQ(contract["tensors"]["latents"]["dtype"], "float32");
  EXPECT_EQ(contract["tensors"]["latents"]["shape"], json({4, 4, 4}));
  EXPECT_EQ(contract["tensors"]["prompt_embeds"]["shape"], json({4}));
  EXPECT_EQ(read_cache_index(c.cache).size(), 3u);

  r = c.run();
  EXPECT_EQ(r["computed"], 0);
  EXPECT_EQ(r["skipped"], 3);

  // New content in one source image: exactly that row is encoded again.
  test::solid_png(c.t / "ds/b.png", 12, 10, {1, 2, 3, 255});
  fs::last_write_time(c.t / "ds/b.png", fs::last_write_time(c.t / "ds/b.png") + std::chrono::seconds(10));
  r = c.run();
  EXPECT_EQ(r["computed"], 1);
  EXPECT_EQ(r["skipped"], 2);

  // Other model weights: every row is stale.
  write_tinyden_model(c.t / "model", 0.2f);
  r = c.run();
  EXPECT_EQ(r["computed"], 3);
  // Another preprocessing profile: stale as well.
  r = c.run({"--height", "16"});
  EXPECT_EQ(r["computed"], 3);
  EXPECT_EQ(json::parse(test::read_bytes(c.cache / kCacheContractFile))["tensors"]["latents"]["shape"], json({4, 8, 4}));
}

TEST(CacheCommand, AStoppedRunResumesWithoutRedoingFinishedRows) {
  CacheRun c;
  json r = c.run({"--max-rows", "1"});
  EXPECT_EQ(r["computed"], 1);
  EXPECT_EQ(r["remaining"], 2);
  EXPECT_EQ(r["rows"], 1);
  r = c.run();
  EXPECT_EQ(r["computed"], 2);
  EXPECT_EQ(r["skipped"], 1);
  EXPECT_EQ(r["rows"], 3);
}

TEST(CacheCommand, TheCacheIsADatasetCheckedAgainstTheRun) {
  CacheRun c;
  c.run();
  const std::string cache = c.cache.string();
  auto r = test::run_host({"data", "check", "--data", cache, "--height", "8", "--width", "8", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  const json j = json::parse(r.out);
  EXPECT_EQ(j["usable"], 3);
  EXPECT_EQ(j["kinds"]["latents"], 3);
  EXPECT_EQ(j["tensors"]["prompt_embeds"]["float32[4]"], 3);
  EXPECT_EQ(j["cache_contract"], "ok");

  // A run with another shape profile or another model is refused, naming the field.
  r = test::run_host({"data", "check", "--data", cache, "--height", "16", "--width", "8"});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.out, HasSubstr("preprocessing.height (data.height): cache 8, run 16"));
  r = test::run_host({"data", "check", "--data", cache, "--height", "8", "--width", "8", "--model", "other/model"});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.out, HasSubstr("model.id: cache '" + (c.t / "model").string() + "', run 'other/model'"));

  // A component hash that differs (what a training run checks with the pipeline's hashes).
  CacheProfile expected;
  expected.components["transformer"] = std::string(64, '0');
  try {
    validate_cache_contract(c.cache, expected);
    FAIL() << "a different component hash was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("components.transformer: cache '"));
  }
}

TEST(CacheCommand, UsageErrors) {
  CacheRun c;
  auto r = test::run_host({"cache", "--config", c.conf.string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("--output CACHE_DIR"));
  r = test::run_host({"cache", "--config", c.conf.string(), "--output", (c.t / "ds").string()});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("the dataset's own directory"));
}

}  // namespace
}  // namespace yeto::data
