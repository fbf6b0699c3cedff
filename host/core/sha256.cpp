#include "core/sha256.hpp"

#include <sodium.h>

#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace yeto {
namespace {

std::string to_hex(const unsigned char* digest) {
  static const char* hex = "0123456789abcdef";
  std::string out(crypto_hash_sha256_BYTES * 2, '0');
  for (std::size_t i = 0; i < crypto_hash_sha256_BYTES; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return to_hex(digest);
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path.string() + "' to hash it", ExitCode::not_found);
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0)
      crypto_hash_sha256_update(&st, reinterpret_cast<const unsigned char*>(buf.data()),
                                static_cast<unsigned long long>(n));
  }
  if (in.bad()) throw Error("read error while hashing '" + path.string() + "'");
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, digest);
  return to_hex(digest);
}

}  // namespace yeto
