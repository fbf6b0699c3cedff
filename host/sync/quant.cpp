#include "sync/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__SSE2__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define YETO_Q4_AVX2 1
#include <immintrin.h>
#endif

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
constexpr float kMagic = 12582912.0f;  // never built with -ffast-math, which could fold this
inline float rne(float v) { return (v + kMagic) - kMagic; }

// The product is NaN only for a zero times an infinite reciprocal (a block whose scale is so
// small that 1 / s overflows); such a value encodes as 0, like every other zero.
inline int code_of(float x, float inv) {
  const float r = rne(x * inv);
  if (r != r) return 8;
  return static_cast<int>(std::clamp(r, -7.0f, 7.0f)) + 8;
}

float scale_inverse(float s) { return s > 0.0f ? 1.0f / s : 0.0f; }

[[noreturn]] void throw_not_finite(const float* px, std::size_t b0, std::size_t b1) {
  for (std::size_t i = b0; i < b1; ++i)
    if (!std::isfinite(px[i])) throw Error("q4: value " + std::to_string(i) + " is not finite");
  throw Error("q4: a value is not finite");
}

// Codes of values [i, b1) of one block, i even: pairs into whole bytes, a last odd value
// into a low nibble (its high nibble is the next block's or the padding).
void encode_codes_scalar(const float* px, std::size_t i, std::size_t b1, float inv, std::uint8_t* codes) {
  for (; i + 1 < b1; i += 2)
    codes[i / 2] = static_cast<std::uint8_t>(code_of(px[i], inv) | (code_of(px[i + 1], inv) << 4));
  if (i < b1) codes[i / 2] = static_cast<std::uint8_t>(code_of(px[i], inv));
}

void decode_values_scalar(const std::uint8_t* codes, std::uint64_t i, std::uint64_t b1, float s, float* po, int& zero) {
  for (; i < b1; ++i) {
    const std::uint8_t byte = codes[i / 2];
    const int nib = (i & 1) ? (byte >> 4) : (byte & 0x0F);
    zero |= (nib == 0);
    po[i] = static_cast<float>(nib - 8) * s;
  }
}

void check_scales(std::uint64_t numel, std::uint32_t block, const float* scales) {
  const std::uint64_t nb = q4_blocks(numel, block);
  for (std::uint64_t b = 0; b < nb; ++b)
    if (!std::isfinite(scales[b]) || scales[b] < 0.0f) throw Error("q4: block scale " + std::to_string(b) + " is invalid");
}

void check_codes(std::uint64_t numel, const std::uint8_t* codes, int zero) {
  if (zero) {
    for (std::uint64_t i = 0; i < numel; ++i) {
      const int nib = (i & 1) ? (codes[i / 2] >> 4) : (codes[i / 2] & 0x0F);
      if (nib == 0) throw Error("q4: code " + std::to_string(i) + " is out of range");
    }
  }
  if (numel % 2 == 1 && (codes[numel / 2] >> 4) != 0) throw Error("q4: padding nibble is not zero");
}

#if defined(__SSE2__)
// SSE2 (every x86-64 CPU) for blocks of an even size, so that every block starts on a byte;
// 32 values, 16 code bytes, per step. Bit-identical to the scalar code: the block maximum
// is order-independent, the scale and its reciprocal are computed by the same scalar
// expressions, and (x * r + M) - (M - 8) is exactly round_half_even(x * r) + 8 for
// |x * r| <= 2^22, clamped to [1, 15] afterwards.

