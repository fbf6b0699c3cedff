// Plugin trust: keys and signatures, every refusal of the loader (each with its own exit
// code, and without the library ever being opened when the refusal comes before opening),
// the forward-compatibility rule, and the `plugins` command, which never opens a library.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/error.hpp"
#include "io/aliases.hpp"
#include "plugin/loader.hpp"
#include "plugin_fixture.hpp"
#include "signing.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace yeto;
using namespace yeto::test;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

// Loads `name` and returns the refusal's exit code (0 when it loaded) and message.
std::pair<int, std::string> try_load(const std::string& name, const plugin::LoaderOptions& o) {
  try {
    plugin::load(name, o, bare_host_api());
    return {0, ""};
  } catch (const Error& e) {
    return {e.exit_code(), e.what()};
  }
}

class Trust : public ::testing::Test {
 protected:
  void SetUp() override {
    marker_ = tmp_ / "marker.txt";
    set_marker(marker_);
  }
  plugin::LoaderOptions trusting_build(const fs::path& dir) { return options_for(dir, {build_public_key()}); }
  TempDir tmp_;
  fs::path marker_;
};

}  // namespace

// ---- keys and signatures ---------------------------------------------------------------------

TEST(Signing, KeyFilesRoundTripWithFingerprint) {
  const auto k = sign::generate_key("alice@example");
  const std::string pub = k.public_key().to_text();
  EXPECT_EQ(pub.rfind("yeto-ed25519-public ", 0), 0u) << pub;
  EXPECT_EQ(k.to_text().rfind("yeto-ed25519-secret ", 0), 0u);
  const auto parsed = sign::parse_public_key(pub, "pub");
  EXPECT_EQ(parsed.bytes, k.public_key().bytes);
  EXPECT_EQ(parsed.comment, "alice@example");
  const auto fp = parsed.fingerprint();
  EXPECT_EQ(fp.rfind("ed25519:", 0), 0u);
  EXPECT_EQ(fp.size(), 8u + 32u);
  EXPECT_EQ(sign::parse_secret_key(k.to_text(), "sec").public_key().fingerprint(), fp);
  EXPECT_NE(sign::generate_key("").public_key().fingerprint(), fp);
}

TEST(Signing, MalformedKeysNameTheFile) {
  try {
    sign::parse_public_key("ssh-ed25519 AAAA", "keys/bob.public");
    FAIL() << "accepted";
  } catch (const sign::FormatError& e) {
    EXPECT_TRUE(contains(e.what(), "keys/bob.public")) << e.what();
    EXPECT_TRUE(contains(e.what(), "yeto-ed25519-public")) << e.what();
  }
  const auto k = sign::generate_key("");
  EXPECT_THROW(sign::parse_secret_key(k.public_key().to_text(), "x"), sign::FormatError);
  EXPECT_THROW(sign::parse_public_key("yeto-ed25519-public AAAA", "x"), sign::FormatError);
}

TEST(Signing, VerdictsForTamperUnknownAndRevokedKeys) {
  const auto k = sign::generate_key("");
  const std::string manifest = sign::read_bytes(fs::path(YETO_TEST_VARIANTS) / "cbasic" / "cbasic.yeto.json");
  std::string lib = "\x7f" "ELF pretend library bytes";
  const auto sig = sign::sign_plugin(lib, manifest, k);
  EXPECT_EQ(sig.name, "cbasic");
  EXPECT_EQ(sig.version, "1.2.3");
  EXPECT_EQ(sig.abi, sign::abi_string(YETO_ABI_VERSION_MAJOR, YETO_ABI_VERSION_MINOR));
  EXPECT_EQ(sig.abi, "1.3");
  const std::vector<sign::TrustedKey> trusted = {{k.public_key(), "k.public"}};
  EXPECT_EQ(sign::verify_plugin(lib, manifest, sig, trusted, {}).verdict, sign::Verdict::ok);
  // The signature file's text round-trips.
  const auto again = sign::parse_signature(sig.to_text(), "sig");
  EXPECT_EQ(sign::verify_plugin(lib, manifest, again, trusted, {}).verdict, sign::Verdict::ok);

  std::string tampered = lib;
  tampered[3] ^= 1;
  const auto v = sign::verify_plugin(tampered, manifest, sig, trusted, {});
  EXPECT_EQ(v.verdict, sign::Verdict::bad_signature);
  EXPECT_TRUE(contains(v.detail, "library")) << v.detail;

  EXPECT_EQ(sign::verify_plugin(lib, manifest + " ", sig, trusted, {}).verdict, sign::Verdict::bad_signature);
  const auto other = sign::generate_key("");
  EXPECT_EQ(sign::verify_plugin(lib, manifest, sig, {{other.public_key(), "o"}}, {}).verdict, sign::Verdict::unknown_key);
  EXPECT_EQ(sign::verify_plugin(lib, manifest, sig, trusted, {k.public_key().fingerprint()}).verdict,
            sign::Verdict::revoked_key);

  // A forged signature line (right hashes, wrong bytes) fails the Ed25519 check itself.
  auto forged = sig;
  forged.signature[0] ^= 1;
  EXPECT_EQ(sign::verify_plugin(lib, manifest, forged, trusted, {}).verdict, sign::Verdict::bad_signature);
  // Renaming the plugin in the signature breaks it too.
  auto renamed = sig;
  renamed.name = "other";
  EXPECT_EQ(sign::verify_plugin(lib, manifest, renamed, trusted, {}).verdict, sign::Verdict::bad_signature);
}

