// yeto-sign: make Ed25519 keys, sign a plugin (library + manifest), verify a signature.
// Exit codes: 0 ok; 2 usage; a refused verification exits with the host loader's code
// (20 unsigned, 21 bad signature or malformed signature file, 22 unknown key, 23 revoked key,
// 28 a file not found, 29 a malformed manifest).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "signing.hpp"

namespace fs = std::filesystem;
using namespace yeto::sign;

namespace {

const char* kUsage =
    "Usage:\n"
    "  yeto-sign keygen --out PREFIX [--comment TEXT] [--force]\n"
    "      writes PREFIX.secret (mode 0600, keep it private) and PREFIX.public\n"
    "  yeto-sign sign --key SECRET --manifest NAME.yeto.json [--library FILE] [--out FILE.yeto.sig]\n"
    "      signs the library named by the manifest together with the manifest\n"
    "  yeto-sign verify --key PUBLIC [--key PUBLIC...] --manifest NAME.yeto.json [--library FILE]\n"
    "                   [--signature FILE] [--revoked FINGERPRINT...]\n"
    "  yeto-sign fingerprint KEYFILE\n"
    "Key files: 'yeto-ed25519-public <base64> [comment]' / 'yeto-ed25519-secret <base64> [comment]'.\n";

struct Args {
  std::string command;
  std::map<std::string, std::vector<std::string>> opts;
  std::vector<std::string> positional;
  std::string one(const std::string& k, const std::string& fallback = "") const {
    const auto it = opts.find(k);
    return it == opts.end() || it->second.empty() ? fallback : it->second.back();
  }
  bool has(const std::string& k) const { return opts.count(k) != 0; }
};

int usage(const std::string& msg) {
  std::cerr << "yeto-sign: " << msg << "\n" << kUsage;
  return 2;
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc > 1) a.command = argv[1];
  const std::set<std::string> switches = {"force"};
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      const std::string k = s.substr(2);
      if (switches.count(k)) {
        a.opts[k].push_back("");
      } else if (i + 1 < argc) {
        a.opts[k].push_back(argv[++i]);
      } else {
        throw FormatError("option --" + k + " needs a value");
      }
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

fs::path library_for(const Args& a, const fs::path& manifest_path, const Manifest& m) {
  return a.has("library") ? fs::path(a.one("library")) : manifest_path.parent_path() / m.library;
}

int keygen(const Args& a) {
  if (!a.has("out")) return usage("keygen needs --out PREFIX");
  const fs::path secret = a.one("out") + ".secret", pub = a.one("out") + ".public";
  if (!a.has("force") && (fs::exists(secret) || fs::exists(pub)))
    return usage(secret.string() + " or " + pub.string() + " exists; pass --force to replace it");
  const SecretKey k = generate_key(a.one("comment"));
  write_text(secret, k.to_text(), true);
  write_text(pub, k.public_key().to_text());
  std::cout << k.public_key().fingerprint() << "\n";
  return 0;
}

int sign(const Args& a) {
  if (!a.has("key") || !a.has("manifest")) return usage("sign needs --key SECRET and --manifest FILE");
  const SecretKey k = load_secret_key(a.one("key"));
  const fs::path mpath = a.one("manifest");
  const std::string manifest = read_bytes(mpath);
  const Manifest m = parse_manifest(manifest, mpath.string());
  const std::string library = read_bytes(library_for(a, mpath, m));
  const Signature s = sign_plugin(library, manifest, k);
  const fs::path out = a.has("out") ? fs::path(a.one("out")) : signature_path_for(mpath);
  write_text(out, s.to_text());
  std::cout << "signed " << m.name << " " << m.version << " with " << s.key_fingerprint << " -> " << out.string()
            << "\n";
  return 0;
}

int verify(const Args& a) {
  if (!a.has("key") || !a.has("manifest")) return usage("verify needs --key PUBLIC and --manifest FILE");
  std::vector<TrustedKey> trusted;
  for (const auto& k : a.opts.at("key")) trusted.push_back({load_public_key(k), k});
  std::set<std::string> revoked;
  if (a.has("revoked"))
    for (const auto& r : a.opts.at("revoked")) revoked.insert(r);
  const fs::path mpath = a.one("manifest");
  auto refuse = [](int code, const std::string& msg) {
    std::cerr << "yeto-sign: " << msg << "\n";
    return code;
  };
  auto bytes = [&](const fs::path& p, int code, std::string& out) {
    std::error_code ec;
    if (!fs::exists(p, ec)) return refuse(refusal::not_found, p.string() + " does not exist");
    try {
      out = read_bytes(p);
    } catch (const FormatError& e) {
      return refuse(code, e.what());
    }
    return 0;
  };
  std::string manifest, library, signature;
  if (const int rc = bytes(mpath, refusal::bad_manifest, manifest)) return rc;
  Manifest m;
  try {
    m = parse_manifest(manifest, mpath.string());
  } catch (const FormatError& e) {
    return refuse(refusal::bad_manifest, e.what());
  }
  if (const int rc = bytes(library_for(a, mpath, m), refusal::bad_manifest, library)) return rc;
  const fs::path spath = a.has("signature") ? fs::path(a.one("signature")) : signature_path_for(mpath);
  std::error_code ec;
  if (!fs::exists(spath, ec))
    return refuse(refusal::unsigned_plugin, m.name + " is unsigned: " + spath.string() + " does not exist");
  if (const int rc = bytes(spath, refusal::bad_signature, signature)) return rc;
  Signature s;
  try {
    s = parse_signature(signature, spath.string());
  } catch (const FormatError& e) {
    return refuse(refusal::bad_signature, e.what());
  }
  const Verification v = verify_plugin(library, manifest, s, trusted, revoked);
  if (v.verdict != Verdict::ok) return refuse(exit_code(v.verdict), m.name + ": " + v.detail);
  std::cout << "ok: " << m.name << " " << m.version << " signed by " << v.key_fingerprint << " (" << v.key_source
            << "), library sha256 " << v.library_sha256 << "\n";
  return 0;
}

int fingerprint(const Args& a) {
  if (a.positional.size() != 1) return usage("fingerprint needs one KEYFILE");
  const std::string text = read_bytes(a.positional[0]);
  if (text.rfind("yeto-ed25519-secret", 0) == 0)
    std::cout << parse_secret_key(text, a.positional[0]).public_key().fingerprint() << "\n";
  else
    std::cout << parse_public_key(text, a.positional[0]).fingerprint() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.command == "keygen") return keygen(a);
    if (a.command == "sign") return sign(a);
    if (a.command == "verify") return verify(a);
    if (a.command == "fingerprint") return fingerprint(a);
    if (a.command == "--help" || a.command == "-h" || a.command == "help") {
      std::cout << kUsage;
      return 0;
    }
    return usage(a.command.empty() ? "no command given" : "unknown command '" + a.command + "'");
  } catch (const std::exception& e) {
    std::cerr << "yeto-sign: " << e.what() << "\n";
    return 2;
  }
}
