// CRC-32C (Castagnoli), as TFRecord files and the sync wire protocol use it.
#pragma once

#include <cstdint>
#include <string_view>

namespace yeto {

std::uint32_t crc32c(std::string_view data);
// Continues a CRC over more bytes: crc32c_extend(crc32c(a), b) == crc32c(a + b).
std::uint32_t crc32c_extend(std::uint32_t crc, std::string_view data);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view data);

}  // namespace yeto