TEST(Signing, YetoSignToolKeygenSignVerify) {
  TempDir tmp;
  const auto p = copy_variant("cbasic", tmp.path());
  const std::string bin = YETO_SIGN_BIN;
  auto r = run_process({bin, "keygen", "--out", (tmp / "pub").string(), "--comment", "publisher"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "ed25519:"));
  EXPECT_EQ(fs::status(tmp / "pub.secret").permissions() & fs::perms::group_read, fs::perms::none);
  r = run_process({bin, "keygen", "--out", (tmp / "pub").string()});
  EXPECT_EQ(r.exit_code, 2) << "keygen must not overwrite a key without --force";
  r = run_process({bin, "sign", "--key", (tmp / "pub.secret").string(), "--manifest", p.manifest.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", p.manifest.string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  // Every refusal exits with the loader's own code (the 20-29 table of the host).
  r = run_process({bin, "verify", "--key", build_public_key().string(), "--manifest", p.manifest.string()});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_unknown_key)) << r.all();
  EXPECT_TRUE(contains(r.err, "not among")) << r.err;
  const std::string fp = sign::load_public_key(tmp / "pub.public").fingerprint();
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", p.manifest.string(),
                   "--revoked", fp});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_revoked_key)) << r.all();
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", p.manifest.string(),
                   "--signature", (tmp / "absent.yeto.sig").string()});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_unsigned)) << r.all();
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", (tmp / "nope.yeto.json").string()});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_not_found)) << r.all();
  sign::write_text(tmp / "broken.yeto.json", "{\"format\": \"yeto-plugin-manifest\"}");
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", (tmp / "broken.yeto.json").string()});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_manifest)) << r.all();
  EXPECT_TRUE(contains(r.err, "broken.yeto.json")) << r.err;
  std::string bytes = sign::read_bytes(p.library);
  bytes[bytes.size() / 2] ^= 0x20;
  sign::write_text(p.library, bytes);
  r = run_process({bin, "verify", "--key", (tmp / "pub.public").string(), "--manifest", p.manifest.string()});
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_bad_signature)) << r.all();
  EXPECT_TRUE(contains(r.err, "modified or replaced")) << r.err;
  r = run_process({bin, "verify", "--manifest", p.manifest.string()});
  EXPECT_EQ(r.exit_code, 2) << "a usage error is not a refusal";
  r = run_process({bin, "fingerprint", (tmp / "pub.public").string()});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("ed25519:", 0), 0u);
}

// ---- the loader -------------------------------------------------------------------------------

