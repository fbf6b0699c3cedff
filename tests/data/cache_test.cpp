// Cache bookkeeping: fingerprints, skip/recompute, resume after interruption, the contract.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/cache_builder.hpp"
#include "data/cache_contract.hpp"
#include "data/check.hpp"
#include "data/source.hpp"
#include "data_test_util.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

// A test-only encoder: "latents" are the mean of each channel, "prompt_embeds" the prompt's
// length. It records which rows it encoded and can fail after a number of rows.
class CountingEncoder : public CacheEncoder {
 public:
  std::string vae_hash = "sha256:vae-1";
  std::vector<std::string> encoded;  // prompts
  int fail_after = -1;

  std::string model_id() const override { return "test/model"; }
  std::string model_commit() const override { return "abc123"; }
  std::map<std::string, std::string> component_hashes() const override { return {{"vae", vae_hash}, {"text_encoder", "sha256:te"}}; }
  std::vector<std::vector<NamedTensor>> encode(const std::vector<Sample>& batch) override {
    std::vector<std::vector<NamedTensor>> out;
    for (const Sample& s : batch) {
      if (fail_after >= 0 && static_cast<int>(encoded.size()) >= fail_after) throw Error("interrupted", ExitCode::interrupted);
      encoded.push_back(s.prompt);
      float mean[3] = {0, 0, 0};
      for (std::size_t i = 0; i < s.pixels.size(); ++i) mean[i % 3] += s.pixels[i];
      for (float& m : mean) m /= static_cast<float>(s.pixels.size() / 3);
      NamedTensor lat{"latents", "float32", {3, 1, 1}, std::string(reinterpret_cast<const char*>(mean), sizeof(mean))};
      const float len = static_cast<float>(s.prompt.size());
      NamedTensor emb{"prompt_embeds", "float32", {1, 1}, std::string(reinterpret_cast<const char*>(&len), sizeof(len))};
      out.push_back({lat, emb});
    }
    return out;
  }
};

struct CacheFixture {
  TempDir t;
  DataOptions o;
  CacheRunOptions run;
  CacheFixture() {
    test::solid_png(t / "ds/a.png", 6, 4, {10, 20, 30, 255});
    test::solid_png(t / "ds/b.png", 6, 4, {40, 50, 60, 255});
    test::solid_png(t / "ds/c.png", 6, 4, {70, 80, 90, 255});
    t.write("ds/m.jsonl",
            "{\"image\": \"a.png\", \"prompt\": \"a\"}\n"
            "{\"image\": \"b.png\", \"prompt\": \"bb\"}\n"
            "{\"image\": \"c.png\", \"prompt\": \"ccc\"}\n");
    o = test::small_options(t / "ds/m.jsonl", 4, 4);
    run.out_dir = t / "cache";
    run.data = o;
    run.rows_per_shard = 2;
    run.batch_size = 2;
  }
  CacheRunStats build(CountingEncoder& enc) { return build_cache(read_manifest(resolve_source(o), o), enc, run); }
};

TEST(DataCache, TouchingASourceRecomputesOnlyThatRow) {
  CacheFixture f;
  CountingEncoder enc;
  CacheRunStats s = f.build(enc);
  EXPECT_EQ(s.computed, 3);
  EXPECT_EQ(s.skipped, 0);
  EXPECT_TRUE(fs::is_regular_file(f.run.out_dir / kCacheContractFile));

  enc.encoded.clear();
  s = f.build(enc);
  EXPECT_EQ(s.computed, 0);
  EXPECT_EQ(s.skipped, 3);

  // A new mtime with the same content: re-hashed, still valid.
  fs::last_write_time(f.t / "ds/b.png", fs::last_write_time(f.t / "ds/b.png") + std::chrono::seconds(5));
  s = f.build(enc);
  EXPECT_EQ(s.computed, 0);
  EXPECT_TRUE(enc.encoded.empty());

  // New content: exactly that row is recomputed.
  test::solid_png(f.t / "ds/b.png", 6, 4, {1, 2, 3, 255});
  fs::last_write_time(f.t / "ds/b.png", fs::last_write_time(f.t / "ds/b.png") + std::chrono::seconds(10));
  s = f.build(enc);
  EXPECT_EQ(s.computed, 1);
  EXPECT_EQ(s.skipped, 2);
  EXPECT_EQ(enc.encoded, (std::vector<std::string>{"bb"}));

  // A different component hash invalidates every row; so does a preprocessing change.
  enc.encoded.clear();
  enc.vae_hash = "sha256:vae-2";
  EXPECT_EQ(f.build(enc).computed, 3);
  f.o.height = 8;
  f.run.data = f.o;
  EXPECT_EQ(f.build(enc).computed, 3);
}

