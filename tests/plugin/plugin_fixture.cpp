#include "plugin_fixture.hpp"

#include <cstdlib>
#include <fstream>

#include "yeto/plugin.h"

namespace yeto::test {

PluginCopy copy_plugin(const fs::path& manifest, const fs::path& dest) {
  const plugin::PluginFile f = plugin::read_plugin_file(manifest);
  fs::create_directories(dest);
  PluginCopy p;
  p.dir = dest;
  p.manifest = dest / f.manifest_path.filename();
  p.library = dest / f.library_path.filename();
  p.signature = dest / f.signature_path.filename();
  fs::copy_file(f.manifest_path, p.manifest, fs::copy_options::overwrite_existing);
  fs::copy_file(f.library_path, p.library, fs::copy_options::overwrite_existing);
  if (fs::exists(f.signature_path)) fs::copy_file(f.signature_path, p.signature, fs::copy_options::overwrite_existing);
  return p;
}

PluginCopy copy_variant(const std::string& name, const fs::path& dest) {
  return copy_plugin(fs::path(YETO_TEST_VARIANTS) / name / (name + ".yeto.json"), dest / name);
}

void edit_manifest(const PluginCopy& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(sign::read_bytes(p.manifest));
  edit(j);
  sign::write_text(p.manifest, j.dump(2) + "\n");
}

void resign(const PluginCopy& p, const sign::SecretKey& key) {
  const sign::Signature s = sign::sign_plugin(sign::read_bytes(p.library), sign::read_bytes(p.manifest), key);
  sign::write_text(p.signature, s.to_text());
}

fs::path write_public_key(const sign::SecretKey& key, const fs::path& path) {
  sign::write_text(path, key.public_key().to_text());
  return path;
}

plugin::LoaderOptions options_for(const fs::path& dir, const std::vector<fs::path>& trusted) {
  plugin::LoaderOptions o;
  o.dirs = {dir};
  o.trusted_keys = trusted;
  return o;
}

fs::path build_public_key() { return YETO_BUILD_KEY_PUBLIC; }

const yeto_host_api* bare_host_api() {
  static const yeto_host_api api = [] {
    yeto_host_api a{};
    a.struct_size = sizeof a;
    a.abi_version = YETO_ABI_VERSION;
    a.host_version = "test";
    a.torch_version = "";
    return a;
  }();
  return &api;
}

void set_marker(const fs::path& path) { ::setenv("YETO_TEST_MARKER", path.c_str(), 1); }
bool marker_exists(const fs::path& path) { return fs::exists(path); }

}  // namespace yeto::test
