#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "core/error.hpp"
#include "io/aliases.hpp"
#include "io/hub.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;
using yeto::test::TempDir;

namespace {

const std::string kA = "1234567a" + std::string(32, '0');  // main, refs/pr/1
const std::string kB = "1234567b" + std::string(32, '1');  // tag v1.0
const std::string kGone = "deadbeef" + std::string(32, '2');  // a ref whose snapshot is missing

// A synthetic hub cache in the standard layout.
struct Cache {
  TempDir t;
  HubCache cache;
  Cache() {
    cache = {t.path() / "hub", "test"};
    const std::string repo = "hub/models--org--model/";
    t.write(repo + "refs/main", kA);
    t.write(repo + "refs/v1.0", kB + "\n");
    t.write(repo + "refs/pr/1", kA);
    t.write(repo + "refs/dangling", kGone);
    t.write(repo + "refs/corrupt", "not a commit");
    t.write(repo + "snapshots/" + kA + "/model_index.json", "{}");
    t.write(repo + "snapshots/" + kB + "/model_index.json", "{}");
    t.write("hub/datasets--org--data/refs/main", kB);
    t.write("hub/datasets--org--data/snapshots/" + kB + "/train.jsonl", "{}\n");
  }
  ResolvedRepo model(const std::string& rev) { return resolve_repo("org/model", RepoType::model, rev, cache); }
};

std::pair<yeto::ExitCode, std::string> failure(const std::function<void()>& f) {
  try {
    f();
  } catch (const yeto::Error& e) {
    return {e.code(), e.what()};
  }
  return {yeto::ExitCode::ok, ""};
}

}  // namespace

TEST(HubResolution, BranchTagFullAndShortCommit) {
  Cache c;
  EXPECT_EQ(c.model("main").commit, kA);
  EXPECT_EQ(c.model("").commit, kA);  // default branch
  EXPECT_EQ(c.model("main").path, c.cache.dir / "models--org--model/snapshots" / kA);
  EXPECT_EQ(c.model("v1.0").commit, kB);  // tag, trailing newline ignored
  EXPECT_EQ(c.model(kB).commit, kB);      // full commit
  EXPECT_EQ(c.model("1234567b").commit, kB);  // short commit
}

TEST(HubResolution, PullRequestRefsWithSlashes) {
  Cache c;
  EXPECT_EQ(c.model("pr/1").commit, kA);
  EXPECT_EQ(c.model("pr/1").revision, "pr/1");
}

