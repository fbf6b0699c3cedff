#include "plugin/loader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "io/aliases.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"

namespace yeto::plugin {
namespace fs = std::filesystem;

// yeto-sign exits with the loader's codes: one table for every review tool.
static_assert(sign::refusal::unsigned_plugin == static_cast<int>(ExitCode::plugin_unsigned));
static_assert(sign::refusal::bad_signature == static_cast<int>(ExitCode::plugin_bad_signature));
static_assert(sign::refusal::unknown_key == static_cast<int>(ExitCode::plugin_unknown_key));
static_assert(sign::refusal::revoked_key == static_cast<int>(ExitCode::plugin_revoked_key));
static_assert(sign::refusal::not_found == static_cast<int>(ExitCode::plugin_not_found));
static_assert(sign::refusal::bad_manifest == static_cast<int>(ExitCode::plugin_manifest));

namespace {

std::string join_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

// "1.13.0" -> "1.13"; LibTorch's C++ ABI is only stable within a minor release.
std::string major_minor(const std::string& v) {
  const auto a = v.find('.');
  if (a == std::string::npos) return v;
  const auto b = v.find_first_not_of("0123456789", a + 1);
  return v.substr(0, b);
}

std::vector<std::string> c_list(const char* const* p) {
  std::vector<std::string> out;
  for (int i = 0; p && p[i] && i < 1024; ++i) out.emplace_back(p[i]);
  return out;
}

std::string c_str(const char* p) { return p ? std::string(p) : std::string(); }

void add_unique(std::vector<fs::path>& v, const fs::path& p) {
  const fs::path n = p.lexically_normal();
  if (std::find(v.begin(), v.end(), n) == v.end()) v.push_back(n);
}

std::vector<fs::path> resolve_relative(const config::Config& cfg, const std::string& key, const std::string& value,
                                       const std::vector<fs::path>& roots) {
  std::vector<fs::path> out;
  const fs::path p(value);
  if (p.is_absolute()) return {p};
  const config::Entry& e = cfg.entry(key);
  if (e.origin != config::Origin::default_value)
    add_unique(out, (e.base_dir.empty() ? fs::current_path() : e.base_dir) / p);
  for (const auto& r : roots) add_unique(out, r / p);
  return out;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed: plugins stay loaded for the life of the process.
std::vector<LoadedPlugin*>& registry() {
  static auto* v = new std::vector<LoadedPlugin*>();
  return *v;
}
std::vector<boost::dll::shared_library*>& libraries() {
  static auto* v = new std::vector<boost::dll::shared_library*>();
  return *v;
}

// A sealed anonymous file holding exactly the verified bytes; dlopen reads it through
// /proc/self/fd, so nothing on disk can change between verification and loading.
int sealed_copy(const std::string& name, const std::string& bytes) {
  const int fd = ::memfd_create(("yeto-plugin-" + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw Error("cannot create an in-memory copy of plugin '" + name + "': " + std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error("cannot write the in-memory copy of plugin '" + name + "': " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    ::close(fd);
    throw Error("cannot seal the in-memory copy of plugin '" + name + "': " + std::strerror(errno));
  }
  return fd;
}

const char* kTrustHelp =
    "Review the plugin, then trust its publisher's public key: add the .public file to "
    "plugins.trusted_keys (run.toml [plugins] trusted_keys = [\"publisher.public\"] or "
    "--set plugins.trusted_keys='[\"publisher.public\"]').";

}  // namespace

// ---- options ------------------------------------------------------------------------------

std::vector<fs::path> LoaderOptions::default_install_roots() {
  std::vector<fs::path> roots;
  try {
    const fs::path exe_dir = boost::dll::program_location().parent_path();
    roots.push_back((exe_dir / ".." / "stage").lexically_normal());
    roots.push_back((exe_dir / ".." / "lib" / "yeto").lexically_normal());
  } catch (const std::exception&) {
    // no /proc: no install roots; explicit configuration still works
  }
  return roots;
}

LoaderOptions LoaderOptions::from_config(const config::Config& cfg, const std::vector<fs::path>& install_roots) {
  LoaderOptions o;
  for (const auto& d : cfg.get_list("plugins.dirs"))
    for (const auto& p : resolve_relative(cfg, "plugins.dirs", d, install_roots)) add_unique(o.dirs, p);
  for (const auto& k : cfg.get_list("plugins.trusted_keys")) {
    const auto candidates = resolve_relative(cfg, "plugins.trusted_keys", k, {});
    const auto it = std::find_if(candidates.begin(), candidates.end(), [](const fs::path& p) { return fs::exists(p); });
    if (it == candidates.end())
      throw UsageError("plugins.trusted_keys: key file '" + k + "' does not exist (looked at " +
                       (candidates.empty() ? k : candidates.front().string()) + ")");
    add_unique(o.trusted_keys, *it);
  }
  for (const auto& r : install_roots) {
    std::error_code ec;
    if (!fs::is_directory(r / "keys", ec)) continue;
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(r / "keys", ec))
      if (e.path().extension() == ".public") found.push_back(e.path());
    std::sort(found.begin(), found.end());
    for (const auto& p : found) {
      add_unique(o.trusted_keys, p);
      add_unique(o.shipped_keys, p);
    }
  }
  for (const auto& r : cfg.get_list("plugins.revoked_keys")) {
    if (r.rfind("ed25519:", 0) == 0) {
      o.revoked.insert(r);
      continue;
    }
    const auto candidates = resolve_relative(cfg, "plugins.revoked_keys", r, {});
    const auto it = std::find_if(candidates.begin(), candidates.end(), [](const fs::path& p) { return fs::exists(p); });
    if (it == candidates.end())
      throw UsageError("plugins.revoked_keys: '" + r +
                       "' is neither a key fingerprint (ed25519:...) nor an existing public key file");
    try {
      o.revoked.insert(sign::load_public_key(*it).fingerprint());
    } catch (const sign::FormatError& e) {
      throw UsageError(std::string("plugins.revoked_keys: ") + e.what());
    }
  }
  for (const auto& a : cfg.get_list("plugins.accept_licenses")) o.accept_licenses.insert(a);
  o.allow_unsigned = cfg.get_bool("plugins.allow_unsigned");
  return o;
}

// ---- discovery ----------------------------------------------------------------------------

PluginFile read_plugin_file(const fs::path& path) {
  std::error_code ec;
  fs::path manifest = path;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() > sign::kManifestSuffix.size() && n.ends_with(sign::kManifestSuffix)) found.push_back(e.path());
    }
    if (found.size() != 1)
      throw Error(path.string() + ": expected exactly one *.yeto.json manifest in the directory, found " +
                      std::to_string(found.size()),
                  found.empty() ? ExitCode::plugin_not_found : ExitCode::plugin_manifest);
    manifest = found.front();
  } else if (path.extension() == ".so") {
    manifest = path.parent_path() / (path.stem().string() + std::string(sign::kManifestSuffix));
  }
  if (!fs::exists(manifest, ec))
    throw Error(manifest.string() + ": no plugin manifest here; a plugin ships <name>.so with <name>.yeto.json and "
                                    "<name>.yeto.sig (yeto_add_plugin writes both)",
                ExitCode::plugin_not_found);
  PluginFile f;
  f.manifest_path = manifest;
  try {
    f.manifest = sign::parse_manifest(sign::read_bytes(manifest), manifest.string());
  } catch (const sign::FormatError& e) {
    throw Error(std::string(e.what()), ExitCode::plugin_manifest);
  }
  f.library_path = manifest.parent_path() / f.manifest.library;
  f.signature_path = sign::signature_path_for(manifest);
  return f;
}

Catalog Catalog::scan(const std::vector<fs::path>& dirs) {
  Catalog c;
  std::set<fs::path> seen;  // nested or repeated directories list a manifest once
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    std::vector<fs::path> manifests;
    for (const auto& e : fs::recursive_directory_iterator(d, fs::directory_options::skip_permission_denied, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file(ec) && n.size() > sign::kManifestSuffix.size() && n.ends_with(sign::kManifestSuffix))
        manifests.push_back(e.path());
    }
    std::sort(manifests.begin(), manifests.end());
    for (const auto& m : manifests) {
      if (!seen.insert(fs::weakly_canonical(m, ec)).second) continue;
      try {
        c.plugins.push_back(read_plugin_file(m));
      } catch (const Error& e) {
        c.broken.emplace_back(m, e.what());
      }
    }
  }
  return c;
}

