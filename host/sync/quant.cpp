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

namespace {
// Round half to even for |v| <= 2^22 by the 1.5 * 2^23 trick: adding and subtracting it
// leaves the nearest integer (ties to even) under IEEE round-to-nearest, the mode the host
// always runs in. Vectorises, unlike floor/fmod; equal to round_half_even (tested).
inline float rne(float v) {
  constexpr float kMagic = 12582912.0f;  // never built with -ffast-math, which could fold this
  return (v + kMagic) - kMagic;
}

inline int code_of(float x, float inv) {
  const float q = std::clamp(rne(x * inv), -7.0f, 7.0f);
  return static_cast<int>(q) + 8;
}
}  // namespace

void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
  if (block < 2) throw Error("q4 block size must be at least 2");
  const std::size_t n = x.size();
  const float* px = x.data();
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    int bad = 0;
    for (std::size_t i = b0; i < b1; ++i) {
      const float a = std::fabs(px[i]);
      bad |= !(a <= 3.4028234e38f);  // NaN and Inf both fail
      amax = a > amax ? a : amax;
    }
    if (bad) {
      for (std::size_t i = b0; i < b1; ++i)
        if (!std::isfinite(px[i])) throw Error("q4: value " + std::to_string(i) + " is not finite");
    }
    const float s = amax / 7.0f;
    scales[bi] = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    std::size_t i = b0;
    if (i % 2 == 1) {  // a block that starts on a high nibble (odd block sizes)
      codes[i / 2] = static_cast<std::uint8_t>((codes[i / 2] & 0x0F) | (code_of(px[i], inv) << 4));
      ++i;
    }
    for (; i + 1 < b1; i += 2)
      codes[i / 2] = static_cast<std::uint8_t>(code_of(px[i], inv) | (code_of(px[i + 1], inv) << 4));
    if (i < b1) codes[i / 2] = static_cast<std::uint8_t>(code_of(px[i], inv));  // high nibble: next block or padding
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
  float* po = out.data();
  int zero = 0;
  for (std::uint64_t b0 = 0, bi = 0; b0 < numel; b0 += block, ++bi) {
    const std::uint64_t b1 = std::min<std::uint64_t>(numel, b0 + block);
    const float s = scales[bi];
    for (std::uint64_t i = b0; i < b1; ++i) {
      const std::uint8_t byte = codes[i / 2];
      const int nib = (i & 1) ? (byte >> 4) : (byte & 0x0F);
      zero |= (nib == 0);
      po[i] = static_cast<float>(nib - 8) * s;
    }
  }
  if (zero) {
    for (std::uint64_t i = 0; i < numel; ++i) {
      const int nib = (i & 1) ? (codes[i / 2] >> 4) : (codes[i / 2] & 0x0F);
      if (nib == 0) throw Error("q4: code " + std::to_string(i) + " is out of range");
    }
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