TEST_F(Trust, BuildSignedPluginLoadsAndIsRecorded) {
  copy_variant("cbasic", tmp_ / "plugins");
  const auto& p = plugin::load("cbasic", trusting_build(tmp_ / "plugins"), bare_host_api());
  EXPECT_TRUE(marker_exists(marker_)) << "the constructor marker must appear once the library is really opened";
  EXPECT_EQ(p.manifest.name, "cbasic");
  EXPECT_STREQ(p.descriptor.name, "cbasic");
  EXPECT_EQ(p.descriptor.capabilities, YETO_CAP_TRAINABLE);
  EXPECT_NE(p.table.trainable_parameters, nullptr);
  EXPECT_TRUE(p.provenance.signature_verified);
  EXPECT_FALSE(p.provenance.dev_override);
  EXPECT_EQ(p.provenance.key_fingerprint, sign::load_public_key(build_public_key()).fingerprint());
  EXPECT_EQ(p.provenance.library_sha256, sign::sha256_hex(sign::read_bytes(tmp_ / "plugins/cbasic/cbasic.so")));
  const auto loaded = plugin::loaded_plugins();
  ASSERT_FALSE(loaded.empty());
  EXPECT_EQ(loaded.back().to_json()["library_sha256"], p.provenance.library_sha256);
  // Loading it again (also through its alias) returns the same plugin.
  EXPECT_EQ(&plugin::load("cbasic-alias", trusting_build(tmp_ / "plugins"), bare_host_api()), &p);
}

TEST_F(Trust, UnsignedIsRefusedBeforeOpening) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  fs::remove(c.signature);
  const auto [code, msg] = try_load("cbasic", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_unsigned)) << msg;
  EXPECT_TRUE(contains(msg, "unsigned")) << msg;
  EXPECT_TRUE(contains(msg, "yeto-sign sign")) << msg;
  EXPECT_FALSE(marker_exists(marker_)) << "the library was opened although it was refused";
}

TEST_F(Trust, OneByteTamperIsRefusedBeforeOpening) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  std::string bytes = sign::read_bytes(c.library);
  bytes[bytes.size() / 3] ^= 0x01;
  sign::write_text(c.library, bytes);
  const auto [code, msg] = try_load("cbasic", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_bad_signature)) << msg;
  EXPECT_TRUE(contains(msg, "modified or replaced")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
}

TEST_F(Trust, TamperedManifestIsRefused) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  edit_manifest(c, [](nlohmann::json& j) { j["capabilities"] = {"trainable", "generate"}; });
  const auto [code, msg] = try_load("cbasic", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_bad_signature)) << msg;
  EXPECT_TRUE(contains(msg, "manifest was modified")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
}

TEST_F(Trust, UntrustedKeyIsRefusedBeforeOpening) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  resign(c, sign::generate_key("stranger"));
  const auto [code, msg] = try_load("cbasic", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_unknown_key)) << msg;
  EXPECT_TRUE(contains(msg, "plugins.trusted_keys")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
}

TEST_F(Trust, KeyTrustedThroughConfigLoads) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  const auto k = sign::generate_key("publisher");
  resign(c, k);
  const auto pub = write_public_key(k, tmp_ / "publisher.public");
  const auto cfg = config::Config::resolve(std::nullopt, {{"plugins.dirs", (tmp_ / "plugins").string(), "--set"},
                                                          {"plugins.trusted_keys", pub.string(), "--set"}});
  const auto o = plugin::LoaderOptions::from_config(cfg, {});
  const auto& p = plugin::load("cbasic", o, bare_host_api());
  EXPECT_EQ(p.provenance.key_fingerprint, k.public_key().fingerprint());
  EXPECT_EQ(p.provenance.key_source, pub.string());
}

TEST_F(Trust, RevokedKeyIsRefusedEvenWhenTrusted) {
  copy_variant("cbasic", tmp_ / "plugins");
  auto o = trusting_build(tmp_ / "plugins");
  o.revoked = {sign::load_public_key(build_public_key()).fingerprint()};
  const auto [code, msg] = try_load("cbasic", o);
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_revoked_key)) << msg;
  EXPECT_TRUE(contains(msg, "revoked")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
  // Revocation by key file, through the configuration.
  const auto cfg = config::Config::resolve(std::nullopt, {{"plugins.revoked_keys", build_public_key().string(), "--set"}});
  EXPECT_EQ(plugin::LoaderOptions::from_config(cfg, {}).revoked, o.revoked);
}

TEST_F(Trust, OtherAbiMajorInManifestIsRefusedBeforeOpening) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  const auto k = sign::generate_key("");
  edit_manifest(c, [](nlohmann::json& j) { j["abi"] = "2.0"; });
  resign(c, k);
  const auto [code, msg] = try_load("cbasic", options_for(tmp_ / "plugins", {write_public_key(k, tmp_ / "k.public")}));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_abi_mismatch)) << msg;
  EXPECT_TRUE(contains(msg, "ABI 2.")) << msg;  // 2.<the SDK's minor>
  EXPECT_FALSE(marker_exists(marker_));
}