// max |x| over [b0, b1); false when a value is NaN or infinite.
bool block_amax_sse2(const float* px, std::size_t b0, std::size_t b1, float& amax_out) {
  const __m128 absmask = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  const __m128 big = _mm_set1_ps(3.4028234e38f);
  __m128 m0 = _mm_setzero_ps(), m1 = m0, m2 = m0, m3 = m0, bad = m0;
  std::size_t i = b0;
  for (; i + 16 <= b1; i += 16) {
    const __m128 a0 = _mm_and_ps(_mm_loadu_ps(px + i), absmask);
    const __m128 a1 = _mm_and_ps(_mm_loadu_ps(px + i + 4), absmask);
    const __m128 a2 = _mm_and_ps(_mm_loadu_ps(px + i + 8), absmask);
    const __m128 a3 = _mm_and_ps(_mm_loadu_ps(px + i + 12), absmask);
    bad = _mm_or_ps(bad, _mm_or_ps(_mm_or_ps(_mm_cmpnle_ps(a0, big), _mm_cmpnle_ps(a1, big)),
                                   _mm_or_ps(_mm_cmpnle_ps(a2, big), _mm_cmpnle_ps(a3, big))));
    m0 = _mm_max_ps(m0, a0);
    m1 = _mm_max_ps(m1, a1);
    m2 = _mm_max_ps(m2, a2);
    m3 = _mm_max_ps(m3, a3);
  }
  for (; i + 4 <= b1; i += 4) {
    const __m128 a = _mm_and_ps(_mm_loadu_ps(px + i), absmask);
    bad = _mm_or_ps(bad, _mm_cmpnle_ps(a, big));
    m0 = _mm_max_ps(m0, a);
  }
  __m128 m = _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  float amax = _mm_cvtss_f32(m);
  int bad_tail = 0;
  for (; i < b1; ++i) {
    const float a = std::fabs(px[i]);
    bad_tail |= !(a <= 3.4028234e38f);
    amax = a > amax ? a : amax;
  }
  amax_out = amax;
  return !bad_tail && _mm_movemask_ps(bad) == 0;
}

// Codes of 4 values as 4 int32 in [1, 15].
inline __m128i codes4_sse2(const float* p, __m128 inv, __m128 magic, __m128 bias, __m128 lo, __m128 hi) {
  const __m128 r = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(_mm_loadu_ps(p), inv), magic), bias);
  return _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(r, lo), hi));
}

void encode_codes_sse2(const float* px, std::size_t i, std::size_t b1, float inv_s, std::uint8_t* codes) {
  const __m128 inv = _mm_set1_ps(inv_s), magic = _mm_set1_ps(kMagic), bias = _mm_set1_ps(kMagic - 8.0f);
  const __m128 lo = _mm_set1_ps(1.0f), hi = _mm_set1_ps(15.0f);
  const __m128i low_byte = _mm_set1_epi16(0x00FF);
  for (; i + 32 <= b1; i += 32) {
    const float* p = px + i;
    const __m128i w0 = _mm_packs_epi32(codes4_sse2(p, inv, magic, bias, lo, hi), codes4_sse2(p + 4, inv, magic, bias, lo, hi));
    const __m128i w1 = _mm_packs_epi32(codes4_sse2(p + 8, inv, magic, bias, lo, hi), codes4_sse2(p + 12, inv, magic, bias, lo, hi));
    const __m128i w2 = _mm_packs_epi32(codes4_sse2(p + 16, inv, magic, bias, lo, hi), codes4_sse2(p + 20, inv, magic, bias, lo, hi));
    const __m128i w3 = _mm_packs_epi32(codes4_sse2(p + 24, inv, magic, bias, lo, hi), codes4_sse2(p + 28, inv, magic, bias, lo, hi));
    // One code per byte, then each 16-bit pair (even | odd << 8) becomes even | odd << 4.
    const __m128i c0 = _mm_packus_epi16(w0, w1), c1 = _mm_packus_epi16(w2, w3);
    const __m128i n0 = _mm_or_si128(_mm_and_si128(c0, low_byte), _mm_srli_epi16(c0, 4));
    const __m128i n1 = _mm_or_si128(_mm_and_si128(c1, low_byte), _mm_srli_epi16(c1, 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), _mm_packus_epi16(n0, n1));
  }
  encode_codes_scalar(px, i, b1, inv_s, codes);
}

