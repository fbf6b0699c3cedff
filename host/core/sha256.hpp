// SHA-256 digests (libsodium) as lowercase hex, for provenance and content fingerprints.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace yeto {

std::string sha256_hex(std::string_view bytes);
// Streams the file; throws yeto::Error naming it when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace yeto
