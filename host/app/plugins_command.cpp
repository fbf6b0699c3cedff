// `yeto-host plugins list | info NAME | verify PATH`: everything here reads manifests and
// signatures only; no plugin library is ever opened, so no plugin code runs.
#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "plugin/loader.hpp"

namespace yeto::app {
namespace {

using plugin::LoaderOptions;
using plugin::PluginFile;

struct Check {
  bool ok = false;
  int code = 0;
  std::string message;
  plugin::Provenance provenance;
};

Check check(const PluginFile& f, const LoaderOptions& o) {
  Check c;
  try {
    c.provenance = plugin::verify(f, o).provenance;
    c.ok = true;
    c.message = c.provenance.dev_override ? "accepted only through the development override" : "ok";
  } catch (const Error& e) {
    c.code = e.exit_code();
    c.message = e.what();
  }
  return c;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

nlohmann::json manifest_json(const PluginFile& f) {
  const auto& m = f.manifest;
  return {{"name", m.name},
          {"version", m.version},
          {"abi", sign::abi_string(m.abi_major, m.abi_minor)},
          {"torch_version", m.torch_version},
          {"families", m.families},
          {"aliases", m.aliases},
          {"pipelines", m.pipelines},
          {"capabilities", m.capabilities},
          {"license", {{"notice", m.license_notice}, {"must_acknowledge", m.license_must_acknowledge}}},
          {"description", m.description},
          {"manifest", f.manifest_path.string()},
          {"library", f.library_path.string()},
          {"signature", f.signature_path.string()}};
}

nlohmann::json check_json(const Check& c) {
  nlohmann::json j = {{"accepted", c.ok}, {"exit_code", c.code}, {"message", c.message}};
  if (c.ok) j["provenance"] = c.provenance.to_json();
  return j;
}

// A plugin another manifest shares its name with is never loaded by that name (Catalog::find
// refuses to guess); the list says so on each of them.
bool duplicated(const std::vector<std::string>& duplicates, const PluginFile& f) {
  return std::find(duplicates.begin(), duplicates.end(), f.manifest.name) != duplicates.end();
}

// How a plugin is chosen: only one signed by a shipped key is chosen without being named.
std::string selection_note(const PluginFile& f, const Check& c, const LoaderOptions& o) {
  if (!c.ok || c.provenance.dev_override) return "";
  for (const auto& k : o.shipped_keys) {
    try {
      if (sign::load_public_key(k).fingerprint() == c.provenance.key_fingerprint)
        return f.manifest.aliases.empty() && f.manifest.pipelines.empty()
                   ? "shipped"
                   : "shipped: chosen for its aliases and pipeline classes";
    } catch (const sign::FormatError&) {
    }
  }
  return "used only when named (--diffusion-adapter " + f.manifest.name + ")";
}

int list(CommandContext& ctx, const LoaderOptions& o) {
  const auto catalog = plugin::Catalog::scan(o.dirs);
  const auto duplicates = catalog.duplicates();
  if (ctx.has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& f : catalog.plugins) {
      auto j = manifest_json(f);
      const Check c = check(f, o);
      j["check"] = check_json(c);
      j["duplicate"] = duplicated(duplicates, f);
      j["selection"] = selection_note(f, c, o);
      out.push_back(j);
    }
    for (const auto& [path, problem] : catalog.broken)
      out.push_back({{"manifest", path.string()}, {"error", problem}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (catalog.plugins.empty() && catalog.broken.empty()) {
    std::cout << "no plugins found in:";
    for (const auto& d : o.dirs) std::cout << " " << d.string();
    std::cout << "\n";
    return 0;
  }
  for (const auto& f : catalog.plugins) {
    const Check c = check(f, o);
    const auto& m = f.manifest;
    const std::string note = selection_note(f, c, o);
    std::cout << m.name << " " << m.version << "  abi " << sign::abi_string(m.abi_major, m.abi_minor)
              << "  families " << joined(m.families) << "  aliases " << joined(m.aliases) << "  pipelines "
              << joined(m.pipelines) << "  "
              << (c.ok ? (c.provenance.dev_override ? "DEV-OVERRIDE" : "trusted")
                       : "REFUSED (exit " + std::to_string(c.code) + ")")
              << (duplicated(duplicates, f) ? "  DUPLICATE" : "") << "\n    " << f.manifest_path.string() << "\n";
    if (!c.ok) std::cout << "    " << c.message << "\n";
    if (duplicated(duplicates, f))
      std::cout << "    another manifest declares the name '" << m.name
                << "': neither is loaded by that name until all but one are removed or renamed\n";
    else if (!note.empty())
      std::cout << "    " << note << "\n";
  }
  for (const auto& [path, problem] : catalog.broken) std::cout << "BROKEN " << path.string() << "\n    " << problem << "\n";
  return 0;
}

void print_details(const PluginFile& f, const Check& c) {
  const auto& m = f.manifest;
  std::cout << "name:          " << m.name << "\n"
            << "version:       " << m.version << "\n"
            << "abi:           " << sign::abi_string(m.abi_major, m.abi_minor) << "\n"
            << "libtorch:      " << (m.torch_version.empty() ? "(none)" : m.torch_version) << "\n"
            << "families:      " << joined(m.families) << "\n"
            << "aliases:       " << joined(m.aliases) << "\n"
            << "pipelines:     " << joined(m.pipelines) << "\n"
            << "capabilities:  " << joined(m.capabilities) << "\n"
            << "description:   " << m.description << "\n"
            << "license:       " << (m.license_notice.empty() ? "(no notice)" : m.license_notice)
            << (m.license_must_acknowledge ? "  [must be acknowledged: plugins.accept_licenses]" : "") << "\n"
            << "manifest:      " << f.manifest_path.string() << "\n"
            << "library:       " << f.library_path.string() << "\n"
            << "signature:     " << f.signature_path.string() << "\n";
  if (c.ok)
    std::cout << "library sha256: " << c.provenance.library_sha256 << "\n"
              << "signed by:     " << (c.provenance.key_fingerprint.empty() ? "(unsigned)" : c.provenance.key_fingerprint)
              << (c.provenance.key_source.empty() ? "" : " (" + c.provenance.key_source + ")") << "\n"
              << "status:        " << c.message << "\n";
  else
    std::cout << "status:        REFUSED (exit " << c.code << "): " << c.message << "\n";
}

int info(CommandContext& ctx, const LoaderOptions& o, const std::string& name) {
  const auto catalog = plugin::Catalog::scan(o.dirs);
  const PluginFile* f = catalog.find(name);
  if (!f) {
    std::vector<std::string> dirs;
    for (const auto& d : o.dirs) dirs.push_back(d.string());
    std::string names;
    for (const auto& p : catalog.plugins) names += (names.empty() ? "" : ", ") + p.manifest.name;
    throw Error("no plugin named '" + name + "' in " + joined(dirs) + " (available: " + (names.empty() ? "none" : names) +
                    ")",
                ExitCode::plugin_not_found);
  }
  const Check c = check(*f, o);
  if (ctx.has("json")) {
    auto j = manifest_json(*f);
    j["check"] = check_json(c);
    j["selection"] = selection_note(*f, c, o);
    std::cout << j.dump(2) << "\n";
  } else {
    print_details(*f, c);
    if (const std::string note = selection_note(*f, c, o); !note.empty()) std::cout << "selection:     " << note << "\n";
  }
  // A refused plugin is a refusal, for scripts too: the loader's exit code.
  return c.ok ? 0 : c.code;
}

int verify(CommandContext& ctx, const LoaderOptions& o, const std::string& path) {
  const PluginFile f = plugin::read_plugin_file(path);
  const auto v = plugin::verify(f, o);  // throws the refusal with its exit code
  if (ctx.has("json")) {
    std::cout << v.provenance.to_json().dump(2) << "\n";
    return 0;
  }
  std::cout << (v.provenance.dev_override ? "ACCEPTED ONLY THROUGH THE DEVELOPMENT OVERRIDE: " : "ok: ") << f.manifest.name
            << " " << f.manifest.version << " (ABI " << v.provenance.abi << ", library sha256 "
            << v.provenance.library_sha256 << ")"
            << (v.provenance.key_fingerprint.empty() ? "" : ", signed by " + v.provenance.key_fingerprint) << "\n";
  return 0;
}

int run_plugins(CommandContext& ctx) {
  const auto& pos = ctx.positionals();
  if (pos.empty()) throw UsageError("plugins: give a subcommand: list, info NAME or verify PATH");
  const std::string& sub = pos[0];
  const LoaderOptions o = LoaderOptions::from_config(ctx.config());
  if (sub == "list") {
    if (pos.size() != 1) throw UsageError("plugins list takes no argument");
    return list(ctx, o);
  }
  if (sub == "info" || sub == "verify") {
    if (pos.size() != 2) throw UsageError("plugins " + sub + " needs exactly one " + (sub == "info" ? "NAME" : "PATH"));
    return sub == "info" ? info(ctx, o, pos[1]) : verify(ctx, o, pos[1]);
  }
  throw UsageError("plugins: unknown subcommand '" + sub + "' (use list, info NAME or verify PATH)");
}

}  // namespace

void register_plugins_command(Registry& r) {
  Command c;
  c.name = "plugins";
  c.summary = "List, inspect and verify signed plugins (list | info NAME | verify PATH).";
  c.description =
      "Reads plugin manifests and signatures from plugins.dirs and checks them against plugins.trusted_keys "
      "(plus the build's or installation's keys/*.public), plugins.revoked_keys and plugins.accept_licenses, and shows "
      "the aliases and pipeline classes each plugin declares; two manifests of one name are marked DUPLICATE and "
      "neither is loaded by that name. "
      "Never opens a plugin library: no plugin code runs. `info NAME` and `verify PATH` (a manifest, a .so or a "
      "directory) exit with the refusal's code: 20 unsigned, 21 bad signature, 22 unknown key, 23 revoked key, "
      "24 ABI mismatch, 25 LibTorch mismatch, 27 license not acknowledged, 28 not found, 29 bad manifest.";
  c.positionals = "list|info NAME|verify PATH";
  c.min_positionals = 1;
  c.max_positionals = 2;
  c.run_config = true;
  c.options = {{"json", "", "Print as JSON."}};
  c.run = run_plugins;
  r.add(std::move(c));
}

}  // namespace yeto::app
