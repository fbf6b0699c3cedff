// Plugin manifests, Ed25519 keys and detached plugin signatures (libsodium).
//
// Shared by the yeto-sign tool and the host's plugin loader, so both read and write exactly
// one format. Nothing here executes plugin code: verification works on bytes.
//
// Key files (one line of text, an optional comment after the key):
//   yeto-ed25519-public <base64 of the 32-byte public key> [comment]
//   yeto-ed25519-secret <base64 of the 64-byte libsodium secret key> [comment]
// A key's fingerprint is "ed25519:" followed by the first 16 bytes of SHA-256(public key)
// in lowercase hex.
//
// Signature file (<name>.yeto.sig), lines in this order:
//   yeto-plugin-signature v1
//   key <fingerprint>
//   name <plugin name>
//   version <plugin version>
//   abi <major>.<minor>
//   library-sha256 <hex of the library file>
//   manifest-sha256 <hex of the manifest file>
//   signature <base64 Ed25519 signature over all lines above, each ending in '\n'>
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::sign {

// A malformed key, manifest or signature file; the message names the file and the problem.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string sha256_hex(std::string_view bytes);
std::string read_bytes(const std::filesystem::path& path);  // throws FormatError naming the file
void write_text(const std::filesystem::path& path, std::string_view text, bool private_file = false);

struct PublicKey {
  std::array<unsigned char, 32> bytes{};
  std::string comment;
  std::string fingerprint() const;
  std::string to_text() const;
};

struct SecretKey {
  std::array<unsigned char, 64> bytes{};
  std::string comment;
  PublicKey public_key() const;
  std::string to_text() const;
};

PublicKey parse_public_key(std::string_view text, const std::string& where);
SecretKey parse_secret_key(std::string_view text, const std::string& where);
PublicKey load_public_key(const std::filesystem::path& path);
SecretKey load_secret_key(const std::filesystem::path& path);
SecretKey generate_key(const std::string& comment);

// ---- manifests -------------------------------------------------------------------------

// The plugin manifest (<name>.yeto.json): what the host may know about a plugin without
// opening it. The signature covers its bytes.
struct Manifest {
  std::string name;
  std::string version;
  std::uint32_t abi_major = 0;
  std::uint32_t abi_minor = 0;
  std::string library;        // file name of the library, in the manifest's directory
  std::string torch_version;  // "" when the plugin does not link LibTorch
  std::vector<std::string> families;
  std::vector<std::string> aliases;
  // Diffusers pipeline classes (model_index.json "_class_name") the plugin serves; the host
  // chooses a plugin signed by its own build key from them (see plugin::select_plugin).
  std::vector<std::string> pipelines;
  // Component classes (a component's config "_class_name") the plugin registers; the host finds
  // the plugin of a recorded component case or pipeline helper by them (plugin::plugin_serving).
  std::vector<std::string> classes;
  std::vector<std::string> capabilities;  // capability names, see capability_names()
  std::string license_notice;
  bool license_must_acknowledge = false;
  std::string description;
};

// The capability names in bit order (bit i of YETO_CAP_* is capability_names()[i]).
const std::vector<std::string>& capability_names();
std::uint64_t capability_bits(const std::vector<std::string>& names);  // throws FormatError
std::vector<std::string> capability_list(std::uint64_t bits);

Manifest parse_manifest(std::string_view json_text, const std::string& where);
std::string manifest_to_json(const Manifest& m);
std::string abi_string(std::uint32_t major, std::uint32_t minor);

// ---- signatures ------------------------------------------------------------------------

struct Signature {
  std::string key_fingerprint;
  std::string name;
  std::string version;
  std::string abi;
  std::string library_sha256;
  std::string manifest_sha256;
  std::array<unsigned char, 64> signature{};
  std::string signed_text() const;  // the exact bytes the signature covers
  std::string to_text() const;
};

Signature parse_signature(std::string_view text, const std::string& where);

// Signs library + manifest bytes; the manifest supplies name, version and ABI.
Signature sign_plugin(std::string_view library_bytes, std::string_view manifest_bytes, const SecretKey& key);

enum class Verdict { ok, bad_signature, unknown_key, revoked_key };

// Exit codes of a refused review (yeto-sign verify, yeto-host plugins info/verify): the same
// numbers the host's loader exits with (yeto::ExitCode::plugin_*), so scripts read one table.
namespace refusal {
inline constexpr int unsigned_plugin = 20;
inline constexpr int bad_signature = 21;
inline constexpr int unknown_key = 22;
inline constexpr int revoked_key = 23;
inline constexpr int not_found = 28;
inline constexpr int bad_manifest = 29;
}  // namespace refusal
int exit_code(Verdict v);  // 0 for ok

struct TrustedKey {
  PublicKey key;
  std::string source;  // the file it came from, for messages
};

struct Verification {
  Verdict verdict = Verdict::bad_signature;
  std::string detail;  // what exactly failed
  std::string key_fingerprint;
  std::string key_source;
  std::string library_sha256;
  std::string manifest_sha256;
};

// Checks a parsed signature against the actual bytes and the keys. Revocation wins over
// trust; hashes are compared before the signature so a tamper names the file that changed.
Verification verify_plugin(std::string_view library_bytes, std::string_view manifest_bytes, const Signature& sig,
                           const std::vector<TrustedKey>& trusted, const std::set<std::string>& revoked);

// Conventional file names next to a manifest: <dir>/<name>.yeto.json, <name>.yeto.sig.
inline constexpr std::string_view kManifestSuffix = ".yeto.json";
inline constexpr std::string_view kSignatureSuffix = ".yeto.sig";
std::filesystem::path signature_path_for(const std::filesystem::path& manifest_path);

}  // namespace yeto::sign
