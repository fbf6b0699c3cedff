// Sources and manifests: relative paths, escapes, formats, hub ids, columns and malformed rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "data/base64.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"
#include "data/tensor_ref.hpp"
#include "data_test_util.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

Manifest load(const DataOptions& o) { return read_manifest(resolve_source(o), o); }

std::string all_errors(const Manifest& m) {
  std::string s;
  for (const auto& e : m.errors) s += e.str() + "\n";
  return s;
}

TEST(DataManifest, RelativePathsResolveFromTheManifestDirectory) {
  TempDir t;
  test::solid_png(t / "ds/img/a.png", 5, 3, {1, 2, 3, 255});
  t.write("ds/train.jsonl", "{\"image\": \"img/a.png\", \"prompt\": \"x\"}\n");
  // The working directory is elsewhere; the path still resolves from ds/.
  DataOptions o = test::small_options("ds/train.jsonl");
  o.source_base = t.path();
  const Manifest m = load(o);
  ASSERT_TRUE(m.errors.empty()) << all_errors(m);
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].media, MediaKind::image);
  EXPECT_EQ(m.rows[0].media_path, (t.path() / "ds/img/a.png").lexically_normal());
  EXPECT_EQ(m.rows[0].number, 1);
}

TEST(DataManifest, PathEscapesAreRefusedUnlessAllowed) {
  TempDir t;
  test::solid_png(t / "outside.png", 4, 4, {0, 0, 0, 255});
  test::solid_png(t / "ds/in.png", 4, 4, {0, 0, 0, 255});
  fs::create_symlink(t / "outside.png", t / "ds/link.png");
  t.write("ds/m.jsonl", "{\"image\": \"../outside.png\", \"prompt\": \"a\"}\n"
                        "{\"image\": \"" + (t / "outside.png").string() + "\", \"prompt\": \"b\"}\n"
                        "{\"image\": \"link.png\", \"prompt\": \"c\"}\n"
                        "{\"image\": \"sub/../in.png\", \"prompt\": \"d\"}\n");
  DataOptions o = test::small_options(t / "ds/m.jsonl");
  const Manifest m = load(o);
  ASSERT_EQ(m.errors.size(), 3u) << all_errors(m);
  EXPECT_EQ(m.errors[0].number, 1);
  EXPECT_EQ(m.errors[1].number, 2);
  EXPECT_EQ(m.errors[2].number, 3);
  EXPECT_THAT(m.errors[0].str(), HasSubstr("outside the manifest's directory"));
  EXPECT_THAT(m.errors[0].str(), HasSubstr("data.allow_path_escape"));
  EXPECT_THAT(m.errors[0].str(), HasSubstr("m.jsonl line 1"));
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].number, 4);

  o.allow_path_escape = true;
  const Manifest allowed = load(o);
  EXPECT_TRUE(allowed.errors.empty()) << all_errors(allowed);
  EXPECT_EQ(allowed.rows.size(), 4u);
}

