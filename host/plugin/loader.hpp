// Finding, verifying and loading signed plugins.
//
// Order of trust, for the one plugin a run uses (select_plugin):
//   1. discover manifests (<name>.yeto.json) in the configured directories: text only;
//   2. read the library, manifest and signature bytes once and verify the Ed25519
//      signature against the trusted keys (revocation first);
//   3. check the manifest's ABI major, LibTorch version and license acknowledgement;
//   4. only then open the library, from a sealed in-memory copy of exactly the bytes that
//      were verified (so the file cannot be swapped between check and open);
//   5. check the entry symbol, the hook table and descriptor sizes and versions, and that
//      the descriptor agrees with the manifest.
// Every refusal is a yeto::Error with its own plugin_* exit code and a message saying what
// to do. Libraries are never closed (toolchain note, gotcha 13).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config.hpp"
#include "io/provenance.hpp"
#include "signing.hpp"
#include "yeto/plugin.h"

namespace yeto::plugin {

struct LoaderOptions {
  std::vector<std::filesystem::path> dirs;          // searched in order
  std::vector<std::filesystem::path> trusted_keys;  // public key files
  std::set<std::string> revoked;                    // fingerprints
  std::set<std::string> accept_licenses;            // plugin names
  // The keys of the build or installation itself (<root>/keys/*.public): only a plugin
  // signed by one of them (a shipped, reviewed family) is ever chosen without being named.
  std::vector<std::filesystem::path> shipped_keys;
  bool allow_unsigned = false;                      // dev override: unsigned / unknown key
  std::string host_torch_version;                   // "1.13.0"; empty: the build's

  // From a resolved run configuration: relative dirs and key files resolve against the
  // config file's directory, then against each install root; every root's keys/*.public
  // is trusted (the build's own key lives in <build>/stage/keys).
  static LoaderOptions from_config(const config::Config& cfg,
                                   const std::vector<std::filesystem::path>& install_roots = default_install_roots());
  // <exe>/../stage (a build tree) and <exe>/../lib/yeto (an installation).
  static std::vector<std::filesystem::path> default_install_roots();
};

// A manifest found on disk, with the files that belong to it.
struct PluginFile {
  std::filesystem::path manifest_path;
  std::filesystem::path library_path;
  std::filesystem::path signature_path;
  sign::Manifest manifest;
};

// Discovers manifests (never opens a library). Unreadable or malformed manifests are kept
// as errors so `plugins list` can show them.
struct Catalog {
  std::vector<PluginFile> plugins;
  std::vector<std::pair<std::filesystem::path, std::string>> broken;  // manifest, problem
  static Catalog scan(const std::vector<std::filesystem::path>& dirs);
  // By plugin name, then by alias; nullptr when nothing matches. Two manifests of one name
  // (or an alias two plugins declare) are never resolved by order: throws yeto::Error
  // (plugin_manifest) naming both files.
  const PluginFile* find(const std::string& name_or_alias) const;
  // Plugin names that more than one manifest in the searched directories declares.
  std::vector<std::string> duplicates() const;
};

// The fingerprint a plugin's signature file names, without verifying anything; empty when
// the plugin is unsigned or its signature file is unreadable.
std::string signing_key_fingerprint(const PluginFile& file);

// Which plugin serves a run, and why.
struct Selection {
  std::string name;    // empty: none could be chosen (see `hint`)
  std::string reason;  // "model.adapter", "alias 'flux-dev'", "FluxPipeline in model_index.json"
  std::string hint;    // when empty: what the user can do (names the plugins that were passed over)
};

// The plugin a run uses, in this order:
//   1. model.adapter (--diffusion-adapter): any plugin the trust rules accept;
//   2. model.id is an alias a plugin's manifest declares;
//   3. model_index.json's "_class_name" is a pipeline a plugin's manifest declares.
// 2 and 3 choose only a plugin signed by one of options.shipped_keys (the build's own key):
// a plugin signed by any other key, even a trusted one, is used only when named. Throws
// yeto::Error (plugin_not_found) when two shipped plugins claim the alias or class.
Selection select_plugin(const config::Config& cfg, const Catalog& catalog, const LoaderOptions& options,
                        const nlohmann::json* model_index = nullptr);

// The plugin this build ships (signed by one of options.shipped_keys) whose manifest declares
// `class_name` as a pipeline it serves or a component class it registers; "" when none. Throws
// yeto::Error (plugin_not_found) when two shipped plugins declare it.
std::string plugin_serving(const Catalog& catalog, const LoaderOptions& options, const std::string& class_name);

// Reads a manifest given as the manifest, the library, or a directory holding one.
PluginFile read_plugin_file(const std::filesystem::path& path);

// What provenance records about a plugin.
struct Provenance {
  std::string name;
  std::string version;
  std::string abi;
  std::string torch_version;
  std::string library_path;
  std::string library_sha256;
  std::string manifest_sha256;
  std::string key_fingerprint;  // empty when unsigned
  std::string key_source;
  bool signature_verified = false;
  bool dev_override = false;  // loaded through plugins.allow_unsigned
  nlohmann::json to_json() const;
};

// The outcome of every pre-open check, with the bytes that were verified.
struct Verified {
  PluginFile file;
  Provenance provenance;
  std::string library_bytes;
};

// Steps 2 and 3. Throws yeto::Error with the refusal's exit code.
Verified verify(const PluginFile& file, const LoaderOptions& options);

// A loaded plugin: its tables as the host sees them (copied, fields beyond what the plugin's
// struct_size covers zeroed).
struct LoadedPlugin {
  yeto_plugin_v1 table{};  // an ABI 1.0 plugin's table has the 1.1 fields (presets) NULL
  yeto_plugin_descriptor descriptor{};
  sign::Manifest manifest;
  Provenance provenance;
  // The host API table the entry point received; the plugin keeps calling it for the life
  // of the process (later pipelines rebind it: plugin::bind_host_api).
  const yeto_host_api* host_api = nullptr;
};

// Steps 1-5 for `name` (a plugin name or alias). `host_api` is passed to the entry point and
// must live for the process. Loading the same verified library twice returns the first load.
const LoadedPlugin& load(const std::string& name, const LoaderOptions& options, const yeto_host_api* host_api);

// Steps 2-5 for one already discovered plugin file.
const LoadedPlugin& load_file(const PluginFile& file, const LoaderOptions& options, const yeto_host_api* host_api);

// The one plugin select_plugin chooses, loaded with the run's trust settings; nullptr when
// none is chosen. No other discovered plugin is opened.
const LoadedPlugin* load_adapter(const config::Config& cfg, const yeto_host_api* host_api,
                                 const std::vector<std::filesystem::path>& install_roots =
                                     LoaderOptions::default_install_roots(),
                                 const nlohmann::json* model_index = nullptr);

// Every plugin loaded in this process, in load order (for the run's provenance).
std::vector<Provenance> loaded_plugins();

// Adds every loaded plugin to a run's provenance record: add_plugin (name, version, path,
// SHA-256) and, under "plugin_trust", each one's full record (manifest hash, signing key
// fingerprint and source, whether the development override was used).
void record_provenance(io::Provenance& provenance);

// Smallest sizes (through the last v1.0 field) the host accepts: ABI 1.0 plugins load, their
// tables simply lack the 1.1 fields.
std::size_t min_plugin_table_size();
std::size_t min_descriptor_size();

}  // namespace yeto::plugin
