#include "signing.hpp"

#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace yeto::sign {
namespace {

void ensure_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw std::runtime_error("libsodium failed to initialise");
}

std::string to_hex(const unsigned char* p, std::size_t n) {
  std::string out(n * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), p, n);
  out.pop_back();
  return out;
}

std::string to_base64(const unsigned char* p, std::size_t n) {
  std::string out(sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), p, n, sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // drop the NUL
  return out;
}

// Decodes base64 into exactly `n` bytes; false on anything else.
bool from_base64(std::string_view text, unsigned char* out, std::size_t n) {
  std::size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(out, n, text.data(), text.size(), nullptr, &len, &end, sodium_base64_VARIANT_ORIGINAL) != 0)
    return false;
  return len == n && end == text.data() + text.size();
}

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> w;
  std::istringstream in{std::string(line)};
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

std::string first_line(std::string_view text) {
  const auto nl = text.find('\n');
  std::string line(text.substr(0, nl));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// "tag base64 [comment...]" -> base64, comment.
std::pair<std::string, std::string> parse_key_line(std::string_view text, const std::string& tag,
                                                   const std::string& where) {
  const std::string line = first_line(text);
  const auto w = words(line);
  if (w.size() < 2 || w[0] != tag)
    throw FormatError(where + ": not a Yeto key file: expected a line '" + tag +
                      " <base64> [comment]' (make one with `yeto-sign keygen`)");
  std::string comment;
  const auto pos = line.find(w[1]) + w[1].size();
  if (pos < line.size()) {
    comment = line.substr(pos);
    const auto b = comment.find_first_not_of(" \t");
    comment = b == std::string::npos ? "" : comment.substr(b);
  }
  return {w[1], comment};
}

void require(bool ok, const std::string& where, const std::string& what) {
  if (!ok) throw FormatError(where + ": " + what);
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  if (!std::islower(static_cast<unsigned char>(s[0])) && !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  ensure_sodium();
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return to_hex(h, sizeof h);
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path.string() + ": cannot be read (does it exist?)");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw FormatError(path.string() + ": read error");
  return std::move(s).str();
}

void write_text(const std::filesystem::path& path, std::string_view text, bool private_file) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw FormatError(path.string() + ": cannot be written");
    if (private_file) ::chmod(tmp.c_str(), 0600);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) throw FormatError(path.string() + ": write error");
  }
  std::filesystem::rename(tmp, path);
}

std::string PublicKey::fingerprint() const {
  ensure_sodium();
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, bytes.data(), bytes.size());
  return "ed25519:" + to_hex(h, 16);
}

std::string PublicKey::to_text() const {
  return "yeto-ed25519-public " + to_base64(bytes.data(), bytes.size()) + (comment.empty() ? "" : " " + comment) +
         "\n";
}

PublicKey SecretKey::public_key() const {
  ensure_sodium();
  PublicKey p;
  crypto_sign_ed25519_sk_to_pk(p.bytes.data(), bytes.data());
  p.comment = comment;
  return p;
}

std::string SecretKey::to_text() const {
  return "yeto-ed25519-secret " + to_base64(bytes.data(), bytes.size()) + (comment.empty() ? "" : " " + comment) +
         "\n";
}

PublicKey parse_public_key(std::string_view text, const std::string& where) {
  ensure_sodium();
  const auto [b64, comment] = parse_key_line(text, "yeto-ed25519-public", where);
  PublicKey k;
  require(from_base64(b64, k.bytes.data(), k.bytes.size()), where, "the public key is not 32 bytes of base64");
  k.comment = comment;
  return k;
}

SecretKey parse_secret_key(std::string_view text, const std::string& where) {
  ensure_sodium();
  if (first_line(text).rfind("yeto-ed25519-public", 0) == 0)
    throw FormatError(where + ": this is a public key; signing needs the secret key file");
  const auto [b64, comment] = parse_key_line(text, "yeto-ed25519-secret", where);
  SecretKey k;
  require(from_base64(b64, k.bytes.data(), k.bytes.size()), where, "the secret key is not 64 bytes of base64");
  k.comment = comment;
  return k;
}

PublicKey load_public_key(const std::filesystem::path& path) { return parse_public_key(read_bytes(path), path.string()); }
SecretKey load_secret_key(const std::filesystem::path& path) { return parse_secret_key(read_bytes(path), path.string()); }

SecretKey generate_key(const std::string& comment) {
  ensure_sodium();
  SecretKey k;
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  crypto_sign_keypair(pk, k.bytes.data());
  k.comment = comment;
  return k;
}

// ---- manifests -------------------------------------------------------------------------

const std::vector<std::string>& capability_names() {
  static const std::vector<std::string> names = {"pipeline",  "components", "trainable", "encode_media",
                                                 "encode_conditioning", "denoiser", "align", "loss_step",
                                                 "artifacts", "generate", "presets"};
  return names;
}