TEST(DataManifest, JsonArrayAndRowsObjectNumberRowsFromOne) {
  TempDir t;
  test::solid_png(t / "a.png", 4, 4, {0, 0, 0, 255});
  t.write("m.json", R"([{"image": "a.png", "prompt": "x"}, {"image": "missing.png", "prompt": "y"}, 7])");
  const Manifest m = load(test::small_options(t / "m.json"));
  EXPECT_EQ(m.total_rows, 3);
  ASSERT_EQ(m.errors.size(), 2u);
  EXPECT_THAT(m.errors[0].str(), HasSubstr("m.json row 2: field 'image': file not found"));
  EXPECT_THAT(m.errors[1].str(), HasSubstr("m.json row 3: row is a JSON number"));
  t.write("r.json", R"({"rows": [{"image": "a.png", "prompt": "x"}]})");
  EXPECT_EQ(load(test::small_options(t / "r.json")).rows.size(), 1u);
  t.write("bad.json", "[{\"image\": \"a.png\",\n \"prompt\": }]");
  try {
    load(test::small_options(t / "bad.json"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad.json:2: invalid JSON manifest"));
    EXPECT_EQ(e.code(), ExitCode::bad_input);
  }
}

TEST(DataManifest, MalformedRowsGetLineNumbersAndTheRestIsRead) {
  TempDir t;
  test::solid_png(t / "a.png", 4, 4, {0, 0, 0, 255});
  t.write("m.jsonl",
          "{\"image\": \"a.png\", \"prompt\": \"ok\"}\n"
          "\n"
          "{\"image\": \"a.png\", \"prompt\": 3}\n"
          "{\"prompt\": \"no media\"}\n"
          "{\"image\": \"a.png\"}\n"
          "{\"image\": 12, \"prompt\": \"x\"}\n"
          "{\"image\": \"a.png\", \"prompt\": \"x\", \"height\": \"tall\"}\n"
          "{\"image\": \"a.png\", \"video\": \"a.png\", \"prompt\": \"x\"}\n"
          "{\"image\": \"a.png\", \"prompt\": \"x\", \"width\": -4}\n"
          "{\"image\": \"a.png\", \"prompt\": \"ok again\"}\n"
          "{\"image\": \"a.png\", \"pro");
  const Manifest m = load(test::small_options(t / "m.jsonl"));
  const std::string errs = all_errors(m);
  EXPECT_EQ(m.total_rows, 10);
  ASSERT_EQ(m.rows.size(), 2u) << errs;
  EXPECT_EQ(m.rows[0].number, 1);
  EXPECT_EQ(m.rows[1].number, 10);
  ASSERT_EQ(m.errors.size(), 8u) << errs;
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 3: field 'prompt' must be a string, got number"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 4: row has no media"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 5: row has no conditioning"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 6: field 'image' must be a path"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 7: field 'height' must be a positive integer"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 8: row has more than one media source"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 9: field 'width' must be a positive integer, got -4"));
  EXPECT_THAT(errs, HasSubstr("m.jsonl line 11: truncated or incomplete JSON"));
}

TEST(DataManifest, ColumnNamesAreOverridable) {
  TempDir t;
  test::solid_png(t / "a.png", 4, 4, {0, 0, 0, 255});
  t.write("m.jsonl", "{\"img\": \"a.png\", \"caption\": \"hello\"}\n");
  DataOptions o = test::small_options(t / "m.jsonl");
  EXPECT_EQ(load(o).rows.size(), 0u);
  o.columns.image = "img";
  o.columns.prompt = "caption";
  const Manifest m = load(o);
  ASSERT_EQ(m.rows.size(), 1u) << all_errors(m);
  EXPECT_EQ(*m.rows[0].prompt, "hello");
}

TEST(DataManifest, InlineImagesAndTensors) {
  TempDir t;
  const std::string png = test::read_bytes(test::solid_png(t / "a.png", 3, 2, {9, 8, 7, 255}));
  const std::string b64 = base64_encode(png);
  ASSERT_EQ(*base64_decode(b64), png);
  t.write("m.jsonl",
          "{\"image\": \"data:image/png;base64," + b64 + "\", \"prompt\": \"uri\"}\n"
          "{\"image\": {\"bytes\": \"" + b64 + "\", \"path\": null}, \"prompt\": \"hf\"}\n"
          "{\"latents\": [[[1, 2], [3, 4]]], \"prompt_embeds\": {\"shape\": [2, 2], \"dtype\": \"float16\", \"data\": [1, 2, 3, 4]}}\n"
          "{\"latents\": [[1, 2], [3]], \"prompt\": \"ragged\"}\n"
          "{\"image\": \"data:image/png;base64,@@@\", \"prompt\": \"bad\"}\n");
  const Manifest m = load(test::small_options(t / "m.jsonl"));
  ASSERT_EQ(m.rows.size(), 3u) << all_errors(m);
  EXPECT_EQ(m.rows[0].inline_image, png);
  EXPECT_EQ(m.rows[1].inline_image, png);
  ASSERT_TRUE(m.rows[2].latents);
  EXPECT_EQ(m.rows[2].latents->shape, (std::vector<std::int64_t>{1, 2, 2}));
  EXPECT_EQ(m.rows[2].prompt_embeds->dtype, "float16");
  ASSERT_EQ(m.errors.size(), 2u);
  EXPECT_THAT(m.errors[0].str(), HasSubstr("line 4: field 'latents': ragged nested list"));
  EXPECT_THAT(m.errors[1].str(), HasSubstr("line 5: field 'image': the data: URI is not valid base64"));
}

TEST(DataManifest, DirectorySourceUsesItsManifestAndFileName) {
  TempDir t;
  test::solid_png(t / "ds/a.png", 4, 4, {0, 0, 0, 255});
  t.write("ds/metadata.jsonl", "{\"file_name\": \"a.png\", \"prompt\": \"x\"}\n");
  const ResolvedSource s = resolve_source(test::small_options(t / "ds"));
  EXPECT_EQ(s.kind, SourceKind::directory);
  EXPECT_EQ(s.manifest.filename(), "metadata.jsonl");
  const Manifest m = read_manifest(s, test::small_options(t / "ds"));
  ASSERT_EQ(m.rows.size(), 1u) << all_errors(m);
  EXPECT_EQ(m.rows[0].media, MediaKind::image);
  try {
    resolve_source(test::small_options(t / "ds/..//nothing-here"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found);
  }
}

TEST(DataManifest, HubDatasetIdResolvesOfflineAtTheRevision) {
  TempDir t;
  const fs::path repo = t / "hub/datasets--acme--cats";
  test::solid_png(repo / "snapshots/c0ffee/a.png", 4, 4, {0, 0, 0, 255});
  t.write("hub/datasets--acme--cats/snapshots/c0ffee/train.jsonl", "{\"image\": \"a.png\", \"prompt\": \"cat\"}\n");
  t.write("hub/datasets--acme--cats/refs/main", "c0ffee\n");
  DataOptions o = test::small_options("acme/cats");
  o.hub_cache = t / "hub";
  const ResolvedSource s = resolve_source(o);
  EXPECT_EQ(s.kind, SourceKind::hub);
  EXPECT_EQ(s.hub_commit, "c0ffee");
  EXPECT_EQ(read_manifest(s, o).rows.size(), 1u);
  o.revision = "c0ffee";  // a commit works too
  EXPECT_EQ(resolve_source(o).hub_commit, "c0ffee");
  o.revision = "v2";
  try {
    resolve_source(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("revision 'v2' is not in the hub cache"));
  }
  o.source = "acme/dogs";
  try {
    resolve_source(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("datasets--acme--dogs"));
    EXPECT_THAT(e.what(), HasSubstr("Nothing is downloaded at run time"));
  }
}

TEST(DataManifest, ParquetAndArrowAreRefusedWithConversionAdvice) {
  TempDir t;
  t.write("ds/data/train-00000.parquet", "PAR1");
  t.write("x.arrow", "ARROW1");
  for (const fs::path& p : {t / "ds", t / "ds/data/train-00000.parquet", t / "x.arrow"}) {
    try {
      resolve_source(test::small_options(p));
      FAIL() << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::bad_input);
      EXPECT_THAT(e.what(), HasSubstr("not supported yet"));
      EXPECT_THAT(e.what(), HasSubstr("to_json("));
    }
  }
}

TEST(DataManifest, CachedTensorFilesAreProbed) {
  TempDir t;
  // A hand-written .npy: float32 [2, 3].
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header + std::string(24, '\0');
  test::write_bytes(t / "e.npy", npy);
  test::write_bytes(t / "trunc.npy", npy.substr(0, npy.size() - 4));
  test::write_bytes(t / "zero.npy", "");
  t.write("m.jsonl",
          "{\"image\": \"e.npy\", \"prompt\": \"x\"}\n"
          "{\"latents\": \"e.npy\", \"prompt_embeds\": \"e.npy\"}\n"
          "{\"latents\": \"trunc.npy\", \"prompt\": \"x\"}\n"
          "{\"latents\": \"zero.npy\", \"prompt\": \"x\"}\n"
          "{\"latents\": \"e.txt\", \"prompt\": \"x\"}\n");
  const Manifest m = load(test::small_options(t / "m.jsonl"));
  // Rows 1, 3 and 4 parse (the files exist); their contents are checked when decoded.
  ASSERT_EQ(m.rows.size(), 4u) << all_errors(m);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_THAT(m.errors[0].str(), HasSubstr("line 5: field 'latents': 'e.txt' is not a tensor file"));
  const TensorInfo info = probe_tensor(*m.rows[1].latents);
  EXPECT_EQ(info.dtype, "float32");
  EXPECT_EQ(info.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_THROW(probe_tensor(*m.rows[2].latents), Error);
  try {
    probe_tensor(*m.rows[3].latents);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("empty file"));
  }
}

}  // namespace
}  // namespace yeto::data