#if defined(YETO_Q4_AVX2)
// The same for CPUs with AVX2 (chosen at run time), 8 lanes wide. Only "avx2" is enabled,
// not "fma": a fused x * r + M would round differently (the file is also built with
// -ffp-contract=off). The block maximum uses integer max on the magnitude bits, which
// orders finite magnitudes like floats and puts NaN and infinity above every finite value.
__attribute__((target("avx2"))) bool block_amax_avx2(const float* px, std::size_t b0, std::size_t b1, float& amax_out) {
  const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  std::size_t i = b0;
  for (; i + 32 <= b1; i += 32) {
    m0 = _mm256_max_epi32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px + i)), absmask));
    m1 = _mm256_max_epi32(m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px + i + 8)), absmask));
    m2 = _mm256_max_epi32(m2, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px + i + 16)), absmask));
    m3 = _mm256_max_epi32(m3, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px + i + 24)), absmask));
  }
  for (; i + 8 <= b1; i += 8)
    m0 = _mm256_max_epi32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px + i)), absmask));
  const __m256i m8 = _mm256_max_epi32(_mm256_max_epi32(m0, m1), _mm256_max_epi32(m2, m3));
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  std::uint32_t bits = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
  for (; i < b1; ++i) {
    std::uint32_t u;
    std::memcpy(&u, px + i, 4);
    u &= 0x7FFFFFFFu;
    bits = u > bits ? u : bits;
  }
  if (bits > 0x7F7FFFFFu) return false;  // NaN or infinity
  std::memcpy(&amax_out, &bits, 4);
  return true;
}

__attribute__((target("avx2"))) inline __m256i codes8_avx2(const float* p, __m256 inv, __m256 magic, __m256 bias,
                                                           __m256 lo, __m256 hi) {
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(p), inv), magic), bias);
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
}

__attribute__((target("avx2"))) void encode_codes_avx2(const float* px, std::size_t i, std::size_t b1, float inv_s,
                                                       std::uint8_t* codes) {
  const __m256 inv = _mm256_set1_ps(inv_s), magic = _mm256_set1_ps(kMagic), bias = _mm256_set1_ps(kMagic - 8.0f);
  const __m256 lo = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(15.0f);
  const __m256i low_byte = _mm256_set1_epi16(0x00FF);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (; i + 32 <= b1; i += 32) {
    const float* p = px + i;
    // Packing works within 128-bit halves: the 4-byte groups come out as values
    // 0-3, 8-11, 16-19, 24-27, 4-7, 12-15, 20-23, 28-31 and are put back in order.
    const __m256i w0 = _mm256_packs_epi32(codes8_avx2(p, inv, magic, bias, lo, hi), codes8_avx2(p + 8, inv, magic, bias, lo, hi));
    const __m256i w1 = _mm256_packs_epi32(codes8_avx2(p + 16, inv, magic, bias, lo, hi), codes8_avx2(p + 24, inv, magic, bias, lo, hi));
    const __m256i c = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w0, w1), order);
    const __m256i n = _mm256_or_si256(_mm256_and_si256(c, low_byte), _mm256_srli_epi16(c, 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2),
                     _mm_packus_epi16(_mm256_castsi256_si128(n), _mm256_extracti128_si256(n, 1)));
  }
  encode_codes_scalar(px, i, b1, inv_s, codes);
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// Values [i, b1) of one block, i even, 32 per step; `zero` collects a zero nibble.
void decode_values_sse2(const std::uint8_t* codes, std::uint64_t i, std::uint64_t b1, float s_val, float* po,
                        int& zero) {
  const __m128i nib_mask = _mm_set1_epi8(0x0F), z = _mm_setzero_si128();
  const __m128 s = _mm_set1_ps(s_val), eight = _mm_set1_ps(8.0f);
  __m128i zacc = z;
  for (; i + 32 <= b1; i += 32) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i / 2));
    const __m128i lo = _mm_and_si128(b, nib_mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib_mask);
    zacc = _mm_or_si128(zacc, _mm_or_si128(_mm_cmpeq_epi8(lo, z), _mm_cmpeq_epi8(hi, z)));
    const __m128i v[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};  // values in order
    float* o = po + i;
    for (const __m128i& vb : v) {
      const __m128i h[2] = {_mm_unpacklo_epi8(vb, z), _mm_unpackhi_epi8(vb, z)};
      for (const __m128i& hw : h) {
        _mm_storeu_ps(o, _mm_mul_ps(_mm_sub_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hw, z)), eight), s));
        _mm_storeu_ps(o + 4, _mm_mul_ps(_mm_sub_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hw, z)), eight), s));
        o += 8;
      }
    }
  }
  zero |= _mm_movemask_epi8(zacc) != 0;
  decode_values_scalar(codes, i, b1, s_val, po, zero);
}
#endif
}  // namespace