std::uint64_t capability_bits(const std::vector<std::string>& names) {
  std::uint64_t bits = 0;
  const auto& all = capability_names();
  for (const auto& n : names) {
    const auto it = std::find(all.begin(), all.end(), n);
    if (it == all.end()) {
      std::string list;
      for (const auto& a : all) list += (list.empty() ? "" : ", ") + a;
      throw FormatError("unknown capability '" + n + "' (known: " + list + ")");
    }
    bits |= std::uint64_t{1} << (it - all.begin());
  }
  return bits;
}

std::vector<std::string> capability_list(std::uint64_t bits) {
  std::vector<std::string> out;
  const auto& all = capability_names();
  for (std::size_t i = 0; i < 64; ++i) {
    if (!(bits >> i & 1u)) continue;
    out.push_back(i < all.size() ? all[i] : "bit" + std::to_string(i));
  }
  return out;
}

std::string abi_string(std::uint32_t major, std::uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

Manifest parse_manifest(std::string_view json_text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(where + ": not valid JSON: " + e.what());
  }
  require(j.is_object(), where, "a plugin manifest must be a JSON object");
  require(j.value("format", "") == "yeto-plugin-manifest", where,
          "missing \"format\": \"yeto-plugin-manifest\" (was it written by yeto_add_plugin?)");
  auto str = [&](const char* key, bool required) -> std::string {
    if (!j.contains(key)) {
      require(!required, where, std::string("missing required field \"") + key + "\"");
      return "";
    }
    require(j[key].is_string(), where, std::string("field \"") + key + "\" must be a string");
    return j[key].get<std::string>();
  };
  auto list = [&](const char* key) {
    std::vector<std::string> v;
    if (!j.contains(key)) return v;
    require(j[key].is_array(), where, std::string("field \"") + key + "\" must be an array of strings");
    for (const auto& e : j[key]) {
      require(e.is_string(), where, std::string("field \"") + key + "\" must be an array of strings");
      v.push_back(e.get<std::string>());
    }
    return v;
  };
  Manifest m;
  m.name = str("name", true);
  require(valid_name(m.name), where, "plugin name '" + m.name + "' must match [a-z0-9][a-z0-9._-]* (64 chars at most)");
  m.version = str("version", true);
  require(!m.version.empty(), where, "field \"version\" is empty");
  const std::string abi = str("abi", true);
  unsigned major = 0, minor = 0;
  char extra = 0;
  require(std::sscanf(abi.c_str(), "%u.%u%c", &major, &minor, &extra) == 2, where,
          "field \"abi\" must be \"MAJOR.MINOR\", not '" + abi + "'");
  m.abi_major = major;
  m.abi_minor = minor;
  m.library = str("library", true);
  require(!m.library.empty() && m.library.find('/') == std::string::npos && m.library != "." && m.library != "..",
          where, "field \"library\" must be a file name in the manifest's directory");
  m.torch_version = str("torch_version", false);
  m.families = list("families");
  require(!m.families.empty(), where, "field \"families\" must name at least one model family");
  m.aliases = list("aliases");
  m.pipelines = list("pipelines");
  m.classes = list("classes");
  m.capabilities = list("capabilities");
  try {
    (void)capability_bits(m.capabilities);
  } catch (const FormatError& e) {
    throw FormatError(where + ": " + e.what());
  }
  if (j.contains("license")) {
    const auto& l = j["license"];
    require(l.is_object(), where, "field \"license\" must be an object {\"notice\", \"must_acknowledge\"}");
    if (l.contains("notice")) {
      require(l["notice"].is_string(), where, "license.notice must be a string");
      m.license_notice = l["notice"].get<std::string>();
    }
    if (l.contains("must_acknowledge")) {
      require(l["must_acknowledge"].is_boolean(), where, "license.must_acknowledge must be true or false");
      m.license_must_acknowledge = l["must_acknowledge"].get<bool>();
    }
  }
  m.description = str("description", false);
  return m;
}

std::string manifest_to_json(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = "yeto-plugin-manifest";
  j["name"] = m.name;
  j["version"] = m.version;
  j["abi"] = abi_string(m.abi_major, m.abi_minor);
  j["library"] = m.library;
  j["torch_version"] = m.torch_version;
  j["families"] = m.families;
  j["aliases"] = m.aliases;
  if (!m.pipelines.empty()) j["pipelines"] = m.pipelines;
  if (!m.classes.empty()) j["classes"] = m.classes;
  j["capabilities"] = m.capabilities;
  j["license"] = {{"notice", m.license_notice}, {"must_acknowledge", m.license_must_acknowledge}};
  if (!m.description.empty()) j["description"] = m.description;
  return j.dump(2) + "\n";
}

// ---- signatures ------------------------------------------------------------------------

std::string Signature::signed_text() const {
  return "yeto-plugin-signature v1\nkey " + key_fingerprint + "\nname " + name + "\nversion " + version + "\nabi " +
         abi + "\nlibrary-sha256 " + library_sha256 + "\nmanifest-sha256 " + manifest_sha256 + "\n";
}

std::string Signature::to_text() const {
  return signed_text() + "signature " + to_base64(signature.data(), signature.size()) + "\n";
}

