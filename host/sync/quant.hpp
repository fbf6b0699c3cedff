// 4-bit block quantisation of pseudo-gradients (q4). The vector is cut into blocks of
// `block` values (the last may be shorter); each block stores one float32 scale
// s = max|x| / 7 and one signed 4-bit code per value, q = round_half_even(x * r) clamped
// to [-7, 7] with r = 1 / s rounded to float32 (r = 0 when s = 0; a zero times an infinite r,
// in a block of tiny denormals, counts as 0), stored as the nibble q + 8 (so nibble 0 never
// occurs and is rejected on decode). Decode is x' = q * s. The error per value is at most
// s / 2 = max|x| / 14 of its block (up to float rounding), and a block of zeros decodes to
// exact zeros. Encoding is deterministic (no dependence on the floating-point environment:
// the rounding is done explicitly, and never with a fused multiply-add).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::sync {

struct Q4 {
  std::uint64_t numel = 0;
  std::uint32_t block = 64;
  std::vector<float> scales;         // ceil(numel / block)
  std::vector<std::uint8_t> codes;   // ceil(numel / 2): value 2k in the low nibble, 2k+1 in the high
  std::size_t bytes() const { return scales.size() * 4 + codes.size(); }
};

std::uint64_t q4_blocks(std::uint64_t numel, std::uint32_t block);
std::uint64_t q4_encoded_bytes(std::uint64_t numel, std::uint32_t block);

// Throws yeto::Error when a value is NaN/Inf (the caller must not push such a delta) or block < 2.
Q4 q4_encode(std::span<const float> x, std::uint32_t block);
void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes);
// Throws yeto::Error on a non-finite or negative scale, a zero nibble or inconsistent sizes.
std::vector<float> q4_decode(const Q4& q);
void q4_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out);

// The implementations, all bit-identical (tested against a scalar reference): scalar
// (portable, one value at a time; also used for odd block sizes), SSE2 (every x86-64 CPU) and
// AVX2 (chosen at run time where the CPU has it; decoding uses SSE2). The two functions above
// use q4_best_impl(); tests and the benchmark name one. Naming one that this CPU or build
// lacks throws yeto::Error.
enum class Q4Impl { scalar, sse2, avx2 };
bool q4_impl_available(Q4Impl impl);
Q4Impl q4_best_impl();
const char* q4_impl_name(Q4Impl impl);
void q4_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes, Q4Impl impl);
void q4_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out, Q4Impl impl);

// 2-bit block quantisation (q2), the low-bit choice of sync.uplink / sync.downlink. Blocks of
// `block` values (the last may be shorter), each with one float32 scale s = rms / 2 (the
// block's root mean square: squares summed in double into four partial sums, value i into sum
// i mod 4, added as (s0 + s1) + (s2 + s3); rounded once) and one 2-bit code per value:
// c = 0 for x < -2s, 1 for -2s <= x < 0, 2 for 0 <= x < 2s, 3 for x >= 2s, decoded x' = (2c - 3) s,
// i.e. one of -3s, -s, s, 3s: a uniform quantiser with step 2s = rms, about the mean-square
// optimum for normally distributed values. Values beyond 3s are clipped; q2 is meant for links
// with error feedback, where what a message drops goes with the next one. A block of zeros
// decodes to exact zeros. Codes: four per byte, value 4k in the two low bits; the bits after
// the last code are zero. The encoded size is 4 bytes per block plus ceil(numel / 4), so
// 2 + 32 / block bits per value (2.25 at block 128, against q4's 4.5 at 64). Deterministic
// (comparisons against 2s only; no division, no fused multiply-add).
std::uint64_t q2_encoded_bytes(std::uint64_t numel, std::uint32_t block);
// Throws yeto::Error when a value is NaN/Inf or block < 2.
void q2_encode_into(std::span<const float> x, std::uint32_t block, float* scales, std::uint8_t* codes);
// Throws yeto::Error on a non-finite or negative scale, non-zero padding bits or a wrong output length.
void q2_decode_into(std::uint64_t numel, std::uint32_t block, const float* scales, const std::uint8_t* codes,
                    std::span<float> out);

// Deterministic round-half-to-even of a finite float of magnitude < 2^22.
float round_half_even(float v);

}  // namespace yeto::sync