TEST(DataCache, AnInterruptedRunResumesWhereItStopped) {
  CacheFixture f;
  CountingEncoder enc;
  enc.fail_after = 2;  // the first shard (2 rows) completes, the second fails
  EXPECT_THROW(f.build(enc), Error);
  EXPECT_EQ(read_cache_index(f.run.out_dir).size(), 2u);
  enc.fail_after = -1;
  enc.encoded.clear();
  const CacheRunStats s = f.build(enc);
  EXPECT_EQ(s.computed, 1);
  EXPECT_EQ(s.skipped, 2);
  EXPECT_EQ(enc.encoded, (std::vector<std::string>{"ccc"}));
  // A torn index line (crash mid-append) is ignored.
  std::ofstream(f.run.out_dir / "index.jsonl", std::ios::app) << "{\"key\": \"trunc";
  EXPECT_EQ(read_cache_index(f.run.out_dir).size(), 3u);
}

TEST(DataCache, TheCacheDirectoryIsADataSourceWithAContract) {
  CacheFixture f;
  CountingEncoder enc;
  f.build(enc);
  DataOptions o = test::small_options(f.run.out_dir, 4, 4);
  const CheckReport r = check_dataset(o);
  EXPECT_EQ(r.usable, 3) << r.text();
  EXPECT_EQ(r.kinds.at("latents"), 3);
  EXPECT_EQ(r.tensors.at("latents").at("float32[3, 1, 1]"), 3);
  EXPECT_EQ(r.cache_contract, "ok");
  EXPECT_EQ(r.exit_code(), 0);
  // The run asks for another height: the contract check fails with the difference.
  o.height = 8;
  const CheckReport bad = check_dataset(o);
  EXPECT_THAT(bad.cache_contract, HasSubstr("preprocessing.height (data.height): cache 4, run 8"));
  EXPECT_NE(bad.exit_code(), 0);
}

TEST(DataCache, ContractMismatchesAreListedPrecisely) {
  CacheProfile cache;
  cache.model_id = "a/model";
  cache.components = {{"vae", "sha256:1"}};
  cache.height = 512;
  cache.width = 512;
  cache.resize_mode = "center-crop";
  cache.tensors["latents"] = {"bfloat16", {16, 64, 64}};
  CacheProfile run = cache;
  EXPECT_TRUE(contract_mismatches(cache, run).empty());
  run.model_id = "b/model";
  run.components["vae"] = "sha256:2";
  run.width = 768;
  run.resize_mode = "stretch";
  run.tensors["latents"] = {"float32", {16, 64, 96}};
  const auto d = contract_mismatches(cache, run);
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[0], "model.id: cache 'a/model', run 'b/model'");
  EXPECT_EQ(d[1], "components.vae: cache 'sha256:1', run 'sha256:2'");
  EXPECT_EQ(d[2], "preprocessing.width (data.width): cache 512, run 768");
  EXPECT_THAT(d[3], HasSubstr("resize_mode"));
  EXPECT_EQ(d[4], "tensors.latents.dtype: cache bfloat16, run float32");
  EXPECT_EQ(d[5], "tensors.latents.shape: cache [16, 64, 64], run [16, 64, 96]");
  // Unknown (empty) fields of the run are not compared.
  EXPECT_TRUE(contract_mismatches(cache, CacheProfile{}).empty());

  TempDir t;
  t.write(kCacheContractFile, contract_to_json(cache, 10).dump());
  try {
    validate_cache_contract(t.path(), run);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("components.vae"));
    EXPECT_THAT(e.what(), HasSubstr("yeto-host cache"));
  }
  t.write(kCacheContractFile, "{\"format\": \"something-else\"}");
  EXPECT_THROW(validate_cache_contract(t.path(), run), Error);
}

}  // namespace
}  // namespace yeto::data
