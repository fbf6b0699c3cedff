#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "config/schema.hpp"
#include "core/error.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using yeto::config::Config;
using yeto::config::Origin;
using yeto::config::Override;
using yeto::test::TempDir;

namespace {

// Resolves and returns the error message; fails the test if resolution succeeds.
std::string resolve_error(const std::optional<fs::path>& file, const std::vector<Override>& ov = {}) {
  try {
    Config::resolve(file, ov);
  } catch (const yeto::UsageError& e) {
    return e.what();
  } catch (const yeto::Error& e) {
    return std::string("[Error ") + std::to_string(e.exit_code()) + "] " + e.what();
  }
  ADD_FAILURE() << "expected resolution to fail";
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST(Schema, KeysAndFlagsAreUniqueAndDefaultsValid) {
  std::set<std::string> keys, flags;
  for (const auto& d : yeto::config::schema()) {
    EXPECT_TRUE(keys.insert(d.key).second) << "duplicate key " << d.key;
    if (!d.flag.empty()) {
      EXPECT_TRUE(flags.insert(d.flag).second) << "duplicate flag " << d.flag;
    }
    EXPECT_TRUE(yeto::config::is_section(d.section())) << d.key << " has no section entry";
    EXPECT_FALSE(d.doc.empty()) << d.key << " is undocumented";
    if (d.type == yeto::config::Type::choice) {
      const auto& v = std::get<std::string>(d.default_value);
      EXPECT_NE(std::find(d.choices.begin(), d.choices.end(), v), d.choices.end()) << d.key;
    }
  }
  // Conditional defaults name another key without conditional defaults of its own, compare
  // against a value of that key's type, and are themselves valid values of their key.
  for (const auto& d : yeto::config::schema())
    for (const auto& w : d.default_when) {
      const auto* k = yeto::config::find_key(w.when);
      ASSERT_NE(k, nullptr) << d.key << "'s default depends on unknown key " << w.when;
      EXPECT_TRUE(k->default_when.empty()) << d.key << " -> " << w.when << ": a chain of conditional defaults";
      EXPECT_EQ(w.equals.index(), k->default_value.index()) << d.key << " -> " << w.when;
      EXPECT_EQ(w.value.index(), d.default_value.index()) << d.key;
      if (const auto* v = std::get_if<double>(&w.value)) {
        if (d.min) { EXPECT_GE(*v, *d.min) << d.key; }
        if (d.max) { EXPECT_LE(*v, *d.max) << d.key; }
      }
    }
  // Renamed keys never shadow a live key.
  for (const auto& r : yeto::config::renamed_keys()) {
    EXPECT_EQ(yeto::config::find_key(r.old_key), nullptr) << r.old_key;
    EXPECT_NE(yeto::config::find_key(r.new_key), nullptr) << r.new_key;
  }
}

TEST(Schema, EveryFlagTheBriefNamesMapsOntoAKey) {
  const char* flags[] = {"model", "model-kind", "model-revision", "data", "data-revision", "data-format",
                         "diffusion-adapter", "trust-remote-code", "tuning", "lora-r", "lora-alpha",
                         "lora-dropout", "lora-targets", "shard", "micro-batch-size", "gradient-accumulation",
                         "learning-rate", "max-steps", "diffusion-seed", "diffusion-loss-weighting", "height",
                         "width", "resize-mode", "num-frames", "fps", "bucket-by-shape", "cache-latents",
                         "cache-text-embeds", "image-column", "video-column", "latent-column", "prompt-column",
                         "text-embeds-column", "text-attention-mask-column", "pooled-text-embeds-column",
                         "validation-data", "validation-split", "validation-every", "fragments",
                         "fragment-pattern", "output"};
  for (const char* f : flags) EXPECT_NE(yeto::config::find_flag(f), nullptr) << "--" << f;
}

TEST(Config, DefaultsWhenNothingGiven) {
  const Config c = Config::resolve(std::nullopt, {});
  EXPECT_EQ(c.get_int("lora.r"), 16);
  EXPECT_EQ(c.get_string("train.shard"), "none");
  EXPECT_FALSE(c.get_bool("data.bucket_by_shape"));
  EXPECT_EQ(c.entry("lora.r").origin, Origin::default_value);
  EXPECT_FALSE(c.file().has_value());
}

TEST(Config, ParsesEveryValueType) {
  TempDir t;
  const auto f = t.write("run.toml", R"(
[model]
id = "org/name"            # string
precision = "bf16"         # choice

[data]
bucket_by_shape = true     # boolean
height = 768               # integer
fps = 12                   # integer accepted for a number
path = "data/train.jsonl"  # path, relative to this file

[lora]
alpha = 32.5               # number
targets = ["to_q", "to_k"] # list of strings

[train]
micro_batch_size = "auto"  # integer or auto
)");
  const Config c = Config::resolve(f, {});
  EXPECT_EQ(c.get_string("model.id"), "org/name");
  EXPECT_EQ(c.get_string("model.precision"), "bf16");
  EXPECT_TRUE(c.get_bool("data.bucket_by_shape"));
  EXPECT_EQ(c.get_int("data.height"), 768);
  EXPECT_DOUBLE_EQ(c.get_number("data.fps"), 12.0);
  EXPECT_DOUBLE_EQ(c.get_number("lora.alpha"), 32.5);
  EXPECT_EQ(c.get_list("lora.targets"), (std::vector<std::string>{"to_q", "to_k"}));
  EXPECT_TRUE(c.is_auto("train.micro_batch_size"));
  EXPECT_EQ(c.get_path("data.path"), (fs::absolute(t.path()) / "data/train.jsonl").lexically_normal());
  EXPECT_EQ(c.entry("lora.alpha").origin, Origin::file);
  EXPECT_EQ(c.entry("lora.alpha").where, f.string() + ":13:1");  // the raw string starts with a newline
}

TEST(Config, DottedKeysAndSingleStringList) {
  TempDir t;
  const auto f = t.write("run.toml", "lora.r = 4\nlora.targets = \"attention\"\ntrain.micro_batch_size = 3\n");
  const Config c = Config::resolve(f, {});
  EXPECT_EQ(c.get_int("lora.r"), 4);
  EXPECT_EQ(c.get_list("lora.targets"), (std::vector<std::string>{"attention"}));
  EXPECT_FALSE(c.is_auto("train.micro_batch_size"));
  EXPECT_EQ(c.get_int("train.micro_batch_size"), 3);
}

TEST(Config, FlagsOverrideFileInOrder) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 4\n[data]\npath = \"a.jsonl\"\n");
  const Config c = Config::resolve(
      f, {{"lora.r", "8", "--lora-r"}, {"lora.r", "12", "--set lora.r"}, {"data.bucket_by_shape", "true", "--bucket-by-shape"},
          {"lora.targets", "to_q, to_v,", "--lora-targets"}, {"train.micro_batch_size", "auto", "--micro-batch-size"},
          {"data.path", "b.jsonl", "--data"}, {"lora.dropout", "0.05", "--lora-dropout"}});
  EXPECT_EQ(c.get_int("lora.r"), 12);
  EXPECT_EQ(c.entry("lora.r").origin, Origin::flag);
  EXPECT_EQ(c.entry("lora.r").where, "--set lora.r");
  EXPECT_TRUE(c.get_bool("data.bucket_by_shape"));
  EXPECT_EQ(c.get_list("lora.targets"), (std::vector<std::string>{"to_q", "to_v"}));
  EXPECT_TRUE(c.is_auto("train.micro_batch_size"));
  EXPECT_DOUBLE_EQ(c.get_number("lora.dropout"), 0.05);
  // A path from a flag resolves against the working directory, not the file.
  EXPECT_EQ(c.get_path("data.path"), (fs::current_path() / "b.jsonl").lexically_normal());
}