Signature parse_signature(std::string_view text, const std::string& where) {
  ensure_sodium();
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) lines.push_back(l);
  }
  require(!lines.empty() && lines[0] == "yeto-plugin-signature v1", where,
          "not a Yeto plugin signature (first line must be 'yeto-plugin-signature v1')");
  const char* keys[] = {"key", "name", "version", "abi", "library-sha256", "manifest-sha256", "signature"};
  require(lines.size() == 8, where, "a signature has 8 lines (header, key, name, version, abi, library-sha256, "
                                    "manifest-sha256, signature); re-sign the plugin with yeto-sign");
  std::string values[7];
  for (int i = 0; i < 7; ++i) {
    const std::string prefix = std::string(keys[i]) + " ";
    require(lines[i + 1].rfind(prefix, 0) == 0, where, "line " + std::to_string(i + 2) + " must start with '" + prefix + "'");
    values[i] = lines[i + 1].substr(prefix.size());
  }
  Signature s;
  s.key_fingerprint = values[0];
  s.name = values[1];
  s.version = values[2];
  s.abi = values[3];
  s.library_sha256 = values[4];
  s.manifest_sha256 = values[5];
  require(from_base64(values[6], s.signature.data(), s.signature.size()), where,
          "the signature is not 64 bytes of base64");
  return s;
}

Signature sign_plugin(std::string_view library_bytes, std::string_view manifest_bytes, const SecretKey& key) {
  ensure_sodium();
  const Manifest m = parse_manifest(manifest_bytes, "manifest");
  Signature s;
  s.key_fingerprint = key.public_key().fingerprint();
  s.name = m.name;
  s.version = m.version;
  s.abi = abi_string(m.abi_major, m.abi_minor);
  s.library_sha256 = sha256_hex(library_bytes);
  s.manifest_sha256 = sha256_hex(manifest_bytes);
  const std::string msg = s.signed_text();
  crypto_sign_detached(s.signature.data(), nullptr, reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                       key.bytes.data());
  return s;
}

int exit_code(Verdict v) {
  switch (v) {
    case Verdict::ok:
      return 0;
    case Verdict::bad_signature:
      return refusal::bad_signature;
    case Verdict::unknown_key:
      return refusal::unknown_key;
    case Verdict::revoked_key:
      return refusal::revoked_key;
  }
  return refusal::bad_signature;
}

Verification verify_plugin(std::string_view library_bytes, std::string_view manifest_bytes, const Signature& sig,
                           const std::vector<TrustedKey>& trusted, const std::set<std::string>& revoked) {
  ensure_sodium();
  Verification v;
  v.key_fingerprint = sig.key_fingerprint;
  v.library_sha256 = sha256_hex(library_bytes);
  v.manifest_sha256 = sha256_hex(manifest_bytes);
  if (revoked.count(sig.key_fingerprint)) {
    v.verdict = Verdict::revoked_key;
    v.detail = "signed by revoked key " + sig.key_fingerprint;
    return v;
  }
  const TrustedKey* key = nullptr;
  for (const auto& t : trusted)
    if (t.key.fingerprint() == sig.key_fingerprint) key = &t;
  if (!key) {
    v.verdict = Verdict::unknown_key;
    v.detail = "signed by key " + sig.key_fingerprint + ", which is not among the " + std::to_string(trusted.size()) +
               " trusted key(s)";
    return v;
  }
  v.key_source = key->source;
  v.verdict = Verdict::bad_signature;
  if (v.library_sha256 != sig.library_sha256) {
    v.detail = "the library's SHA-256 is " + v.library_sha256 + " but the signature covers " + sig.library_sha256 +
               " (the .so was modified or replaced after signing)";
    return v;
  }
  if (v.manifest_sha256 != sig.manifest_sha256) {
    v.detail = "the manifest's SHA-256 is " + v.manifest_sha256 + " but the signature covers " + sig.manifest_sha256 +
               " (the manifest was modified after signing)";
    return v;
  }
  Manifest m;
  try {
    m = parse_manifest(manifest_bytes, "manifest");
  } catch (const FormatError& e) {
    v.detail = e.what();
    return v;
  }
  if (m.name != sig.name || m.version != sig.version || abi_string(m.abi_major, m.abi_minor) != sig.abi) {
    v.detail = "the signature names " + sig.name + " " + sig.version + " (ABI " + sig.abi + ") but the manifest says " +
               m.name + " " + m.version + " (ABI " + abi_string(m.abi_major, m.abi_minor) + ")";
    return v;
  }
  const std::string msg = sig.signed_text();
  if (crypto_sign_verify_detached(sig.signature.data(), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                                  key->key.bytes.data()) != 0) {
    v.detail = "the Ed25519 signature does not verify with key " + sig.key_fingerprint + " (" + key->source + ")";
    return v;
  }
  v.verdict = Verdict::ok;
  return v;
}

std::filesystem::path signature_path_for(const std::filesystem::path& manifest_path) {
  std::string s = manifest_path.string();
  if (s.size() > kManifestSuffix.size() && s.compare(s.size() - kManifestSuffix.size(), kManifestSuffix.size(), kManifestSuffix) == 0)
    s.resize(s.size() - kManifestSuffix.size());
  return s + std::string(kSignatureSuffix);
}

}  // namespace yeto::sign