namespace {

const PluginFile* only_one(const std::vector<const PluginFile*>& found, const std::string& what) {
  if (found.empty()) return nullptr;
  if (found.size() == 1) return found.front();
  std::string files;
  for (const auto* f : found) files += (files.empty() ? "" : " and ") + f->manifest_path.string();
  throw Error(what + " is declared by more than one plugin manifest: " + files +
                  ". The host never picks one by search order: remove or rename all but one (plugin names and "
                  "aliases must be unique across plugins.dirs; `yeto-host plugins list` marks them DUPLICATE).",
              ExitCode::plugin_manifest);
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

const PluginFile* Catalog::find(const std::string& name) const {
  std::vector<const PluginFile*> by_name, by_alias;
  for (const auto& p : plugins) {
    if (p.manifest.name == name) by_name.push_back(&p);
    if (has(p.manifest.aliases, name)) by_alias.push_back(&p);
  }
  if (const PluginFile* f = only_one(by_name, "plugin name '" + name + "'")) return f;
  return only_one(by_alias, "plugin alias '" + name + "'");
}

std::vector<std::string> Catalog::duplicates() const {
  std::map<std::string, int> count;
  for (const auto& p : plugins) ++count[p.manifest.name];
  std::vector<std::string> out;
  for (const auto& [name, n] : count)
    if (n > 1) out.push_back(name);
  return out;
}

std::string signing_key_fingerprint(const PluginFile& file) {
  std::error_code ec;
  if (!fs::exists(file.signature_path, ec)) return "";
  try {
    return sign::parse_signature(sign::read_bytes(file.signature_path), file.signature_path.string()).key_fingerprint;
  } catch (const sign::FormatError&) {
    return "";
  }
}

namespace {

// Chooses among the plugins signed by one of options.shipped_keys; remembers the others that
// would have served (for the hint that names them).
struct ShippedChooser {
  ShippedChooser(const Catalog& catalog, const LoaderOptions& options) : catalog(catalog) {
    for (const auto& k : options.shipped_keys) {
      try {
        shipped.insert(sign::load_public_key(k).fingerprint());
      } catch (const sign::FormatError& e) {
        spdlog::warn("build key {} is unreadable, so no plugin is chosen by it: {}", k.string(), e.what());
      }
    }
  }

  // The one shipped plugin whose manifest `serves`; "" when none; two fail naming both.
  std::string choose(const std::function<bool(const sign::Manifest&)>& serves, const std::string& what) {
    std::set<std::string> names;
    for (const auto& p : catalog.plugins) {
      if (!serves(p.manifest)) continue;
      const std::string fp = signing_key_fingerprint(p);
      if (!fp.empty() && shipped.count(fp)) {
        names.insert(p.manifest.name);
      } else {
        const std::string who = "'" + p.manifest.name + "' (" + (fp.empty() ? "unsigned" : "signed by " + fp) + ")";
        if (!has(passed_over, who)) passed_over.push_back(who);
      }
    }
    if (names.size() > 1)
      throw Error(what + " is served by more than one plugin this build ships (" +
                      join_list(std::vector<std::string>(names.begin(), names.end())) +
                      "): choose one with --diffusion-adapter NAME (model.adapter)",
                  ExitCode::plugin_not_found);
    return names.empty() ? std::string() : *names.begin();
  }

  const Catalog& catalog;
  std::set<std::string> shipped;
  std::vector<std::string> passed_over;
};

}  // namespace

std::string plugin_serving(const Catalog& catalog, const LoaderOptions& options, const std::string& class_name) {
  ShippedChooser chooser(catalog, options);
  return chooser.choose([&](const sign::Manifest& m) { return has(m.pipelines, class_name) || has(m.classes, class_name); },
                        class_name);
}

Selection select_plugin(const config::Config& cfg, const Catalog& catalog, const LoaderOptions& options,
                        const nlohmann::json* model_index) {
  Selection s;
  if (const std::string& adapter = cfg.get_string("model.adapter"); !adapter.empty()) {
    s.name = adapter;
    s.reason = "model.adapter";
    return s;
  }
  ShippedChooser chooser(catalog, options);
  auto pick = [&](const std::function<bool(const sign::Manifest&)>& serves, const std::string& what) {
    const std::string name = chooser.choose(serves, what);
    if (name.empty()) return false;
    s.name = name;
    s.reason = what;
    return true;
  };
  const std::string& id = cfg.get_string("model.id");
  if (!id.empty() && pick([&](const sign::Manifest& m) { return has(m.aliases, id); }, "alias '" + id + "'")) return s;
  if (model_index && model_index->is_object() && model_index->contains("_class_name") &&
      (*model_index)["_class_name"].is_string()) {
    const std::string cls = (*model_index)["_class_name"].get<std::string>();
    if (pick([&](const sign::Manifest& m) { return has(m.pipelines, cls); }, cls + " (model_index.json _class_name)"))
      return s;
  }
  // A repository whose model_index.json names no served pipeline, or that has none (a release
  // layout), given by the hub id of a built-in alias: the plugin declaring the alias serves it.
  for (const auto& a : io::model_aliases())
    if (!id.empty() && a.hub_id == id &&
        pick([&](const sign::Manifest& m) { return has(m.aliases, a.alias); }, "hub id '" + id + "' (alias '" + a.alias + "')"))
      return s;
  if (!chooser.passed_over.empty())
    s.hint = "plugin " + join_list(chooser.passed_over) +
             " declares this model, but only a plugin signed by this build's own key is chosen without being named; "
             "if you trust it, pass --diffusion-adapter NAME (model.adapter)";
  return s;
}

// ---- provenance ---------------------------------------------------------------------------

nlohmann::json Provenance::to_json() const {
  return {{"name", name},
          {"version", version},
          {"abi", abi},
          {"torch_version", torch_version},
          {"library", library_path},
          {"library_sha256", library_sha256},
          {"manifest_sha256", manifest_sha256},
          {"key_fingerprint", key_fingerprint},
          {"key_source", key_source},
          {"signature_verified", signature_verified},
          {"dev_override", dev_override}};
}

void record_provenance(io::Provenance& provenance) {
  nlohmann::json trust = nlohmann::json::array();
  for (const auto& p : loaded_plugins()) {
    // plugin_trust holds the hash of the bytes that were verified and loaded; add_plugin
    // hashes the file as it is now, which only differs if it was replaced after loading.
    trust.push_back(p.to_json());
    try {
      provenance.add_plugin(p.name, p.version, p.library_path);
      if (provenance.plugins().back().sha256 != p.library_sha256)
        spdlog::warn("plugin '{}': {} changed on disk after it was loaded (loaded sha256 {}, now {})", p.name,
                     p.library_path, p.library_sha256, provenance.plugins().back().sha256);
    } catch (const std::exception& e) {
      spdlog::warn("plugin '{}': {} (provenance keeps the loaded hash under plugin_trust)", p.name, e.what());
    }
  }
  provenance.set("plugin_trust", trust);
}

std::vector<Provenance> loaded_plugins() {
  std::lock_guard lock(registry_mutex());
  std::vector<Provenance> out;
  for (const auto* p : registry()) out.push_back(p->provenance);
  return out;
}

// ---- verification (nothing is opened) -------------------------------------------------------

Verified verify(const PluginFile& file, const LoaderOptions& options) {
  const std::string& name = file.manifest.name;
  const std::string where = "plugin '" + name + "' (" + file.manifest_path.string() + ")";
  Verified v;
  v.file = file;
  std::string manifest_bytes;
  try {
    manifest_bytes = sign::read_bytes(file.manifest_path);
    v.file.manifest = sign::parse_manifest(manifest_bytes, file.manifest_path.string());
    v.library_bytes = sign::read_bytes(file.library_path);
  } catch (const sign::FormatError& e) {
    throw Error(where + ": " + e.what(), ExitCode::plugin_manifest);
  }
  const sign::Manifest& m = v.file.manifest;
  Provenance& p = v.provenance;
  p.name = m.name;
  p.version = m.version;
  p.abi = sign::abi_string(m.abi_major, m.abi_minor);
  p.torch_version = m.torch_version;
  p.library_path = file.library_path.string();
  p.library_sha256 = sign::sha256_hex(v.library_bytes);
  p.manifest_sha256 = sign::sha256_hex(manifest_bytes);

  std::error_code ec;
  if (!fs::exists(file.signature_path, ec)) {
    if (!options.allow_unsigned)
      throw Error(where + " is unsigned: " + file.signature_path.string() +
                      " does not exist. Sign it with `yeto-sign sign --key PUBLISHER.secret --manifest " +
                      file.manifest_path.filename().string() +
                      "` (yeto_add_plugin does this at build time) and trust the publisher's public key; for "
                      "development only, --allow-unsigned-plugins loads it anyway.",
                  ExitCode::plugin_unsigned);
    spdlog::warn("!!! DEVELOPMENT OVERRIDE: loading UNSIGNED plugin '{}' from {} (sha256 {}) because "
                 "plugins.allow_unsigned / --allow-unsigned-plugins is set. Never do this in production. !!!",
                 name, file.library_path.string(), p.library_sha256);
    p.dev_override = true;
  } else {
    sign::Signature sig;
    try {
      sig = sign::parse_signature(sign::read_bytes(file.signature_path), file.signature_path.string());
    } catch (const sign::FormatError& e) {
      throw Error(where + ": the signature file is malformed: " + e.what() +
                      ". Re-sign the plugin with yeto-sign, or reinstall it from its publisher.",
                  ExitCode::plugin_bad_signature);
    }
    std::vector<sign::TrustedKey> trusted;
    for (const auto& k : options.trusted_keys) {
      try {
        trusted.push_back({sign::load_public_key(k), k.string()});
      } catch (const sign::FormatError& e) {
        throw UsageError(std::string("trusted key: ") + e.what());
      }
    }
    const sign::Verification r = sign::verify_plugin(v.library_bytes, manifest_bytes, sig, trusted, options.revoked);
    p.key_fingerprint = r.key_fingerprint;
    p.key_source = r.key_source;
    switch (r.verdict) {
      case sign::Verdict::ok:
        p.signature_verified = true;
        break;
      case sign::Verdict::revoked_key:
        throw Error(where + " is refused: it is " + r.detail +
                        " (listed in plugins.revoked_keys). Obtain a build signed with the publisher's current key.",
                    ExitCode::plugin_revoked_key);
      case sign::Verdict::unknown_key:
        if (!options.allow_unsigned)
          throw Error(where + " is refused: it is " + r.detail + ". " + kTrustHelp, ExitCode::plugin_unknown_key);
        spdlog::warn("!!! DEVELOPMENT OVERRIDE: loading plugin '{}' signed by UNTRUSTED key {} because "
                     "plugins.allow_unsigned / --allow-unsigned-plugins is set. Never do this in production. !!!",
                     name, r.key_fingerprint);
        p.dev_override = true;
        break;
      case sign::Verdict::bad_signature:
        throw Error(where + " failed signature verification: " + r.detail +
                        ". Do not use this file: rebuild it, or reinstall it from its publisher.",
                    ExitCode::plugin_bad_signature);
    }
  }

  if (m.abi_major != YETO_ABI_VERSION_MAJOR)
    throw Error(where + " was built for plugin ABI " + p.abi + ", but this host speaks ABI " +
                    sign::abi_string(YETO_ABI_VERSION_MAJOR, YETO_ABI_VERSION_MINOR) +
                    " (major versions must match). Rebuild the plugin against this host's SDK, or use a host of ABI " +
                    std::to_string(m.abi_major) + ".x.",
                ExitCode::plugin_abi_mismatch);
  const std::string host_torch = options.host_torch_version.empty() ? build_info().torch_version
                                                                    : options.host_torch_version;
  if (!m.torch_version.empty() && major_minor(m.torch_version) != major_minor(host_torch))
    throw Error(where + " was built against LibTorch " + m.torch_version + ", but this host runs LibTorch " +
                    host_torch + "; LibTorch's C++ ABI differs between minor versions. Rebuild the plugin against "
                    "LibTorch " + major_minor(host_torch) + ".",
                ExitCode::plugin_torch_mismatch);
  if (m.license_must_acknowledge && !options.accept_licenses.count(m.name))
    throw Error(where + " asks you to acknowledge its license before it is used:\n\n  " + m.license_notice +
                    "\n\nIf you accept it, add \"" + m.name + "\" to plugins.accept_licenses (run.toml [plugins] "
                    "accept_licenses = [\"" + m.name + "\"] or --set plugins.accept_licenses='[\"" + m.name + "\"]').",
                ExitCode::plugin_license);
  return v;
}

// ---- loading ------------------------------------------------------------------------------

std::size_t min_plugin_table_size() { return offsetof(yeto_plugin_v1, generate) + sizeof(void*); }
std::size_t min_descriptor_size() {
  return offsetof(yeto_plugin_descriptor, license_must_acknowledge) + sizeof(std::uint32_t);
}

const LoadedPlugin& load_file(const PluginFile& file, const LoaderOptions& options, const yeto_host_api* host_api) {
  Verified v = verify(file, options);
  const std::string& name = v.file.manifest.name;
  const std::string where = "plugin '" + name + "' (" + file.library_path.string() + ")";

  std::lock_guard lock(registry_mutex());
  for (const auto* p : registry())
    if (p->provenance.library_sha256 == v.provenance.library_sha256 &&
        p->provenance.manifest_sha256 == v.provenance.manifest_sha256 &&
        p->provenance.key_fingerprint == v.provenance.key_fingerprint &&
        p->provenance.dev_override == v.provenance.dev_override) {
      if (v.provenance.dev_override)
        spdlog::warn("!!! DEVELOPMENT OVERRIDE: plugin '{}' is in use without a trusted signature !!!", name);
      return *p;
    }

  const int fd = sealed_copy(name, v.library_bytes);
  auto* lib = new boost::dll::shared_library();  // never deleted: plugins are never unloaded
  try {
    lib->load("/proc/self/fd/" + std::to_string(fd),
              boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    ::close(fd);
    delete lib;
    throw Error(where + " cannot be opened: " + e.what() +
                    ". Check that its dependencies (e.g. LibTorch) are installed: ldd " + file.library_path.string(),
                ExitCode::failure);
  }
  // The descriptor stays open for the life of the process: the dynamic loader identifies
  // libraries by name, so a reused /proc/self/fd/N would make a later dlopen return this
  // library instead of opening the new one.
  libraries().push_back(lib);

  if (!lib->has(YETO_PLUGIN_ENTRY_SYMBOL))
    throw Error(where + " exports no '" YETO_PLUGIN_ENTRY_SYMBOL "' entry point, so it is not a Yeto plugin (or "
                "its entry was hidden). Define it with YETO_PLUGIN(YourPlugin) from <yeto/plugin.hpp>, or export "
                "`yeto_plugin_entry` with YETO_PLUGIN_EXPORT.",
                ExitCode::plugin_no_entry);
  auto& entry = lib->get<yeto_status(const yeto_host_api*, const yeto_plugin_v1**, yeto_error*)>(
      YETO_PLUGIN_ENTRY_SYMBOL);

  char buf[4096] = {0};
  yeto_error err{sizeof(yeto_error), YETO_ABI_VERSION, buf, sizeof buf, 0};
  const yeto_plugin_v1* table = nullptr;
  const yeto_status s = entry(host_api, &table, &err);
  if (s != YETO_OK)
    throw Error(where + " failed to start (status " + std::to_string(s) + "): " + (err.length ? buf : "no message"),
                ExitCode::failure);
  if (!table) throw Error(where + ": the entry point returned no hook table", ExitCode::plugin_abi_mismatch);
  if (YETO_ABI_MAJOR(table->abi_version) != YETO_ABI_VERSION_MAJOR)
    throw Error(where + ": its hook table is ABI " +
                    sign::abi_string(YETO_ABI_MAJOR(table->abi_version), YETO_ABI_MINOR(table->abi_version)) +
                    " but this host speaks ABI " + sign::abi_string(YETO_ABI_VERSION_MAJOR, YETO_ABI_VERSION_MINOR) +
                    "; rebuild the plugin against this host's SDK.",
                ExitCode::plugin_abi_mismatch);
  if (table->struct_size < min_plugin_table_size())
    throw Error(where + ": its hook table is " + std::to_string(table->struct_size) + " bytes, smaller than ABI " +
                    std::to_string(YETO_ABI_VERSION_MAJOR) + ".0's " + std::to_string(min_plugin_table_size()) +
                    "; rebuild the plugin against this host's SDK.",
                ExitCode::plugin_abi_mismatch);
  auto loaded = std::make_unique<LoadedPlugin>();
  std::memcpy(&loaded->table, table, std::min<std::size_t>(sizeof loaded->table, table->struct_size));
  loaded->table.struct_size = static_cast<std::uint32_t>(std::min<std::size_t>(sizeof loaded->table, table->struct_size));

  const yeto_plugin_descriptor* d = table->descriptor;
  if (!d) throw Error(where + ": the hook table has no descriptor", ExitCode::plugin_abi_mismatch);
  if (YETO_ABI_MAJOR(d->abi_version) != YETO_ABI_VERSION_MAJOR || d->struct_size < min_descriptor_size())
    throw Error(where + ": its descriptor is ABI " +
                    sign::abi_string(YETO_ABI_MAJOR(d->abi_version), YETO_ABI_MINOR(d->abi_version)) + " with " +
                    std::to_string(d->struct_size) + " bytes; this host needs ABI " +
                    std::to_string(YETO_ABI_VERSION_MAJOR) + ".x with at least " +
                    std::to_string(min_descriptor_size()) + " bytes. Rebuild the plugin against this host's SDK.",
                ExitCode::plugin_abi_mismatch);
  std::memcpy(&loaded->descriptor, d, std::min<std::size_t>(sizeof loaded->descriptor, d->struct_size));
  loaded->descriptor.struct_size =
      static_cast<std::uint32_t>(std::min<std::size_t>(sizeof loaded->descriptor, d->struct_size));
  loaded->table.descriptor = &loaded->descriptor;

  // The descriptor must say what the (signed) manifest says.
  const sign::Manifest& m = v.file.manifest;
  const yeto_plugin_descriptor& ld = loaded->descriptor;
  std::vector<std::string> diffs;
  auto cmp = [&](const std::string& field, const std::string& desc, const std::string& man) {
    if (desc != man) diffs.push_back(field + ": descriptor '" + desc + "' vs manifest '" + man + "'");
  };
  cmp("name", c_str(ld.name), m.name);
  cmp("version", c_str(ld.version), m.version);
  cmp("families", join_list(c_list(ld.families)), join_list(m.families));
  cmp("aliases", join_list(c_list(ld.aliases)), join_list(m.aliases));
  cmp("capabilities", join_list(sign::capability_list(ld.capabilities)),
      join_list(sign::capability_list(sign::capability_bits(m.capabilities))));
  cmp("torch_version", c_str(ld.torch_version), m.torch_version);
  cmp("license notice", c_str(ld.license_notice), m.license_notice);
  cmp("license must_acknowledge", ld.license_must_acknowledge ? "true" : "false",
      m.license_must_acknowledge ? "true" : "false");
  if (!diffs.empty()) {
    std::string msg = where + ": its descriptor disagrees with its signed manifest (" + join_list(diffs) +
                      "). The manifest is what was reviewed and signed; rebuild the plugin with yeto_add_plugin so "
                      "both come from one place.";
    throw Error(msg, ExitCode::plugin_manifest);
  }

  // A declared capability promises its hooks.
  const yeto_plugin_v1& t = loaded->table;
  struct Need {
    std::uint64_t cap;
    const char* hook;
    bool present;
  };
  const Need needs[] = {
      {0, "create", t.create != nullptr},
      {0, "destroy", t.destroy != nullptr},
      {YETO_CAP_PIPELINE, "load_pipeline", t.load_pipeline != nullptr},
      {YETO_CAP_PIPELINE, "prepare", t.prepare != nullptr},
      {YETO_CAP_COMPONENTS, "register_components", t.register_components != nullptr},
      {YETO_CAP_TRAINABLE, "trainable_parameters", t.trainable_parameters != nullptr},
      {YETO_CAP_ENCODE_MEDIA, "encode_media", t.encode_media != nullptr},
      {YETO_CAP_ENCODE_CONDITIONING, "encode_conditioning", t.encode_conditioning != nullptr},
      {YETO_CAP_DENOISER, "denoiser_kwargs", t.denoiser_kwargs != nullptr},
      {YETO_CAP_DENOISER, "denoise", t.denoise != nullptr},
      {YETO_CAP_ALIGN, "align", t.align != nullptr},
      {YETO_CAP_LOSS_STEP, "loss_step", t.loss_step != nullptr},
      {YETO_CAP_ARTIFACTS, "save_artifact", t.save_artifact != nullptr},
      {YETO_CAP_ARTIFACTS, "load_artifact", t.load_artifact != nullptr},
      {YETO_CAP_GENERATE, "generate", t.generate != nullptr},
      {YETO_CAP_PRESETS, "presets", t.presets != nullptr},
  };
  for (const auto& n : needs)
    if ((n.cap == 0 || (ld.capabilities & n.cap)) && !n.present)
      throw Error(where + ": hook '" + n.hook + "' is NULL although " +
                      (n.cap == 0 ? std::string("every plugin needs it")
                                  : "capability '" + join_list(sign::capability_list(n.cap)) + "' is declared"),
                  ExitCode::plugin_manifest);

  loaded->manifest = m;
  loaded->provenance = v.provenance;
  loaded->host_api = host_api;
  if (v.provenance.dev_override)
    spdlog::warn("!!! DEVELOPMENT OVERRIDE: plugin '{}' {} loaded WITHOUT a trusted signature !!!", name, m.version);
  else
    spdlog::info("loaded plugin {} {} (ABI {}, sha256 {}, signed by {})", name, m.version, v.provenance.abi,
                 v.provenance.library_sha256.substr(0, 16), v.provenance.key_fingerprint);
  if (m.license_must_acknowledge)
    spdlog::warn("plugin '{}' is used under its licence, acknowledged in plugins.accept_licenses: {}", name,
                 m.license_notice);
  registry().push_back(loaded.release());
  return *registry().back();
}

const LoadedPlugin& load(const std::string& name, const LoaderOptions& options, const yeto_host_api* host_api) {
  const Catalog catalog = Catalog::scan(options.dirs);
  const PluginFile* f = catalog.find(name);
  if (!f) {
    std::vector<std::string> names;
    for (const auto& p : catalog.plugins) {
      names.push_back(p.manifest.name);
      for (const auto& a : p.manifest.aliases) names.push_back(a);
    }
    std::vector<std::string> dirs;
    for (const auto& d : options.dirs) dirs.push_back(d.string());
    throw Error("no plugin named '" + name + "'" + did_you_mean(name, names) + " in " + join_list(dirs) +
                    " (available: " + join_list(names) +
                    "). Put <name>.so, <name>.yeto.json and <name>.yeto.sig into one of plugins.dirs.",
                ExitCode::plugin_not_found);
  }
  return load_file(*f, options, host_api);
}

const LoadedPlugin* load_adapter(const config::Config& cfg, const yeto_host_api* host_api,
                                 const std::vector<fs::path>& install_roots, const nlohmann::json* model_index) {
  const LoaderOptions options = LoaderOptions::from_config(cfg, install_roots);
  const Selection sel = select_plugin(cfg, Catalog::scan(options.dirs), options, model_index);
  if (sel.name.empty()) return nullptr;
  return &load(sel.name, options, host_api);
}

}  // namespace yeto::plugin