TEST_F(Trust, OtherAbiMajorInTablesIsRefused) {
  copy_variant("cabi2", tmp_ / "plugins");
  const auto [code, msg] = try_load("cabi2", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_abi_mismatch)) << msg;
  EXPECT_TRUE(contains(msg, "ABI 2.")) << msg;  // 2.<the SDK's minor>
}

TEST_F(Trust, LargerStructSizeFromNewerMinorIsAccepted) {
  copy_variant("cfuture", tmp_ / "plugins");
  const auto& p = plugin::load("cfuture", trusting_build(tmp_ / "plugins"), bare_host_api());
  // The host copied only what it knows; the plugin's own tables are larger.
  EXPECT_EQ(p.table.struct_size, sizeof(yeto_plugin_v1));
  EXPECT_EQ(p.descriptor.struct_size, sizeof(yeto_plugin_descriptor));
  EXPECT_EQ(YETO_ABI_MINOR(p.descriptor.abi_version), 7u);
  EXPECT_STREQ(p.descriptor.name, "cfuture");
  EXPECT_NE(p.table.trainable_parameters, nullptr);
}

TEST_F(Trust, Abi10PluginLoadsWithoutThe11Fields) {
  // Built against ABI 1.0: its hook table ends before `presets`.
  copy_variant("cv10", tmp_ / "plugins");
  const auto& p = plugin::load("cv10", trusting_build(tmp_ / "plugins"), bare_host_api());
  EXPECT_EQ(p.table.struct_size, offsetof(yeto_plugin_v1, presets));
  EXPECT_EQ(YETO_ABI_MINOR(p.table.abi_version), 0u);
  EXPECT_FALSE(YETO_HAS_FIELD(yeto_plugin_v1, &p.table, presets));
  EXPECT_EQ(p.table.presets, nullptr);
  EXPECT_NE(p.table.trainable_parameters, nullptr);
  EXPECT_EQ(p.host_api, bare_host_api());
}

TEST_F(Trust, PresetsCapabilityIsSignedAndLoaded) {
  copy_variant("cpresets", tmp_ / "plugins");
  const auto& p = plugin::load("cpresets", trusting_build(tmp_ / "plugins"), bare_host_api());
  EXPECT_EQ(p.descriptor.capabilities, YETO_CAP_TRAINABLE | YETO_CAP_PRESETS);
  EXPECT_EQ(p.manifest.capabilities, (std::vector<std::string>{"trainable", "presets"}));
  EXPECT_EQ(sign::capability_bits({"presets"}), YETO_CAP_PRESETS);
  EXPECT_NE(p.table.presets, nullptr);
}

TEST_F(Trust, TableSmallerThanAbi10IsRefused) {
  copy_variant("csmall", tmp_ / "plugins");
  const auto [code, msg] = try_load("csmall", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_abi_mismatch)) << msg;
  EXPECT_TRUE(contains(msg, "smaller than ABI 1.0")) << msg;
}

TEST_F(Trust, OtherLibTorchIsRefusedBeforeOpening) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  const auto k = sign::generate_key("");
  edit_manifest(c, [](nlohmann::json& j) { j["torch_version"] = "1.99.0"; });
  resign(c, k);
  auto o = options_for(tmp_ / "plugins", {write_public_key(k, tmp_ / "k.public")});
  o.host_torch_version = "1.13.0";
  const auto [code, msg] = try_load("cbasic", o);
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_torch_mismatch)) << msg;
  EXPECT_TRUE(contains(msg, "LibTorch 1.99.0")) << msg;
  EXPECT_TRUE(contains(msg, "Rebuild")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
}

TEST_F(Trust, MissingEntrySymbolIsRefused) {
  copy_variant("cnoentry", tmp_ / "plugins");
  const auto [code, msg] = try_load("cnoentry", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_no_entry)) << msg;
  EXPECT_TRUE(contains(msg, "yeto_plugin_entry")) << msg;
}

TEST_F(Trust, LicenseMustBeAcknowledged) {
  copy_variant("clicense", tmp_ / "plugins");
  auto o = trusting_build(tmp_ / "plugins");
  const auto [code, msg] = try_load("clicense", o);
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_license)) << msg;
  EXPECT_TRUE(contains(msg, "Test-only license: you must accept it; really.")) << msg;
  EXPECT_TRUE(contains(msg, "plugins.accept_licenses")) << msg;
  EXPECT_FALSE(marker_exists(marker_));
  o.accept_licenses = {"clicense"};
  EXPECT_EQ(try_load("clicense", o).first, 0);
  EXPECT_TRUE(marker_exists(marker_));
}

