// `yeto-host data check` end to end: exit codes, the report, --config with relative paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "data_test_util.hpp"
#include "support/process.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

void good_dataset(const TempDir& t) {
  test::write_png(t / "ds/wide.png", 37, 21, 3, [](int x, int) { return test::Pixel{static_cast<std::uint8_t>(x), 0, 0, 255}; });
  test::write_png(t / "ds/grey.png", 9, 30, 1, [](int, int y) { return test::Pixel{static_cast<std::uint8_t>(y), 0, 0, 255}; });
  test::indexed_video(t / "ds/clip.mkv", 20, 12, 10, 10, 20);
  t.write("ds/train.jsonl",
          "{\"image\": \"wide.png\", \"prompt\": \"wide\"}\n"
          "{\"image\": \"grey.png\", \"prompt\": \"grey\", \"height\": 32, \"width\": 16}\n"
          "{\"video\": \"clip.mkv\", \"prompt\": \"clip\", \"frames\": 4}\n"
          "{\"latents\": [[[0.5]]], \"prompt_embeds\": [[1, 2, 3]]}\n");
}

TEST(DataCheckCommand, AGoodDatasetPassesWithShapesPerBucket) {
  TempDir t;
  good_dataset(t);
  const auto r = test::run_host({"data", "check", "--data", (t / "ds/train.jsonl").string(), "--height", "16", "--width", "24"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows: 4 (4 usable, 0 bad)"));
  EXPECT_THAT(r.out, HasSubstr("media: image=2 latents=1 video=1"));
  EXPECT_THAT(r.out, HasSubstr("1x16x24: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("1x32x16: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("4x16x24: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("prompt_embeds float32[1, 3]: 1 rows"));
  EXPECT_THAT(r.out, HasSubstr("ok: every row is usable"));
}

TEST(DataCheckCommand, BadRowsAreListedAndFailUnlessSkipped) {
  TempDir t;
  good_dataset(t);
  test::write_bytes(t / "ds/zero.png", "");
  const std::string png = test::read_bytes(t / "ds/wide.png");
  test::write_bytes(t / "ds/corrupt.png", png.substr(0, 40));
  std::ofstream(t / "ds/train.jsonl", std::ios::app) << "{\"image\": \"zero.png\", \"prompt\": \"z\"}\n"
                                                     << "{\"image\": \"corrupt.png\", \"prompt\": \"c\"}\n"
                                                     << "{\"image\": \"../escape.png\", \"prompt\": \"e\"}\n"
                                                     << "{\"image\": \"wide.png\", \"prompt\"";
  const std::string data = (t / "ds/train.jsonl").string();
  auto r = test::run_host({"data", "check", "--data", data});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows: 8 (4 usable, 4 bad)"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 5: " + (t / "ds/zero.png").string() + ": empty file"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 6: " + (t / "ds/corrupt.png").string() + ": corrupt image"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 7: field 'image': path '../escape.png'"));
  EXPECT_THAT(r.out, HasSubstr("train.jsonl line 8: truncated or incomplete JSON"));
  EXPECT_THAT(r.out, HasSubstr("data.on_bad_row = \"skip\""));

  r = test::run_host({"data", "check", "--data", data, "--set", "data.on_bad_row=skip", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["usable"], 4);
  EXPECT_EQ(j["bad_rows"].size(), 4u);
  EXPECT_TRUE(j["ok"].get<bool>());

  r = test::run_host({"data", "check", "--data", data, "--quick"});
  EXPECT_EQ(r.exit_code, 30) << r.all();
}

TEST(DataCheckCommand, ConfigFileDataPathIsRelativeToTheConfig) {
  TempDir t;
  good_dataset(t);
  t.write("conf/run.toml", "[data]\npath = \"../ds\"\nheight = 16\nwidth = 16\nbucket_by_shape = true\n");
  const auto r = test::run_host({"data", "check", "--config", (t / "conf/run.toml").string()}, (t / "ds").string());
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("manifest: " + (t / "ds/train.jsonl").string()));
  // No data at all is a usage error.
  const auto none = test::run_host({"data", "check"}, t.path().string());
  EXPECT_EQ(none.exit_code, 2) << none.all();
  EXPECT_THAT(none.all(), HasSubstr("data.path"));
  const auto wrong = test::run_host({"data", "validate", "--data", "x"});
  EXPECT_EQ(wrong.exit_code, 2) << wrong.all();
}

}  // namespace
}  // namespace yeto::data