TEST(Config, OverrideAcceptsTomlArrayLiteral) {
  const Config c = Config::resolve(std::nullopt, {{"lora.targets", R"(["to_q", "to_out.0"])", "--set lora.targets"}});
  EXPECT_EQ(c.get_list("lora.targets"), (std::vector<std::string>{"to_q", "to_out.0"}));
}

TEST(Config, UnknownKeyNamesKeyLineAndSuggestion) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 4\nalhpa = 8\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, f.string() + ":3:1")) << m;
  EXPECT_TRUE(contains(m, "unknown key 'lora.alhpa'")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'lora.alpha'?")) << m;
}

TEST(Config, UnknownSectionSuggestsSection) {
  TempDir t;
  const auto f = t.write("run.toml", "[optimiser]\nlearning_rate = 1e-4\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, "optimiser")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'optimizer.learning_rate'?") || contains(m, "[optimizer]")) << m;
  EXPECT_TRUE(contains(m, f.string() + ":")) << m;
}

TEST(Config, RenamedKeyGivesOldToNewMapping) {
  TempDir t;
  const auto f = t.write("run.toml", "[train]\nlearning_rate = 0.001\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, "'train.learning_rate' was renamed to 'optimizer.learning_rate'")) << m;
  EXPECT_TRUE(contains(m, f.string() + ":2:1")) << m;
  const std::string m2 = resolve_error(std::nullopt, {{"lora.rank", "4", "--set lora.rank"}});
  EXPECT_TRUE(contains(m2, "--set lora.rank: key 'lora.rank' was renamed to 'lora.r'")) << m2;
}

TEST(Config, TypeErrorCarriesLineAndColumn) {
  TempDir t;
  const auto f = t.write("run.toml", "[train]\nmax_steps = \"100\"\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, f.string() + ":2:13")) << m;
  EXPECT_TRUE(contains(m, "'train.max_steps' expects an integer, got a string")) << m;
}

TEST(Config, RangeChoiceAndListElementErrors) {
  TempDir t;
  const auto f = t.write("run.toml",
                         "[lora]\nr = 0\ntargets = [\"to_q\", 3]\n[data]\nresize_mode = \"center_crop\"\n"
                         "[train]\nmicro_batch_size = \"big\"\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, "4 problems")) << m;
  EXPECT_TRUE(contains(m, ":2:5: key 'lora.r' must be between 1 and 4096, got 0")) << m;
  EXPECT_TRUE(contains(m, "element 1 is an integer")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'center-crop'?")) << m;
  EXPECT_TRUE(contains(m, "expects an integer or \"auto\", got \"big\"")) << m;
}

TEST(Config, IslandRestartsDefaultsToThreeAndIsBounded) {
  EXPECT_EQ(Config::resolve(std::nullopt, {}).get_int("sync.island_restarts"), 3);
  TempDir t;
  EXPECT_TRUE(contains(resolve_error(t.write("a.toml", "[sync]\nisland_restarts = -1\n")),
                       "key 'sync.island_restarts' must be between 0 and 100, got -1"));
  EXPECT_TRUE(contains(resolve_error(t.write("b.toml", "[sync]\nisland_restarts = 101\n")),
                       "key 'sync.island_restarts' must be between 0 and 100, got 101"));
}

TEST(Config, BadFlagValuesNameTheFlag) {
  const std::string m = resolve_error(std::nullopt, {{"lora.r", "four", "--lora-r"}});
  EXPECT_TRUE(contains(m, "--lora-r: key 'lora.r' expects an integer, got 'four'")) << m;
  const std::string m2 = resolve_error(std::nullopt, {{"data.bucket_by_shape", "maybe", "--set data.bucket_by_shape"}});
  EXPECT_TRUE(contains(m2, "expects a boolean")) << m2;
  const std::string m3 = resolve_error(std::nullopt, {{"lora.dropout", "0.5x", "--lora-dropout"}});
  EXPECT_TRUE(contains(m3, "expects a number")) << m3;
  const std::string m4 = resolve_error(std::nullopt, {{"lora.rr", "4", "--set lora.rr"}});
  EXPECT_TRUE(contains(m4, "did you mean 'lora.r'?")) << m4;
}

TEST(Config, MalformedTomlReportsPosition) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 4\ntargets = [\"a\" \"b\"]\n");
  const std::string m = resolve_error(f);
  EXPECT_TRUE(contains(m, f.string() + ":3:")) << m;
  EXPECT_TRUE(contains(m, "invalid TOML")) << m;
  const auto dup = t.write("dup.toml", "[lora]\nr = 4\nr = 5\n");
  const std::string m2 = resolve_error(dup);
  EXPECT_TRUE(contains(m2, dup.string() + ":3:")) << m2;
}

TEST(Config, MissingFileIsNotFound) {
  TempDir t;
  const std::string m = resolve_error(t / "nope.toml");
  EXPECT_TRUE(contains(m, "[Error 31]")) << m;
  EXPECT_TRUE(contains(m, "nope.toml")) << m;
}

TEST(Config, PrintShowsOriginsAndRoundTrips) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 4\n");
  const Config c = Config::resolve(f, {{"lora.alpha", "2", "--lora-alpha"}});
  const std::string text = c.to_toml(true);
  EXPECT_TRUE(contains(text, "r = 4")) << text;
  EXPECT_TRUE(contains(text, "# file " + f.string() + ":2:1")) << text;
  EXPECT_TRUE(contains(text, "alpha = 2.0")) << text;
  EXPECT_TRUE(contains(text, "# flag --lora-alpha")) << text;
  EXPECT_TRUE(contains(text, "# default")) << text;

  // The printed configuration (without origins) is itself a valid run file giving the same values.
  const auto again = t.write("printed.toml", c.to_toml(false));
  const Config c2 = Config::resolve(again, {});
  EXPECT_EQ(c2.hash(), c.hash());
  EXPECT_EQ(c2.get_int("lora.r"), 4);
  EXPECT_DOUBLE_EQ(c2.get_number("lora.alpha"), 2.0);
}

// A default that depends on another key (the schema's default_when; sync.grace_fraction is
// 0.6 where sync.carry = false): it follows that key from any source, is printed as the value
// that applies, still as a default, and gives way to a value set anywhere.
TEST(Config, ConditionalDefaultFollowsTheKeyItDependsOn) {
  TempDir t;
  const auto* def = yeto::config::find_key("sync.grace_fraction");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(yeto::config::default_text(*def), "1.5 (0.6 where sync.carry = false)");
  EXPECT_EQ(yeto::config::default_text(*def, true), "`1.5` (`0.6` where `sync.carry` = `false`)");
  EXPECT_DOUBLE_EQ(Config::resolve(std::nullopt, {}).get_number("sync.grace_fraction"), 1.5);
  const Config by_file = Config::resolve(t.write("a.toml", "[sync]\ncarry = false\n"), {});
  EXPECT_DOUBLE_EQ(by_file.get_number("sync.grace_fraction"), 0.6);
  EXPECT_EQ(by_file.entry("sync.grace_fraction").origin, Origin::default_value);
  const std::string text = by_file.to_toml(true);
  EXPECT_TRUE(contains(text, "grace_fraction = 0.6")) << text;
  // A flag turning carry back on restores the unconditional default.
  EXPECT_DOUBLE_EQ(Config::resolve(t.path() / "a.toml", {{"sync.carry", "true", "--set"}}).get_number("sync.grace_fraction"),
                   1.5);
  // A value given anywhere wins over either default.
  EXPECT_DOUBLE_EQ(Config::resolve(t.path() / "a.toml", {{"sync.grace_fraction", "0.3", "--set"}})
                       .get_number("sync.grace_fraction"),
                   0.3);
  const Config again = Config::resolve(t.write("printed.toml", by_file.to_toml(false)), {});
  EXPECT_EQ(again.hash(), by_file.hash());
}

TEST(Config, TheRecordLocatesFilesAbsolutelySoItReadsTheSameFromAnyDirectory) {
  TempDir t;
  fs::create_directories(t / "cfg/repo");
  fs::create_directories(t / "cfg/mine");
  t.write("cfg/data/train.jsonl", "");
  const auto f = t.write("cfg/run.toml",
                         "[run]\noutput = \"out\"\n[model]\nid = \"repo\"\n[data]\npath = \"data/train.jsonl\"\n"
                         "[plugins]\ndirs = [\"plugins\", \"mine\"]\n[log]\nlevel = \"debug\"\n");
  const Config c = Config::resolve(f, {});
  const auto record = t.write("elsewhere/config.toml", c.to_toml(true));
  const Config r = Config::resolve(record, {});
  EXPECT_TRUE(fs::path(r.get_string("model.id")).is_absolute()) << r.get_string("model.id");
  EXPECT_TRUE(fs::equivalent(r.get_string("model.id"), t / "cfg/repo"));
  EXPECT_TRUE(fs::equivalent(r.get_string("data.path"), t / "cfg/data/train.jsonl"));
  EXPECT_EQ(r.get_path("run.output"), c.get_path("run.output"));
  const auto dirs = r.get_list("plugins.dirs");
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], "plugins") << "a directory that does not exist here keeps its install-root meaning";
  EXPECT_TRUE(fs::equivalent(dirs[1], t / "cfg/mine"));
  EXPECT_EQ(r.get_string("log.level"), "debug");
  // An alias or hub id stays as written; the hashed form keeps every value as given.
  const Config a = Config::resolve(std::nullopt, {{"model.id", "flux-dev", "--model"}});
  EXPECT_TRUE(contains(a.to_toml(true), "id = \"flux-dev\"")) << a.to_toml(true);
  EXPECT_TRUE(contains(c.to_toml(false), "id = \"repo\"")) << c.to_toml(false);
}