TEST_F(Trust, UnknownNameSuggestsAndListsWhatExists) {
  copy_variant("cbasic", tmp_ / "plugins");
  const auto [code, msg] = try_load("cbasci", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_not_found)) << msg;
  EXPECT_TRUE(contains(msg, "did you mean 'cbasic'")) << msg;
}

TEST_F(Trust, DescriptorMustAgreeWithManifest) {
  copy_variant("cmismatch", tmp_ / "plugins");
  const auto [code, msg] = try_load("cmismatch", trusting_build(tmp_ / "plugins"));
  EXPECT_EQ(code, static_cast<int>(ExitCode::plugin_manifest)) << msg;
  EXPECT_TRUE(contains(msg, "version: descriptor '9.9.9' vs manifest '1.2.3'")) << msg;
}

TEST_F(Trust, MalformedManifestIsReported) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  sign::write_text(c.manifest, "{\"format\": \"yeto-plugin-manifest\", \"name\": \"cbasic\"}");
  const auto catalog = plugin::Catalog::scan({tmp_ / "plugins"});
  ASSERT_EQ(catalog.broken.size(), 1u);
  EXPECT_TRUE(contains(catalog.broken[0].second, "version")) << catalog.broken[0].second;
  try {
    plugin::read_plugin_file(c.manifest);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::plugin_manifest);
  }
}

TEST_F(Trust, DevelopmentOverrideLoadsUnsignedAndUntrustedButNeverTampered) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  fs::remove(c.signature);
  auto o = trusting_build(tmp_ / "plugins");
  o.allow_unsigned = true;
  const auto& p = plugin::load("cbasic", o, bare_host_api());
  EXPECT_TRUE(p.provenance.dev_override);
  EXPECT_FALSE(p.provenance.signature_verified);
  // A tampered (signed) plugin stays refused under the override.
  const auto t = copy_variant("cfuture", tmp_ / "plugins2");
  std::string bytes = sign::read_bytes(t.library);
  bytes[bytes.size() / 2] ^= 0x01;
  sign::write_text(t.library, bytes);
  auto o2 = trusting_build(tmp_ / "plugins2");
  o2.allow_unsigned = true;
  EXPECT_EQ(try_load("cfuture", o2).first, static_cast<int>(ExitCode::plugin_bad_signature));
}

TEST_F(Trust, OnlyThePluginTheRunNamesIsOpened) {
  // A fresh key makes these loads distinct from any earlier load in this process.
  const auto k = sign::generate_key("");
  for (const char* v : {"cbasic", "cfuture", "clicense"}) resign(copy_variant(v, tmp_ / "plugins"), k);
  const auto pub = write_public_key(k, tmp_ / "k.public");
  auto cfg_with = [&](std::vector<config::Override> extra) {
    std::vector<config::Override> o = {{"plugins.dirs", (tmp_ / "plugins").string(), "--set"},
                                       {"plugins.trusted_keys", pub.string(), "--set"}};
    o.insert(o.end(), extra.begin(), extra.end());
    return config::Config::resolve(std::nullopt, o);
  };
  // Naming nothing opens nothing.
  EXPECT_EQ(plugin::load_adapter(cfg_with({}), bare_host_api(), {}), nullptr);
  EXPECT_FALSE(marker_exists(marker_));
  // --diffusion-adapter NAME (an alias works too) opens exactly that plugin.
  const auto* p = plugin::load_adapter(cfg_with({{"model.adapter", "cfuture-alias", "--diffusion-adapter"}}),
                                       bare_host_api(), {});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->manifest.name, "cfuture");
  EXPECT_EQ(read_text(marker_), "cfuture constructor ran\n");
  // A model alias a plugin's manifest declares chooses it only when the plugin is signed by a
  // shipped key (an install root's keys/): a trusted key alone is not enough.
  EXPECT_EQ(plugin::load_adapter(cfg_with({{"model.id", "cbasic-alias", "--model"}}), bare_host_api(), {}), nullptr);
  EXPECT_EQ(read_text(marker_), "cfuture constructor ran\n");
  fs::create_directories(tmp_ / "root/keys");
  fs::copy_file(pub, tmp_ / "root/keys/k.public");
  const auto* q = plugin::load_adapter(cfg_with({{"model.id", "cbasic-alias", "--model"}}), bare_host_api(),
                                       {tmp_ / "root"});
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->manifest.name, "cbasic");
  EXPECT_EQ(read_text(marker_), "cfuture constructor ran\ncbasic constructor ran\n");
}

