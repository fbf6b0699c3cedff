#include "sync/quant.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace yeto::sync {

std::uint64_t q4_blocks(std::uint64_t numel, std::uint32_t block) { return block ? (numel + block - 1) / block : 0; }

std::uint64_t q4_encoded_bytes(std::uint64_t numel, std::uint32_t block) {
  return q4_blocks(numel, block) * 4 + (numel + 1) / 2;
}

float round_half_even(float v) {
  const float f = std::floor(v);
  const float d = v - f;  // exact for |v| < 2^22
  if (d > 0.5f) return f + 1.0f;
  if (d < 0.5f) return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
  if (block < 2) throw Error("q4 block size must be at least 2");
  const std::size_t n = x.size();
  std::fill(codes, codes + (n + 1) / 2, std::uint8_t{0});
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    for (std::size_t i = b0; i < b1; ++i) {
      if (!std::isfinite(x[i])) throw Error("q4: value " + std::to_string(i) + " is not finite");
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float s = amax / 7.0f;
    scales[bi] = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (std::size_t i = b0; i < b1; ++i) {
      float q = s > 0.0f ? round_half_even(x[i] * inv) : 0.0f;
      q = std::clamp(q, -7.0f, 7.0f);
      const auto nib = static_cast<std::uint8_t>(static_cast<int>(q) + 8);
      codes[i / 2] |= (i % 2 == 0) ? nib : static_cast<std::uint8_t>(nib << 4);
    }
  }
}

Q4 q4_encode(std::span<const float> x, std::uint32_t block) {
  Q4 q;
  q.numel = x.size();
  q.block = block;
  q.scales.resize(q4_blocks(q.numel, block < 2 ? 2 : block));
  q.codes.resize((q.numel + 1) / 2);
  q4_encode_into(x, block, q.scales.data(), q.codes.data());
  return q;
}

void q4_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out) {
  if (block < 2) throw Error("q4 block size must be at least 2");
  if (out.size() != numel) throw Error("q4: output has the wrong length");
  const std::uint64_t nb = q4_blocks(numel, block);
  for (std::uint64_t b = 0; b < nb; ++b)
    if (!std::isfinite(scales[b]) || scales[b] < 0.0f) throw Error("q4: block scale " + std::to_string(b) + " is invalid");
  for (std::uint64_t i = 0; i < numel; ++i) {
    const std::uint8_t byte = codes[i / 2];
    const int nib = (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    if (nib == 0) throw Error("q4: code " + std::to_string(i) + " is out of range");
    out[i] = static_cast<float>(nib - 8) * scales[i / block];
  }
  if (numel % 2 == 1 && (codes[numel / 2] >> 4) != 0) throw Error("q4: padding nibble is not zero");
}

std::vector<float> q4_decode(const Q4& q) {
  if (q.block < 2 || q.scales.size() != q4_blocks(q.numel, q.block) || q.codes.size() != (q.numel + 1) / 2)
    throw Error("q4: inconsistent sizes");
  std::vector<float> out(q.numel);
  q4_decode_into(q.numel, q.block, q.scales.data(), q.codes.data(), out);
  return out;
}

}  // namespace yeto::sync
