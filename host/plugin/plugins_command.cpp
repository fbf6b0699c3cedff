// `yeto-host plugins list | info NAME | verify PATH`: everything here reads manifests and
// signatures only; no plugin library is ever opened, so no plugin code runs.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "plugin/loader.hpp"

namespace yeto::cli {
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

int list(CommandContext& ctx, const LoaderOptions& o) {
  const auto catalog = plugin::Catalog::scan(o.dirs);
  if (ctx.has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& f : catalog.plugins) {
      auto j = manifest_json(f);
      j["check"] = check_json(check(f, o));
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
    std::cout << m.name << " " << m.version << "  abi " << sign::abi_string(m.abi_major, m.abi_minor)
              << "  families " << joined(m.families) << "  aliases " << joined(m.aliases) << "  "
              << (c.ok ? (c.provenance.dev_override ? "DEV-OVERRIDE" : "trusted")
                       : "REFUSED (exit " + std::to_string(c.code) + ")")
              << "\n    " << f.manifest_path.string() << "\n";
    if (!c.ok) std::cout << "    " << c.message << "\n";
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
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  print_details(*f, c);
  return 0;
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

void register_plugin_commands(Registry& r) {
  Command c;
  c.name = "plugins";
  c.summary = "List, inspect and verify signed plugins (list | info NAME | verify PATH).";
  c.description =
      "Reads plugin manifests and signatures from plugins.dirs and checks them against plugins.trusted_keys "
      "(plus the build's or installation's keys/*.public), plugins.revoked_keys and plugins.accept_licenses. "
      "Never opens a plugin library: no plugin code runs. `verify PATH` (a manifest, a .so or a directory) "
      "exits with the refusal's code: 20 unsigned, 21 bad signature, 22 unknown key, 23 revoked key, "
      "24 ABI mismatch, 25 LibTorch mismatch, 27 license not acknowledged, 28 not found, 29 bad manifest.";
  c.positionals = "list|info NAME|verify PATH";
  c.min_positionals = 1;
  c.max_positionals = 2;
  c.run_config = true;
  c.options = {{"json", "", "Print as JSON."}};
  c.run = run_plugins;
  r.add(std::move(c));
}

}  // namespace yeto::cli