// ---- choosing the plugin of a run ---------------------------------------------------------------

class SelectPlugin : public ::testing::Test {
 protected:
  // A copy of cbasic named `name` that declares `pipelines`, signed by `key`.
  PluginCopy variant(const std::string& name, const std::vector<std::string>& pipelines, const sign::SecretKey& key,
                     const std::string& dir = "plugins") {
    const auto c = copy_variant("cbasic", tmp_ / dir / name);
    edit_manifest(c, [&](nlohmann::json& j) {
      j["name"] = name;
      j["aliases"] = {name + "-alias"};
      j["pipelines"] = pipelines;
    });
    resign(c, key);
    return c;
  }
  plugin::LoaderOptions options() {
    auto o = options_for(tmp_ / "plugins", {write_public_key(shipped_, tmp_ / "shipped.public"),
                                            write_public_key(other_, tmp_ / "other.public")});
    o.shipped_keys = {tmp_ / "shipped.public"};
    return o;
  }
  static config::Config cfg(std::vector<config::Override> o) { return config::Config::resolve(std::nullopt, o); }
  static nlohmann::json index(const std::string& cls) { return {{"_class_name", cls}, {"transformer", {"diffusers", "X"}}}; }
  plugin::Selection select(const std::vector<config::Override>& o, const nlohmann::json& model_index) {
    const auto opts = options();
    return plugin::select_plugin(cfg(o), plugin::Catalog::scan(opts.dirs), opts, &model_index);
  }
  TempDir tmp_;
  const sign::SecretKey shipped_ = sign::generate_key("shipped");
  const sign::SecretKey other_ = sign::generate_key("third party");
};

TEST_F(SelectPlugin, TheFlagThenAnAliasThenThePipelineClassOfAShippedPlugin) {
  variant("tinyfam", {"TinyPipeline"}, shipped_);
  auto s = select({}, index("TinyPipeline"));
  EXPECT_EQ(s.name, "tinyfam");
  EXPECT_TRUE(contains(s.reason, "TinyPipeline")) << s.reason;
  s = select({{"model.id", "tinyfam-alias", "--model"}}, nlohmann::json::object());
  EXPECT_EQ(s.name, "tinyfam");
  EXPECT_EQ(s.reason, "alias 'tinyfam-alias'");
  s = select({{"model.adapter", "mine", "--diffusion-adapter"}}, index("TinyPipeline"));
  EXPECT_EQ(s.name, "mine");
  EXPECT_EQ(s.reason, "model.adapter");
  s = select({}, index("OtherPipeline"));
  EXPECT_EQ(s.name, "");
  EXPECT_EQ(s.hint, "");
  EXPECT_EQ(select({}, nlohmann::json::object()).name, "");
}

TEST_F(SelectPlugin, APluginSignedByAnotherTrustedKeyIsNeverChosenImplicitly) {
  variant("mirror", {"TinyPipeline"}, other_);
  auto s = select({}, index("TinyPipeline"));
  EXPECT_EQ(s.name, "");
  EXPECT_TRUE(contains(s.hint, "'mirror' (signed by " + other_.public_key().fingerprint() + ")")) << s.hint;
  EXPECT_TRUE(contains(s.hint, "--diffusion-adapter")) << s.hint;
  EXPECT_EQ(select({{"model.id", "mirror-alias", "--model"}}, nlohmann::json::object()).name, "");
  // Named, the trust rules accept it (a trusted key).
  const auto o = options();
  const auto catalog = plugin::Catalog::scan(o.dirs);
  ASSERT_NE(catalog.find("mirror"), nullptr);
  EXPECT_TRUE(plugin::verify(*catalog.find("mirror"), o).provenance.signature_verified);
  EXPECT_EQ(select({{"model.adapter", "mirror", "--diffusion-adapter"}}, index("TinyPipeline")).name, "mirror");
  // Next to a shipped plugin of the same class, the shipped one is chosen.
  variant("tinyfam", {"TinyPipeline"}, shipped_);
  EXPECT_EQ(select({}, index("TinyPipeline")).name, "tinyfam");
  // An unsigned copy is passed over the same way.
  const auto u = variant("loose", {"LoosePipeline"}, shipped_);
  fs::remove(u.signature);
  s = select({}, index("LoosePipeline"));
  EXPECT_EQ(s.name, "");
  EXPECT_TRUE(contains(s.hint, "'loose' (unsigned)")) << s.hint;
}

