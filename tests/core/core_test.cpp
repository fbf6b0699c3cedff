#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/metrics.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using yeto::test::TempDir;

TEST(Strings, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(yeto::edit_distance("lora", "lora"), 0u);
  EXPECT_EQ(yeto::edit_distance("lroa", "lora"), 1u);
  EXPECT_EQ(yeto::edit_distance("lor", "lora"), 1u);
  EXPECT_EQ(yeto::edit_distance("", "abc"), 3u);
  EXPECT_EQ(yeto::edit_distance("kitten", "sitting"), 3u);
}

TEST(Strings, ClosestMatchRejectsFarCandidates) {
  const std::vector<std::string> c = {"lora.r", "lora.alpha", "train.max_steps"};
  EXPECT_EQ(yeto::closest_match("lora.alhpa", c), "lora.alpha");
  EXPECT_EQ(yeto::closest_match("train.max_step", c), "train.max_steps");
  EXPECT_EQ(yeto::closest_match("completely.different", c), "");
  EXPECT_EQ(yeto::did_you_mean("lora.rr", c), ", did you mean 'lora.r'?");
}

TEST(Strings, SplitTrimJoin) {
  EXPECT_EQ(yeto::split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(yeto::trim("  x y \t\n"), "x y");
  EXPECT_EQ(yeto::join({"a", "b", "c"}, ", "), "a, b, c");
}

TEST(AtomicFile, WritesAndReplaces) {
  TempDir t;
  const fs::path p = t / "sub/dir/file.txt";
  yeto::atomic_write(p, "first");
  EXPECT_EQ(yeto::read_file(p), "first");
  yeto::atomic_write(p, "second, longer");
  EXPECT_EQ(yeto::read_file(p), "second, longer");
  // No temporary files are left behind.
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path())) (void)e, ++n;
  EXPECT_EQ(n, 1u);
}

TEST(AtomicFile, UncommittedWriterLeavesTargetUntouched) {
  TempDir t;
  const fs::path p = t / "state.bin";
  yeto::atomic_write(p, "good state");
  {
    yeto::AtomicFile f(p);
    f.write("half-written new sta");
    // destroyed without commit(), as when an exception unwinds mid-save
  }
  EXPECT_EQ(yeto::read_file(p), "good state");
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(t.path())) (void)e, ++n;
  EXPECT_EQ(n, 1u);
}

TEST(AtomicFile, ReadMissingFileNamesItAndIsNotFound) {
  TempDir t;
  try {
    yeto::read_file(t / "nope.txt");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.txt"), std::string::npos);
    EXPECT_EQ(e.code(), yeto::ExitCode::not_found);
  }
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(yeto::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(yeto::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  TempDir t;
  const auto p = t.write("f", "abc");
  EXPECT_EQ(yeto::sha256_file(p), yeto::sha256_hex("abc"));
}

TEST(Jsonl, AppendsOneObjectPerLine) {
  TempDir t;
  const fs::path p = t / "run/metrics.jsonl";
  {
    yeto::JsonlWriter w(p);
    w.write({{"step", 1}, {"loss", 0.5}});
    w.write({{"step", 2}, {"loss", std::nan("")}});
  }
  {
    yeto::JsonlWriter w(p);  // reopening appends
    w.write({{"step", 3}});
  }
  const std::string text = yeto::test::read_text(p);
  const auto lines = yeto::split(text, '\n');
  ASSERT_EQ(lines.size(), 4u);  // three records and the empty tail after the last newline
  EXPECT_EQ(nlohmann::json::parse(lines[0])["loss"], 0.5);
  EXPECT_TRUE(nlohmann::json::parse(lines[1])["loss"].is_null());  // NaN is not JSON
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 3);
}

TEST(Location, Renders) {
  EXPECT_EQ((yeto::Location{"a.toml", 3, 7}).str(), "a.toml:3:7");
  EXPECT_EQ((yeto::Location{"a.toml", 3, 0}).str(), "a.toml:3");
  EXPECT_EQ((yeto::Location{}).str(), "");
  EXPECT_EQ(yeto::with_location({"f", 1, 2}, "bad"), "f:1:2: bad");
}
