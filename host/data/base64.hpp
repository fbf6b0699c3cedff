// Base64 (RFC 4648, standard and URL-safe alphabets, padding optional, whitespace ignored)
// for inline image bytes and inline tensors in manifests.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace yeto::data {

// The decoded bytes, or nullopt when `text` is not valid base64.
std::optional<std::string> base64_decode(std::string_view text);
std::string base64_encode(std::string_view bytes);

}  // namespace yeto::data