TEST_F(SelectPlugin, TwoShippedPluginsOfOneClassAreAmbiguous) {
  variant("one", {"TinyPipeline"}, shipped_);
  variant("two", {"TinyPipeline", "TwoPipeline"}, shipped_);
  try {
    select({}, index("TinyPipeline"));
    FAIL() << "an ambiguous class was resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::plugin_not_found);
    EXPECT_TRUE(contains(e.what(), "one, two")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--diffusion-adapter")) << e.what();
  }
  EXPECT_EQ(select({}, index("TwoPipeline")).name, "two");
}

TEST_F(SelectPlugin, ShippedFamiliesDeclareTheirAliasesAndPipelineClasses) {
  const fs::path stage = fs::path(YETO_STAGE_DIR) / "plugins";
  if (!fs::exists(stage / "flux.yeto.json")) GTEST_SKIP() << "the model families are not part of this build";
  const std::map<std::string, std::vector<std::string>> pipelines = {
      {"flux", {"FluxPipeline"}},
      {"sd35", {"StableDiffusion3Pipeline"}},
      {"ltx", {"LTXPipeline"}},
      {"pixart", {"PixArtAlphaPipeline", "PixArtSigmaPipeline"}},
      {"wan", {"WanPipeline"}}};
  const auto catalog = plugin::Catalog::scan({stage});
  for (const auto& [name, classes] : pipelines) {
    const plugin::PluginFile* f = catalog.find(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->manifest.pipelines, classes) << name;
  }
  // Every built-in model alias is declared by exactly one shipped family (its model family).
  for (const auto& a : io::model_aliases()) {
    const plugin::PluginFile* f = catalog.find(a.alias);
    ASSERT_NE(f, nullptr) << a.alias;
    EXPECT_EQ(f->manifest.name, a.family) << a.alias;
  }
  EXPECT_TRUE(catalog.duplicates().empty());
}

TEST_F(Trust, TwoPluginsOfOneNameAreReportedNotResolvedByOrder) {
  copy_variant("cbasic", tmp_ / "plugins/a");
  copy_variant("cbasic", tmp_ / "plugins/b");
  const auto catalog = plugin::Catalog::scan({tmp_ / "plugins", tmp_ / "plugins/a"});
  EXPECT_EQ(catalog.plugins.size(), 2u) << "a nested directory lists a manifest once";
  EXPECT_EQ(catalog.duplicates(), std::vector<std::string>{"cbasic"});
  for (const char* name : {"cbasic", "cbasic-alias"}) {
    try {
      catalog.find(name);
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::plugin_manifest);
      EXPECT_TRUE(contains(e.what(), (tmp_ / "plugins/a/cbasic/cbasic.yeto.json").string())) << e.what();
      EXPECT_TRUE(contains(e.what(), (tmp_ / "plugins/b/cbasic/cbasic.yeto.json").string())) << e.what();
    }
  }
  EXPECT_EQ(try_load("cbasic", trusting_build(tmp_ / "plugins")).first, static_cast<int>(ExitCode::plugin_manifest));
  EXPECT_FALSE(marker_exists(marker_));

  const std::vector<std::string> cfg = {"--set", "plugins.dirs=" + (tmp_ / "plugins").string(), "--set",
                                        "plugins.trusted_keys=" + build_public_key().string()};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), cfg.begin(), cfg.end());
    return a;
  };
  auto r = run_host(args({"plugins", "list"}));
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "DUPLICATE")) << r.out;
  r = run_host(args({"plugins", "list", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0]["duplicate"].get<bool>());
  r = run_host(args({"plugins", "info", "cbasic"}));
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_manifest)) << r.all();
}

TEST_F(Trust, LoadedPluginsGoIntoTheRunProvenance) {
  const auto k = sign::generate_key("");
  resign(copy_variant("cbasic", tmp_ / "plugins"), k);
  const auto& p =
      plugin::load("cbasic", options_for(tmp_ / "plugins", {write_public_key(k, tmp_ / "k.public")}), bare_host_api());
  io::Provenance prov;
  plugin::record_provenance(prov);
  ASSERT_FALSE(prov.plugins().empty());
  EXPECT_EQ(prov.plugins().back().name, "cbasic");
  EXPECT_EQ(prov.plugins().back().sha256, p.provenance.library_sha256);
  const std::string j = prov.to_json().dump();
  EXPECT_TRUE(contains(j, k.public_key().fingerprint())) << j;
  EXPECT_TRUE(contains(j, p.provenance.manifest_sha256)) << j;
}