namespace {
void encode_into_scalar(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
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
    if (bad) throw_not_finite(px, b0, b1);
    const float s = amax / 7.0f;
    scales[bi] = s;
    const float inv = scale_inverse(s);
    std::size_t i = b0;
    if (i % 2 == 1) {  // a block that starts on a high nibble (odd block sizes)
      codes[i / 2] = static_cast<std::uint8_t>((codes[i / 2] & 0x0F) | (code_of(px[i], inv) << 4));
      ++i;
    }
    encode_codes_scalar(px, i, b1, inv, codes);
  }
}

#if defined(__SSE2__)
// Even block sizes: every block starts on a byte. A block whose 1 / s overflowed (its
// maximum is a tiny denormal) has infinite or NaN products and takes the scalar code.
template <bool (*Amax)(const float*, std::size_t, std::size_t, float&),
          void (*Codes)(const float*, std::size_t, std::size_t, float, std::uint8_t*)>
void encode_into_simd(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
  const std::size_t n = x.size();
  const float* px = x.data();
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    if (!Amax(px, b0, b1, amax)) throw_not_finite(px, b0, b1);
    const float s = amax / 7.0f;
    scales[bi] = s;
    const float inv = scale_inverse(s);
    if (inv <= 3.4028234e38f)
      Codes(px, b0, b1, inv, codes);
    else
      encode_codes_scalar(px, b0, b1, inv, codes);
  }
}
#endif
}  // namespace

bool q4_impl_available(Q4Impl impl) {
  switch (impl) {
    case Q4Impl::scalar: return true;
#if defined(__SSE2__)
    case Q4Impl::sse2: return true;
#endif
#if defined(YETO_Q4_AVX2)
    case Q4Impl::avx2: return have_avx2();
#endif
    default: return false;
  }
}

Q4Impl q4_best_impl() {
  for (const Q4Impl impl : {Q4Impl::avx2, Q4Impl::sse2})
    if (q4_impl_available(impl)) return impl;
  return Q4Impl::scalar;
}

const char* q4_impl_name(Q4Impl impl) {
  switch (impl) {
    case Q4Impl::scalar: return "scalar";
    case Q4Impl::sse2: return "sse2";
    case Q4Impl::avx2: return "avx2";
  }
  return "?";
}

void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes, Q4Impl impl) {
  if (block < 2) throw Error("q4 block size must be at least 2");
  if (!q4_impl_available(impl)) throw Error(std::string("q4: implementation ") + q4_impl_name(impl) + " is not available");
  if (block % 2 == 0) {
#if defined(YETO_Q4_AVX2)
    if (impl == Q4Impl::avx2) return encode_into_simd<block_amax_avx2, encode_codes_avx2>(x, block, scales, codes);
#endif
#if defined(__SSE2__)
    if (impl == Q4Impl::sse2) return encode_into_simd<block_amax_sse2, encode_codes_sse2>(x, block, scales, codes);
#endif
  }
  encode_into_scalar(x, block, scales, codes);
}

void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
  static const Q4Impl best = q4_best_impl();
  q4_encode_into(x, block, scales, codes, best);
}

void q4_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out, Q4Impl impl) {
  if (block < 2) throw Error("q4 block size must be at least 2");
  if (!q4_impl_available(impl)) throw Error(std::string("q4: implementation ") + q4_impl_name(impl) + " is not available");
  if (out.size() != numel) throw Error("q4: output has the wrong length");
  check_scales(numel, block, scales);
  float* po = out.data();
  int zero = 0;
#if defined(__SSE2__)
  if (impl != Q4Impl::scalar && block % 2 == 0) {  // SSE2 for avx2 too: decoding is store-bound
    for (std::uint64_t b0 = 0, bi = 0; b0 < numel; b0 += block, ++bi)
      decode_values_sse2(codes, b0, std::min<std::uint64_t>(numel, b0 + block), scales[bi], po, zero);
    check_codes(numel, codes, zero);
    return;
  }
#endif
  for (std::uint64_t b0 = 0, bi = 0; b0 < numel; b0 += block, ++bi)
    decode_values_scalar(codes, b0, std::min<std::uint64_t>(numel, b0 + block), scales[bi], po, zero);
  check_codes(numel, codes, zero);
}