TEST(Config, HashDependsOnValuesNotOrigins) {
  TempDir t;
  const auto f = t.write("run.toml", "[lora]\nr = 8\n");
  const Config from_file = Config::resolve(f, {});
  const Config from_flag = Config::resolve(std::nullopt, {{"lora.r", "8", "--lora-r"}});
  const Config other = Config::resolve(std::nullopt, {{"lora.r", "9", "--lora-r"}});
  EXPECT_EQ(from_file.hash(), from_flag.hash());
  EXPECT_NE(from_file.hash(), other.hash());
  EXPECT_EQ(from_file.hash().size(), 64u);
}

TEST(Config, JsonHasValueOriginAndWhere) {
  const Config c = Config::resolve(std::nullopt, {{"lora.r", "8", "--lora-r"}});
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(j["lora.r"]["value"], 8);
  EXPECT_EQ(j["lora.r"]["origin"], "flag");
  EXPECT_EQ(j["lora.r"]["where"], "--lora-r");
  EXPECT_EQ(j["lora.alpha"]["origin"], "default");
}

TEST(Config, ConfigReferenceDocIsInSync) {
  // docs/CONFIG.md is generated from the schema; regenerate it with
  //   yeto-host config --keys --markdown > docs/CONFIG.md
  const std::string doc = yeto::test::read_text(fs::path(YETO_SOURCE_DIR) / "docs/CONFIG.md");
  EXPECT_EQ(doc, yeto::config::reference_markdown())
      << "docs/CONFIG.md is stale: run `yeto-host config --keys --markdown > docs/CONFIG.md`";
}

TEST(Config, ExampleConfigsAreValid) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(YETO_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".toml") continue;
    EXPECT_NO_THROW(Config::resolve(e.path(), {})) << e.path();
    ++n;
  }
  EXPECT_GE(n, 1u);
}
