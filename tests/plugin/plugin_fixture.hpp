// Helpers for plugin tests: copies of the built test plugins that a test may tamper with or
// re-sign, keys, loader options, and the "was the library ever opened" marker.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "plugin/loader.hpp"
#include "signing.hpp"

namespace yeto::test {

namespace fs = std::filesystem;

struct PluginCopy {
  fs::path dir;
  fs::path manifest;
  fs::path library;
  fs::path signature;
};

// Copies the built variant `name` (tests/plugin/variants/<name>) into `dest`/<name>/.
PluginCopy copy_variant(const std::string& name, const fs::path& dest);
// Copies the three files of the plugin described by `manifest` into `dest`.
PluginCopy copy_plugin(const fs::path& manifest, const fs::path& dest);

// Rewrites the manifest (parsed as JSON) with `edit`; the old signature no longer matches.
void edit_manifest(const PluginCopy& p, const std::function<void(nlohmann::json&)>& edit);
// Signs library + manifest with `key` (replacing the signature file).
void resign(const PluginCopy& p, const sign::SecretKey& key);
// Writes `key`'s public half to `path` and returns it.
fs::path write_public_key(const sign::SecretKey& key, const fs::path& path);

// Options that search `dir` only and trust exactly `trusted` (public key files).
plugin::LoaderOptions options_for(const fs::path& dir, const std::vector<fs::path>& trusted);

// The key the build signs in-tree plugins with (public half).
fs::path build_public_key();

// A host API table with sizes and versions set and every function NULL (enough for the
// loader and for plugins that only check the ABI at entry).
const yeto_host_api* bare_host_api();

// Points $YETO_TEST_MARKER at `path` (test plugins append a line when they are opened).
void set_marker(const fs::path& path);
bool marker_exists(const fs::path& path);

}  // namespace yeto::test