void q4_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out) {
  static const Q4Impl best = q4_best_impl();
  q4_decode_into(numel, block, scales, codes, out, best);
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

std::vector<float> q4_decode(const Q4& q) {
  if (q.block < 2 || q.scales.size() != q4_blocks(q.numel, q.block) || q.codes.size() != (q.numel + 1) / 2)
    throw Error("q4: inconsistent sizes");
  std::vector<float> out(q.numel);
  q4_decode_into(q.numel, q.block, q.scales.data(), q.codes.data(), out);
  return out;
}

// ---------------------------------------------------------------- q2

std::uint64_t q2_encoded_bytes(std::uint64_t numel, std::uint32_t block) {
  return q4_blocks(numel, block) * 4 + (numel + 3) / 4;
}

void q2_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes) {
  if (block < 2) throw Error("q2 block size must be at least 2");
  const std::size_t n = x.size();
  const float* px = x.data();
  // Pass 1: the block scales (and the check for non-finite values).
  for (std::size_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const std::size_t b1 = std::min<std::size_t>(n, b0 + block);
    // Four partial sums (value i into sum (i - b0) mod 4), added as (s0 + s1) + (s2 + s3): a
    // fixed order, so the scale is the same bytes on every machine. In double a finite float's
    // square never overflows, so the sum is finite exactly when every value is.
    double acc[4] = {0, 0, 0, 0};
    std::size_t i = b0;
    for (; i + 4 <= b1; i += 4)
      for (int j = 0; j < 4; ++j) acc[j] += static_cast<double>(px[i + j]) * static_cast<double>(px[i + j]);
    for (int j = 0; i < b1; ++i, ++j) acc[j] += static_cast<double>(px[i]) * static_cast<double>(px[i]);
    const double ss = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (!std::isfinite(ss)) {
      for (std::size_t k = b0; k < b1; ++k)
        if (!std::isfinite(px[k])) throw Error("q2: value " + std::to_string(k) + " is not finite");
    }
    // Half the root mean square, rounded once to float32; 2s is exact in float32 (or infinite
    // for a block near FLT_MAX, where every finite value then takes the inner codes).
    scales[bi] = static_cast<float>(0.5 * std::sqrt(ss / static_cast<double>(b1 - b0)));
  }
  // Pass 2: four codes per byte, each byte written once; the threshold 2s changes at every
  // block boundary, which may fall inside a byte when the block is not a multiple of 4.
  std::size_t bi = 0, next = std::min<std::size_t>(n, block);
  float two = n ? 2.0f * scales[0] : 0.0f;
  for (std::size_t k = 0; k * 4 < n; ++k) {
    unsigned byte = 0;
    const std::size_t e = std::min<std::size_t>(n, k * 4 + 4);
    for (std::size_t i = k * 4; i < e; ++i) {
      if (i == next) {
        ++bi;
        next = std::min<std::size_t>(n, next + block);
        two = 2.0f * scales[bi];
      }
      // c = [v >= -2s] + [v >= 0] + [v >= 2s] (s >= 0): the definition's four cases, without
      // branches (the signs of a pseudo-gradient are a coin toss for a branch predictor).
      const float v = px[i];
      const unsigned c = static_cast<unsigned>(v >= -two) + static_cast<unsigned>(v >= 0.0f) + static_cast<unsigned>(v >= two);
      byte |= c << (2 * (i - k * 4));
    }
    codes[k] = static_cast<std::uint8_t>(byte);
  }
}

void q2_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out) {
  if (block < 2) throw Error("q2 block size must be at least 2");
  if (out.size() != numel) throw Error("q2: output has the wrong length");
  const std::uint64_t nb = q4_blocks(numel, block);
  for (std::uint64_t b = 0; b < nb; ++b)
    if (!std::isfinite(scales[b]) || scales[b] < 0.0f) throw Error("q2: block scale " + std::to_string(b) + " is invalid");
  if (numel % 4 != 0 && (codes[numel / 4] >> (2 * (numel % 4))) != 0)
    throw Error("q2: the padding bits after the last code are not zero");
  static constexpr float kLevel[4] = {-3.0f, -1.0f, 1.0f, 3.0f};
  float* po = out.data();
  for (std::uint64_t b0 = 0, bi = 0; b0 < numel; b0 += block, ++bi) {
    const std::uint64_t b1 = std::min<std::uint64_t>(numel, b0 + block);
    const float sc = scales[bi];
    for (std::uint64_t i = b0; i < b1; ++i) po[i] = kLevel[(codes[i / 4] >> (2 * (i % 4))) & 3u] * sc;
  }
}

}  // namespace yeto::sync
