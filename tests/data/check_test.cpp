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

TEST(DataCheckCommand, ValidationDataIsCheckedAndReportedSeparately) {
  TempDir t;
  good_dataset(t);
  test::solid_png(t / "val/ok.png", 5, 7, {1, 2, 3, 255});
  test::write_bytes(t / "val/zero.png", "");
  t.write("val/held.jsonl",
          "{\"image\": \"ok.png\", \"prompt\": \"held out\"}\n"
          "{\"image\": \"zero.png\", \"prompt\": \"z\"}\n");
  t.write("conf/run.toml", "[data]\npath = \"../ds\"\nheight = 16\nwidth = 16\nbucket_by_shape = true\n"
                           "[validation]\ndata = \"../val/held.jsonl\"\n");
  const std::string conf = (t / "conf/run.toml").string();
  auto r = test::run_host({"data", "check", "--config", conf});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  // The training data passes on its own; the held-out set has its own section with its bad row.
  EXPECT_THAT(r.out, HasSubstr("rows: 4 (4 usable, 0 bad)"));
  EXPECT_THAT(r.out, HasSubstr("validation.data:\ndataset: ../val/held.jsonl\nmanifest: " + (t / "val/held.jsonl").string()));
  EXPECT_THAT(r.out, HasSubstr("rows: 2 (1 usable, 1 bad)"));
  EXPECT_THAT(r.out, HasSubstr("held.jsonl line 2: " + (t / "val/zero.png").string() + ": empty file"));

  r = test::run_host({"data", "check", "--config", conf, "--json"});
  EXPECT_EQ(r.exit_code, 30) << r.all();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["usable"], 4);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["validation"]["rows"], 2);
  EXPECT_EQ(j["validation"]["usable"], 1);
  EXPECT_FALSE(j["validation"]["ok"].get<bool>());

  // A good held-out set passes; a missing one names validation.data.
  std::filesystem::remove(t / "val/zero.png");
  t.write("val/held.jsonl", "{\"image\": \"ok.png\", \"prompt\": \"held out\"}\n");
  r = test::run_host({"data", "check", "--config", conf});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("rows: 1 (1 usable, 0 bad)"));
  r = test::run_host({"data", "check", "--config", conf, "--validation-data", (t / "nowhere.jsonl").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.all(), HasSubstr("validation.data " + (t / "nowhere.jsonl").string() + " does not exist"));
}

}  // namespace
}  // namespace yeto::data