// ---- yeto-host plugins: reads manifests, never opens libraries ---------------------------------

TEST_F(Trust, PluginsCommandNeverOpensALibrary) {
  const auto c = copy_variant("cbasic", tmp_ / "plugins");
  copy_variant("clicense", tmp_ / "plugins");
  const std::map<std::string, std::string> env = {{"YETO_TEST_MARKER", marker_.string()}};
  const std::vector<std::string> cfg = {"--set", "plugins.dirs=" + (tmp_ / "plugins").string(), "--set",
                                        "plugins.trusted_keys=" + build_public_key().string()};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), cfg.begin(), cfg.end());
    return a;
  };
  auto r = run_host(args({"plugins", "list"}), "", env);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "cbasic 1.2.3")) << r.out;
  EXPECT_TRUE(contains(r.out, "trusted")) << r.out;
  EXPECT_TRUE(contains(r.out, "REFUSED (exit 27)")) << r.out;  // clicense, not acknowledged
  // info on a refused plugin exits with the refusal's code, as verify does.
  r = run_host(args({"plugins", "info", "clicense"}), "", env);
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_license)) << r.all();
  EXPECT_TRUE(contains(r.out, "REFUSED (exit 27)")) << r.out;
  r = run_host(args({"plugins", "info", "clicense", "--json"}), "", env);
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_license)) << r.all();
  EXPECT_EQ(nlohmann::json::parse(r.out)["check"]["accepted"], false);

  r = run_host(args({"plugins", "info", "cbasic-alias", "--json"}), "", env);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["name"], "cbasic");
  EXPECT_EQ(j["check"]["accepted"], true);
  EXPECT_EQ(j["check"]["provenance"]["key_fingerprint"], sign::load_public_key(build_public_key()).fingerprint());

  r = run_host(args({"plugins", "verify", c.library.string()}), "", env);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "ok: cbasic 1.2.3")) << r.out;
  EXPECT_FALSE(marker_exists(marker_)) << "a plugins subcommand opened a plugin library";

  // verify exits with the refusal's own code.
  std::string bytes = sign::read_bytes(c.library);
  bytes[100] ^= 0x01;
  sign::write_text(c.library, bytes);
  r = run_host(args({"plugins", "verify", c.dir.string()}), "", env);
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_bad_signature)) << r.all();
  fs::remove(c.signature);
  r = run_host(args({"plugins", "verify", c.manifest.string()}), "", env);
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_unsigned)) << r.all();
  r = run_host(args({"plugins", "verify", c.manifest.string(), "--allow-unsigned-plugins"}), "", env);
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "DEVELOPMENT OVERRIDE")) << r.all();
  r = run_host(args({"plugins", "info", "nope"}), "", env);
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::plugin_not_found)) << r.all();
  r = run_host(args({"plugins", "frobnicate"}), "", env);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_FALSE(marker_exists(marker_));
}

TEST(PluginsCommand, BuildTreeTrustsItsOwnKeyByDefault) {
  // yeto-host in <build>/bin finds <build>/stage/plugins and trusts <build>/stage/keys.
  const auto r = run_host({"plugins", "info", "tinyden"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.out, "status:        ok")) << r.out;
  EXPECT_TRUE(contains(r.out, sign::load_public_key(build_public_key()).fingerprint())) << r.out;
}

TEST_F(Trust, EachLoadOpensItsOwnLibrary) {
  // Regression: libraries are opened through /proc/self/fd/N; a reused N must never hand
  // back a previously loaded plugin in place of a new one.
  copy_variant("cbasic", tmp_ / "plugins");
  copy_variant("cfuture", tmp_ / "plugins");
  copy_variant("clicense", tmp_ / "plugins");
  auto o = trusting_build(tmp_ / "plugins");
  o.accept_licenses = {"clicense"};
  for (const char* name : {"cbasic", "cfuture", "clicense"})
    EXPECT_STREQ(plugin::load(name, o, bare_host_api()).descriptor.name, name);
}