TEST(HubResolution, MissingSnapshotListsWhereItLooked) {
  Cache c;
  const std::string missing = "9999999" + std::string(33, '9');
  const auto [code, msg] = failure([&] { c.model(missing); });
  EXPECT_EQ(code, yeto::ExitCode::not_found);
  EXPECT_NE(msg.find((c.cache.dir / "models--org--model/snapshots" / missing).string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(kA), std::string::npos) << msg;  // lists the snapshots present
}

TEST(HubResolution, DanglingAndCorruptRefs) {
  Cache c;
  const auto [code, msg] = failure([&] { c.model("dangling"); });
  EXPECT_EQ(code, yeto::ExitCode::not_found);
  EXPECT_NE(msg.find("dangling ref"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kGone), std::string::npos) << msg;
  const auto [code2, msg2] = failure([&] { c.model("corrupt"); });
  EXPECT_EQ(code2, yeto::ExitCode::bad_input);
  EXPECT_NE(msg2.find("refs/corrupt"), std::string::npos) << msg2;
}

TEST(HubResolution, UnknownRevisionAndAmbiguousShortCommit) {
  Cache c;
  const auto [code, msg] = failure([&] { c.model("v2.0"); });
  EXPECT_EQ(code, yeto::ExitCode::not_found);
  EXPECT_NE(msg.find("refs/v2.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("refs present: corrupt, dangling, main, pr/1, v1.0"), std::string::npos) << msg;
  const auto [code2, msg2] = failure([&] { c.model("1234567"); });
  EXPECT_EQ(code2, yeto::ExitCode::bad_input);
  EXPECT_NE(msg2.find("ambiguous"), std::string::npos) << msg2;
  const auto [code3, msg3] = failure([&] { c.model("../../../etc"); });
  EXPECT_EQ(code3, yeto::ExitCode::not_found) << msg3;
}

TEST(HubResolution, MissingRepositorySaysWhereAndNeverDownloads) {
  Cache c;
  const auto [code, msg] = failure([&] { resolve_repo("org/absent", RepoType::model, "main", c.cache); });
  EXPECT_EQ(code, yeto::ExitCode::not_found);
  EXPECT_NE(msg.find((c.cache.dir / "models--org--absent").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("never downloads"), std::string::npos) << msg;
}

TEST(HubResolution, DatasetsUseTheirOwnFolders) {
  Cache c;
  const auto d = resolve_repo("org/data", RepoType::dataset, "main", c.cache);
  EXPECT_EQ(d.commit, kB);
  EXPECT_TRUE(fs::exists(d.path / "train.jsonl"));
  EXPECT_EQ(failure([&] { resolve_repo("org/data", RepoType::model, "main", c.cache); }).first,
            yeto::ExitCode::not_found);
  EXPECT_EQ(hub_folder_name("org/data", RepoType::dataset), "datasets--org--data");
}

TEST(HubResolution, LocalDirectoriesWin) {
  Cache c;
  const auto r = resolve_repo(c.t.path().string(), RepoType::model, "main", c.cache);
  EXPECT_TRUE(r.local);
  EXPECT_TRUE(r.commit.empty());
  EXPECT_EQ(failure([&] { resolve_repo("/no/such/dir", RepoType::model, "main", c.cache); }).first,
            yeto::ExitCode::not_found);
}

TEST(HubResolution, CacheDirectoryFromEnvironment) {
  const char* saved_cache = std::getenv("HF_HUB_CACHE");
  const char* saved_home = std::getenv("HF_HOME");
  const std::string keep_cache = saved_cache ? saved_cache : "", keep_home = saved_home ? saved_home : "";
  ::setenv("HF_HUB_CACHE", "/x/hub-cache", 1);
  ::setenv("HF_HOME", "/y/hf", 1);
  EXPECT_EQ(hub_cache().dir, "/x/hub-cache");
  EXPECT_EQ(hub_cache("/configured").dir, "/configured");
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_EQ(hub_cache().dir, "/y/hf/hub");
  EXPECT_EQ(hub_cache().source, "$HF_HOME/hub");
  if (saved_cache) ::setenv("HF_HUB_CACHE", keep_cache.c_str(), 1);
  if (saved_home) ::setenv("HF_HOME", keep_home.c_str(), 1);
  else ::unsetenv("HF_HOME");
}

TEST(HubIds, Validation) {
  EXPECT_TRUE(is_hub_id("black-forest-labs/FLUX.1-dev"));
  EXPECT_TRUE(is_hub_id("gpt2"));
  EXPECT_FALSE(is_hub_id("a/b/c"));
  EXPECT_FALSE(is_hub_id("a--b/c"));
  EXPECT_FALSE(is_hub_id("../x"));
  EXPECT_FALSE(is_hub_id("org/"));
  EXPECT_TRUE(is_full_commit(kA));
  EXPECT_FALSE(is_full_commit("main"));
}

TEST(Aliases, TableHoldsEveryBuiltInAlias) {
  for (const char* a : {"flux-dev", "flux-schnell", "sd35", "sd35-medium", "sd35-large", "ltx-video", "wan21-t2v-1.3b",
                        "wan21-t2v-14b", "wan22-t2v-a14b", "wan22-ti2v-5b", "pixart-alpha", "pixart-sigma"}) {
    const ModelAlias* m = find_alias(a);
    ASSERT_NE(m, nullptr) << a;
    EXPECT_TRUE(is_hub_id(m->hub_id)) << a;
    EXPECT_FALSE(m->family.empty());
  }
  EXPECT_EQ(find_alias("flux-dev")->hub_id, "black-forest-labs/FLUX.1-dev");
  EXPECT_EQ(find_alias("wan22-ti2v-5b")->family, "wan");
  EXPECT_EQ(find_alias("nope"), nullptr);
}

TEST(Aliases, ResolveThroughTheCache) {
  TempDir t;
  const HubCache cache{t.path(), "test"};
  t.write("models--black-forest-labs--FLUX.1-dev/refs/main", kA);
  t.write("models--black-forest-labs--FLUX.1-dev/snapshots/" + kA + "/model_index.json", "{}");
  const auto m = resolve_model("flux-dev", "main", cache);
  ASSERT_NE(m.alias, nullptr);
  EXPECT_EQ(m.alias->family, "flux");
  EXPECT_EQ(m.repo.commit, kA);
  const auto [code, msg] = failure([&] { resolve_model("sd35", "main", cache); });
  EXPECT_EQ(code, yeto::ExitCode::not_found);
  EXPECT_NE(msg.find("stabilityai/stable-diffusion-3.5-large"), std::string::npos) << msg;
  const auto [code2, msg2] = failure([&] { resolve_model("flux-deb", "main", cache); });
  EXPECT_NE(msg2.find("did you mean 'flux-dev'"), std::string::npos) << msg2;
}
