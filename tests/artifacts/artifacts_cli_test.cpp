// `yeto-host merge` as a user runs it: a bad --max-shard-size is a usage error (exit 2) naming
// the flag; a merge writes a valid sharded one-model directory.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/weight_source.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {
const fs::path kLoraCase = fs::path(YETO_TEST_FIXTURES) / "parity" / "flux-lora";
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
