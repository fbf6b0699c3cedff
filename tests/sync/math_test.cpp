// Merge math, q4 and layout on hand-computed vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>

#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "sync/layout.hpp"
#include "sync/merge.hpp"
#include "sync/options.hpp"
#include "sync/protocol.hpp"
#include "sync/quant.hpp"
#include "sync/state.hpp"

namespace ys = yeto::sync;
namespace fs = std::filesystem;

namespace {
std::vector<std::span<const float>> spans(const std::vector<std::vector<float>>& v) {
  std::vector<std::span<const float>> s;
  for (const auto& x : v) s.emplace_back(x);
  return s;
}
}  // namespace

// ---------------------------------------------------------------- token weights and RDA

TEST(SyncMerge, TokenWeightsAreSampleProportions) {
  const std::vector<std::uint64_t> s = {10, 30, 60};
  const auto w = ys::token_weights(s);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_DOUBLE_EQ(w[0], 0.1);
  EXPECT_DOUBLE_EQ(w[1], 0.3);
  EXPECT_DOUBLE_EQ(w[2], 0.6);
  EXPECT_THROW(ys::token_weights(std::vector<std::uint64_t>{}), yeto::Error);
  EXPECT_THROW(ys::token_weights(std::vector<std::uint64_t>{0, 0}), yeto::Error);
}

TEST(SyncMerge, RdaOrthogonalEqualWeights) {
  // Δ1 = (2,0), Δ2 = (0,2), w = 1/2 each. Mean (1,1) has norm √2; mean of norms is 2.
  // Result: 2 · (1,1)/√2 = (√2, √2) — longer than the plain average (1,1).
  const std::vector<std::vector<float>> d = {{2, 0}, {0, 2}};
  const std::vector<double> w = {0.5, 0.5};
  const auto r = ys::rda_merge(spans(d), w);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NEAR(r[0], std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(r[1], std::sqrt(2.0), 1e-6);
}

TEST(SyncMerge, RdaTokenWeighted) {
  // Δ1 = (3,4) (norm 5, weight 3/4), Δ2 = (0,-2) (norm 2, weight 1/4).
  // mean = (9/4, 3 - 1/2) = (2.25, 2.5), |mean| = sqrt(5.0625 + 6.25) = sqrt(11.3125)
  // radius = 3/4·5 + 1/4·2 = 4.25 -> result = 4.25 · mean / |mean|.
  const std::vector<std::vector<float>> d = {{3, 4}, {0, -2}};
  const auto w = ys::token_weights(std::vector<std::uint64_t>{300, 100});
  const auto r = ys::rda_merge(spans(d), w);
  const double nm = std::sqrt(11.3125);
  EXPECT_NEAR(r[0], 4.25 * 2.25 / nm, 1e-6);
  EXPECT_NEAR(r[1], 4.25 * 2.5 / nm, 1e-6);
  EXPECT_NEAR(ys::l2_norm(r), 4.25, 1e-6);
}

TEST(SyncMerge, RdaOfOneDeltaIsThatDelta) {
  const std::vector<std::vector<float>> d = {{1.5f, -2.0f, 0.25f}};
  const auto r = ys::rda_merge(spans(d), std::vector<double>{1.0});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(r[i], d[0][i], 1e-6);
}

TEST(SyncMerge, RdaOfCancellingDeltasIsZero) {
  const std::vector<std::vector<float>> d = {{1, 2}, {-1, -2}};
  const auto r = ys::rda_merge(spans(d), std::vector<double>{0.5, 0.5});
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_EQ(r[1], 0.0f);
}

// The default rule: the weighted mean, with the agreement |mean| / Σ wᵢ|Δᵢ| and each push's norm.
TEST(SyncMerge, MeanIsTheWeightedAverageAndReportsTheAgreement) {
  // Δ1 = (3,4) (norm 5, weight 3/4), Δ2 = (0,-2) (norm 2, weight 1/4): mean (2.25, 2.5),
  // radius 4.25, agreement sqrt(11.3125) / 4.25.
  const std::vector<std::vector<float>> d = {{3, 4}, {0, -2}};
  const auto w = ys::token_weights(std::vector<std::uint64_t>{300, 100});
  const auto m = ys::merge_deltas(spans(d), w, ys::MergeRule::mean);
  ASSERT_EQ(m.delta.size(), 2u);
  EXPECT_NEAR(m.delta[0], 2.25, 1e-6);
  EXPECT_NEAR(m.delta[1], 2.5, 1e-6);
  EXPECT_NEAR(m.agreement, std::sqrt(11.3125) / 4.25, 1e-12);
  EXPECT_NEAR(m.norm, std::sqrt(11.3125), 1e-12);
  ASSERT_EQ(m.norms.size(), 2u);
  EXPECT_DOUBLE_EQ(m.norms[0], 5.0);
  EXPECT_DOUBLE_EQ(m.norms[1], 2.0);
  // RDA of the same pushes: the mean scaled by 1 / agreement, same agreement and norms.
  const auto r = ys::merge_deltas(spans(d), w, ys::MergeRule::rda);
  EXPECT_NEAR(r.delta[0], 2.25 / m.agreement, 1e-5);
  EXPECT_NEAR(r.delta[1], 2.5 / m.agreement, 1e-5);
  EXPECT_DOUBLE_EQ(r.agreement, m.agreement);
  EXPECT_NEAR(r.norm, 4.25, 1e-12);
  EXPECT_NEAR(r.norm, ys::l2_norm(r.delta), 1e-5);
  EXPECT_EQ(r.norms, m.norms);
  // Orthogonal equal pushes: the mean halves each, agreement 1/√2 (RDA: √2 times the mean).
  const std::vector<std::vector<float>> o = {{2, 0}, {0, 2}};
  const auto mo = ys::merge_deltas(spans(o), std::vector<double>{0.5, 0.5}, ys::MergeRule::mean);
  EXPECT_NEAR(mo.delta[0], 1.0, 1e-6);
  EXPECT_NEAR(mo.delta[1], 1.0, 1e-6);
  EXPECT_NEAR(mo.agreement, 1 / std::sqrt(2.0), 1e-12);
  EXPECT_STREQ(ys::merge_rule_name(ys::MergeRule::mean), "mean");
  EXPECT_STREQ(ys::merge_rule_name(ys::MergeRule::rda), "rda");
}

TEST(SyncMerge, MeanOfOneDeltaIsThatDeltaAndOfCancellingOnesZero) {
  const std::vector<std::vector<float>> one = {{1.5f, -2.0f, 0.25f}};
  const auto m = ys::merge_deltas(spans(one), std::vector<double>{1.0}, ys::MergeRule::mean);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m.delta[i], one[0][i]);
  EXPECT_NEAR(m.agreement, 1.0, 1e-12);
  const std::vector<std::vector<float>> d = {{1, 2}, {-1, -2}};
  const auto c = ys::merge_deltas(spans(d), std::vector<double>{0.5, 0.5}, ys::MergeRule::mean);
  EXPECT_EQ(c.delta[0], 0.0f);
  EXPECT_EQ(c.delta[1], 0.0f);
  EXPECT_EQ(c.agreement, 0.0);
  const std::vector<std::vector<float>> z = {{0, 0}, {0, 0}};
  EXPECT_EQ(ys::merge_deltas(spans(z), std::vector<double>{0.5, 0.5}, ys::MergeRule::rda).agreement, 0.0);
  EXPECT_THROW(ys::merge_deltas(spans(d), std::vector<double>{1.0}, ys::MergeRule::mean), yeto::Error);
}

TEST(SyncMerge, RdaRejectsMismatchedLengths) {
  const std::vector<std::vector<float>> d = {{1, 2}, {1}};
  EXPECT_THROW(ys::rda_merge(spans(d), std::vector<double>{0.5, 0.5}), yeto::Error);
}

// ---------------------------------------------------------------- HeLoCo

TEST(SyncHeloco, AlignedBlockIsKept) {
  // cos((1,1),(1,0)) = 0.707 >= 0.2: unchanged.
  std::vector<float> d = {1, 1};
  const std::vector<float> m = {1, 0};
  ys::HelocoParams p;
  p.block = 2;
  const auto st = ys::heloco_correct(d, m, p);
  EXPECT_EQ(st.kept, 1u);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], 1.0f);
}

TEST(SyncHeloco, AntiAlignedBlockIsShrunkAlongMomentum) {
  // Δ = (-1, 1), m = (3, 0): c = -1/√2, v = (1,0), Δ·v = -1.
  // conf = |m| / (|m| + |Δ|) = 3 / (3 + √2); beta = min((1/√2) · conf, 1).
  // Δ' = Δ - beta (Δ·v) v = (-1 + beta, 1).
  std::vector<float> d = {-1, 1};
  const std::vector<float> m = {3, 0};
  ys::HelocoParams p;
  p.block = 2;
  const auto st = ys::heloco_correct(d, m, p);
  EXPECT_EQ(st.shrunk, 1u);
  const double conf = 3.0 / (3.0 + std::sqrt(2.0));
  const double beta = (1.0 / std::sqrt(2.0)) * conf;
  EXPECT_NEAR(d[0], -1.0 + beta, 1e-6);
  EXPECT_NEAR(d[1], 1.0, 1e-6);
  EXPECT_LT(ys::l2_norm(d), std::sqrt(2.0));  // shrunk
}

TEST(SyncHeloco, AntiAlignedShrinkIsCappedAtTheOpposingComponent) {
  // Fully opposed and a huge momentum: beta reaches shrink_max = 1 at most... here
  // c = -1, conf = 100/(100+1): beta = 0.990. Δ' = (-1 + 0.990, 0): never flipped positive.
  std::vector<float> d = {-1, 0};
  const std::vector<float> m = {100, 0};
  ys::HelocoParams p;
  p.block = 2;
  ys::heloco_correct(d, m, p);
  EXPECT_NEAR(d[0], -1.0 + 100.0 / 101.0, 1e-6);
  EXPECT_LE(d[0], 0.0f);
  p.shrink_gain = 10.0;  // beta = min(10 · 1 · conf, 1) = 1: the opposing component is removed exactly
  std::vector<float> d2 = {-1, 0};
  ys::heloco_correct(d2, m, p);
  EXPECT_NEAR(d2[0], 0.0, 1e-7);
}

TEST(SyncHeloco, WeaklyAlignedBlockIsPartiallyReorientedKeepingItsNorm) {
  // Δ = (1, 9) (|Δ| = √82), m = (8, 0): c = 1/√82 = 0.110 < 0.2.
  // conf = 8 / (8 + √82); lambda = min((0.2 - c)/0.2 · conf, 0.5).
  // t = (1-lambda) Δ/|Δ| + lambda (1, 0); Δ' = |Δ| t / |t|.
  std::vector<float> d = {1, 9};
  const std::vector<float> m = {8, 0};
  ys::HelocoParams p;
  p.block = 2;
  const auto st = ys::heloco_correct(d, m, p);
  EXPECT_EQ(st.reoriented, 1u);
  const double nd = std::sqrt(82.0), c = 1.0 / nd, conf = 8.0 / (8.0 + nd);
  const double lambda = std::min((0.2 - c) / 0.2 * conf, 0.5);
  const double t0 = (1 - lambda) * 1 / nd + lambda, t1 = (1 - lambda) * 9 / nd;
  const double nt = std::hypot(t0, t1);
  EXPECT_NEAR(d[0], nd * t0 / nt, 1e-5);
  EXPECT_NEAR(d[1], nd * t1 / nt, 1e-5);
  EXPECT_NEAR(ys::l2_norm(d), nd, 1e-5);
  EXPECT_GT(d[0] / ys::l2_norm(d), c);  // now closer to the momentum direction
}

TEST(SyncHeloco, BlocksAreIndependentAndZeroMomentumSkips) {
  // Block 0: anti-aligned against m=(1,0); block 1: momentum zero -> untouched.
  std::vector<float> d = {-1, 0, 5, 5};
  const std::vector<float> m = {1, 0, 0, 0};
  ys::HelocoParams p;
  p.block = 2;
  const auto st = ys::heloco_correct(d, m, p);
  EXPECT_EQ(st.shrunk, 1u);
  EXPECT_EQ(st.skipped, 1u);
  EXPECT_NEAR(d[0], -1.0 + 0.5, 1e-6);  // c=-1, conf = 1/(1+1) = 0.5, beta = 0.5
  EXPECT_EQ(d[2], 5.0f);
  EXPECT_EQ(d[3], 5.0f);
}

// ---------------------------------------------------------------- Nesterov outer step

TEST(SyncOuter, NesterovTwoStepsByHand) {
  // lr 0.5, mu 0.9, θ0 = (1, -2), g1 = (0.2, 0.4):
  //   m1 = g1 = (0.2, 0.4); θ1 = θ0 - 0.5 (g1 + 0.9 m1) = (1 - 0.19, -2 - 0.38) = (0.81, -2.38)
  // g2 = (0.1, -0.1):
  //   m2 = 0.9 m1 + g2 = (0.28, 0.26); θ2 = θ1 - 0.5 (g2 + 0.9 m2) = (0.81 - 0.176, -2.38 - 0.067)
  std::vector<float> th = {1, -2}, m = {0, 0};
  ys::outer_step(th, m, std::vector<float>{0.2f, 0.4f}, 0.5, 0.9);
  EXPECT_NEAR(m[0], 0.2, 1e-7);
  EXPECT_NEAR(m[1], 0.4, 1e-7);
  EXPECT_NEAR(th[0], 0.81, 1e-6);
  EXPECT_NEAR(th[1], -2.38, 1e-6);
  ys::outer_step(th, m, std::vector<float>{0.1f, -0.1f}, 0.5, 0.9);
  EXPECT_NEAR(m[0], 0.28, 1e-6);
  EXPECT_NEAR(m[1], 0.26, 1e-6);
  EXPECT_NEAR(th[0], 0.81 - 0.176, 1e-6);
  EXPECT_NEAR(th[1], -2.38 - 0.067, 1e-6);
}

TEST(SyncOuter, LrOneMomentumZeroAppliesTheDelta) {
  // θ - Δ with Δ = θ_global - θ_local lands exactly on the learner's weights.
  std::vector<float> th = {1, 2}, m = {0, 0};
  ys::outer_step(th, m, std::vector<float>{0.25f, -0.5f}, 1.0, 0.0);
  EXPECT_FLOAT_EQ(th[0], 0.75f);
  EXPECT_FLOAT_EQ(th[1], 2.5f);
}

// ---------------------------------------------------------------- q4

TEST(SyncQ4, HandComputedBlock) {
  // block of 4: max|x| = 7 -> scale 1; codes round half to even: 2.5 -> 2, -3.5 -> -4, 0.4 -> 0.
  const std::vector<float> x = {7.0f, 2.5f, -3.5f, 0.4f};
  const auto q = ys::q4_encode(x, 4);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_FLOAT_EQ(q.scales[0], 1.0f);
  const auto y = ys::q4_decode(q);
  EXPECT_EQ(y, (std::vector<float>{7.0f, 2.0f, -4.0f, 0.0f}));
  EXPECT_EQ(q.codes[0], static_cast<std::uint8_t>((7 + 8) | ((2 + 8) << 4)));
  // More ties (scale 1), across an odd block size so blocks start on high nibbles too.
  const std::vector<float> t = {7.0f, 0.5f, 1.5f, -0.5f, 6.5f, -6.5f, -7.0f, 3.5f, -2.5f};
  const auto qt = ys::q4_encode(t, 3);  // blocks: {7, .5, 1.5} {-.5, 6.5, -6.5} {-7, 3.5, -2.5}
  const auto yt = ys::q4_decode(qt);
  EXPECT_EQ(yt[1], 0.0f);
  EXPECT_EQ(yt[2], 2.0f);
  EXPECT_EQ(yt[7], 4.0f);
  EXPECT_EQ(yt[8], -2.0f);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const float s = qt.scales[i / 3];
    EXPECT_EQ(yt[i], ys::round_half_even(t[i] / s) * s) << i;
  }
}

TEST(SyncQ4, RoundTripErrorWithinHalfAStepPerBlock) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::uint32_t block : {8u, 32u, 64u, 256u}) {
    std::vector<float> x(1000 + block / 3);
    for (auto& v : x) v = nd(rng) * 0.01f;
    x[5] = 0.5f;  // an outlier only coarsens its own block
    const auto q = ys::q4_encode(x, block);
    EXPECT_EQ(q.bytes(), ys::q4_encoded_bytes(x.size(), block));
    const auto y = ys::q4_decode(q);
    ASSERT_EQ(y.size(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float s = q.scales[i / block];
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * s * (1 + 1e-5f) + 1e-12f) << "block " << block << " i " << i;
    }
  }
}

TEST(SyncQ4, DeterministicAndZerosExact) {
  std::vector<float> x(300, 0.0f);
  for (std::size_t i = 100; i < 300; ++i) x[i] = std::sin(static_cast<float>(i));
  const auto a = ys::q4_encode(x, 64), b = ys::q4_encode(x, 64);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  const auto y = ys::q4_decode(a);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(y[i], 0.0f);
}

TEST(SyncQ4, RejectsNonFiniteInputAndBadCodes) {
  std::vector<float> x = {1, 2, NAN, 3};
  EXPECT_THROW(ys::q4_encode(x, 4), yeto::Error);
  x[2] = INFINITY;
  EXPECT_THROW(ys::q4_encode(x, 4), yeto::Error);
  auto q = ys::q4_encode(std::vector<float>{1, 2, 3}, 4);
  q.codes[0] &= 0xF0;  // nibble 0 is never produced
  EXPECT_THROW(ys::q4_decode(q), yeto::Error);
  q = ys::q4_encode(std::vector<float>{1, 2, 3}, 4);
  q.scales[0] = NAN;
  EXPECT_THROW(ys::q4_decode(q), yeto::Error);
}

TEST(SyncQ4, RoundHalfEven) {
  EXPECT_EQ(ys::round_half_even(0.5f), 0.0f);
  EXPECT_EQ(ys::round_half_even(1.5f), 2.0f);
  EXPECT_EQ(ys::round_half_even(2.5f), 2.0f);
  EXPECT_EQ(ys::round_half_even(-2.5f), -2.0f);
  EXPECT_EQ(ys::round_half_even(-1.5f), -2.0f);
  EXPECT_EQ(ys::round_half_even(2.4f), 2.0f);
  EXPECT_EQ(ys::round_half_even(-2.6f), -3.0f);
}

// ---------------------------------------------------------------- q2

namespace {
std::vector<float> q2_round_trip(const std::vector<float>& x, std::uint32_t block, std::vector<float>* scales_out = nullptr,
                                 std::vector<std::uint8_t>* codes_out = nullptr) {
  std::vector<float> scales(ys::q4_blocks(x.size(), block));
  std::vector<std::uint8_t> codes((x.size() + 3) / 4, 0xFF);  // the encoder writes every bit
  ys::q2_encode_into(x, block, scales.data(), codes.data());
  std::vector<float> y(x.size());
  ys::q2_decode_into(x.size(), block, scales.data(), codes.data(), y);
  if (scales_out) *scales_out = scales;
  if (codes_out) *codes_out = codes;
  return y;
}
}  // namespace

TEST(SyncQ2, HandComputedBlocks) {
  // Block {3, -1, 1, -5}: rms 3, s = 1.5, thresholds -3, 0, 3 -> codes 3, 1, 2, 0 -> 4.5, -1.5, 1.5, -4.5.
  // Block {4, -4, 4, -4}: rms 4, s = 2, the ties: x = 2s takes the outer code, x = -2s the inner one.
  // A last block of one value (rms 0.25, s = 0.125, x = 2s) leaves six zero padding bits.
  std::vector<float> x = {3.0f, -1.0f, 1.0f, -5.0f, 4.0f, -4.0f, 4.0f, -4.0f, 0.25f};
  std::vector<float> scales;
  std::vector<std::uint8_t> codes;
  const auto y = q2_round_trip(x, 4, &scales, &codes);
  ASSERT_EQ(scales.size(), 3u);
  ASSERT_EQ(codes.size(), 3u);
  EXPECT_EQ(ys::q2_encoded_bytes(x.size(), 4), 3u * 4 + 3);
  EXPECT_EQ(scales[0], 1.5f);
  EXPECT_EQ(scales[1], 2.0f);  // rms 4
  EXPECT_EQ(scales[2], 0.125f);
  EXPECT_EQ(codes[0], static_cast<std::uint8_t>(3 | (1 << 2) | (2 << 4) | (0 << 6)));
  EXPECT_EQ(codes[1], static_cast<std::uint8_t>(3 | (1 << 2) | (3 << 4) | (1 << 6)));
  EXPECT_EQ(codes[2], static_cast<std::uint8_t>(3));
  EXPECT_EQ(y, (std::vector<float>{4.5f, -1.5f, 1.5f, -4.5f, 6.0f, -2.0f, 6.0f, -2.0f, 0.375f}));
}

TEST(SyncQ2, ZerosExactDeterministicAndAboutTheMeanSquareOptimum) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::uint32_t block : {8u, 64u, 128u, 1000u}) {
    std::vector<float> x(5003, 0.0f);
    for (std::size_t i = 2 * block; i < x.size(); ++i) x[i] = nd(rng) * 0.01f;  // two blocks of zeros first
    std::vector<float> sa, sb;
    std::vector<std::uint8_t> ca, cb;
    const auto y = q2_round_trip(x, block, &sa, &ca);
    q2_round_trip(x, block, &sb, &cb);
    EXPECT_EQ(ca, cb);
    EXPECT_EQ(sa, sb);
    for (std::size_t i = 0; i < 2 * block; ++i) ASSERT_EQ(y[i], 0.0f) << i;
    // Normal values: the uniform 4-level quantiser with step rms leaves ~0.12 of the energy
    // (0.1175 is the optimum of any 4-level quantiser); q4's 4-bit codes leave far less.
    double err = 0, energy = 0;
    for (std::size_t i = 2 * block; i < x.size(); ++i) {
      err += (y[i] - x[i]) * double(y[i] - x[i]);
      energy += x[i] * double(x[i]);
    }
    std::printf("block %u: error energy %.4f of the values\n", block, err / energy);
    EXPECT_GT(err / energy, 0.08) << block;
    EXPECT_LT(err / energy, 0.15) << block;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float sc = sa[i / block];
      ASSERT_TRUE(y[i] == -3 * sc || y[i] == -sc || y[i] == sc || y[i] == 3 * sc) << i;
    }
  }
}

// q2 drops much of each message, and error feedback sends it later: quantising x + r and keeping
// r = (x + r) - decoded round after round, the decoded sum is k x - r, and r stays bounded
// instead of growing with k. A lone outlier in a block (clipped at 3s = 1.5 rms) takes a larger,
// but still bounded, residual: it goes out over the next rounds.
TEST(SyncQ2, ErrorFeedbackKeepsTheSumOnTrack) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(4096), r(x.size(), 0.0f), sum(x.size(), 0.0f), in(x.size());
  for (auto& v : x) v = nd(rng) * 0.003f;
  x[17] = 0.02f;  // 6.7 sigma, alone in its block of 128
  std::vector<double> worst_normal(65, 0.0), outlier_r(65, 0.0);
  for (int k = 1; k <= 64; ++k) {
    for (std::size_t i = 0; i < x.size(); ++i) in[i] = x[i] + r[i];
    const auto y = q2_round_trip(in, 128);
    for (std::size_t i = 0; i < x.size(); ++i) {
      r[i] = in[i] - y[i];
      sum[i] += y[i];
      if (i / 128 != 0) worst_normal[k] = std::max(worst_normal[k], std::fabs(double(sum[i]) - k * double(x[i])));
    }
    outlier_r[k] = std::fabs(double(sum[17]) - k * double(x[17]));
  }
  for (int k : {8, 16, 32, 64}) std::printf("round %d: max |sum - k x| %.5f (normal blocks), outlier %.5f\n", k, worst_normal[k], outlier_r[k]);
  double lag = 0, energy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    lag += (sum[i] - 64 * x[i]) * double(sum[i] - 64 * x[i]);
    energy += 64.0 * x[i] * 64.0 * x[i];
  }
  std::printf("after 64 rounds |sum - 64 x| / |64 x| = %.4f\n", std::sqrt(lag / energy));
  // The residual saturates: what a round cannot send (values beyond 3s) raises the next rounds'
  // scale until it can. So it stops growing well before 64 rounds, and the sum is k x up to
  // about two rounds' worth of the values (a constant, not a fraction growing with k).
  EXPECT_LT(worst_normal[64], 1.05 * worst_normal[32]);
  EXPECT_LT(outlier_r[64], 1.05 * outlier_r[32]);
  EXPECT_LT(std::sqrt(lag / energy), 2.0 / 64);
}

namespace {
// The format's scale: s = rms / 2 with the squares summed in double into four partial sums
// (value i of the block into sum i mod 4), added as (s0 + s1) + (s2 + s3).
float q2_reference_scale(const std::vector<float>& x, std::size_t b0, std::size_t b1) {
  double acc[4] = {0, 0, 0, 0};
  for (std::size_t i = b0; i < b1; ++i) acc[(i - b0) % 4] += double(x[i]) * double(x[i]);
  return static_cast<float>(0.5 * std::sqrt(((acc[0] + acc[1]) + (acc[2] + acc[3])) / double(b1 - b0)));
}
}  // namespace

// The q2 bytes against an encoder written value by value from the format's definition (a
// scale per block, then each code OR-ed into its byte), on random blocks of every shape: block
// sizes that are and are not multiples of 4, partial last blocks, zeros of both signs, values
// exactly at ±2s, outliers.
TEST(SyncQ2, BytesEqualAValueByValueReference) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::uint32_t block : {2u, 3u, 5u, 8u, 13u, 64u, 128u, 1000u}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{7}, std::size_t{129},
                          std::size_t{1001}, std::size_t{4099}}) {
      std::vector<float> x(n);
      for (auto& v : x) v = nd(rng) * 0.01f;
      if (n > 5) {
        x[1] = 0.0f;
        x[2] = -0.0f;
        x[n - 1] = 0.5f;  // an outlier in the last block
      }
      const std::size_t nb = (n + block - 1) / block;
      std::vector<float> rs(nb);
      std::vector<std::uint8_t> rc((n + 3) / 4, 0);
      const auto scale_of = [&](std::size_t b) {
        return q2_reference_scale(x, b * block, std::min<std::size_t>(n, (b + 1) * block));
      };
      if (n > 5) {  // value 3 at exactly 2s of its block (a tie: the outer code), found by iterating
        for (int round = 0; round < 3; ++round) x[3] = 2 * scale_of(3 / block);
      }
      for (std::size_t b = 0; b < nb; ++b) rs[b] = scale_of(b);
      for (std::size_t i = 0; i < n; ++i) {
        const float s2 = 2 * rs[i / block], v = x[i];
        const unsigned c = v >= 0 ? (v >= s2 ? 3 : 2) : (v >= -s2 ? 1 : 0);
        rc[i / 4] = static_cast<std::uint8_t>(rc[i / 4] | (c << (2 * (i % 4))));
      }
      std::vector<float> scales;
      std::vector<std::uint8_t> codes;
      q2_round_trip(x, block, &scales, &codes);
      ASSERT_EQ(scales, rs) << "block " << block << " n " << n;
      ASSERT_EQ(codes, rc) << "block " << block << " n " << n;
    }
  }
}

TEST(SyncQ2, RejectsNonFiniteInputBadScalesAndPadding) {
  std::vector<float> x = {1, 2, NAN, 3, 4};
  std::vector<float> scales(2);
  std::vector<std::uint8_t> codes(2);
  EXPECT_THROW(ys::q2_encode_into(x, 4, scales.data(), codes.data()), yeto::Error);
  x[2] = INFINITY;
  EXPECT_THROW(ys::q2_encode_into(x, 4, scales.data(), codes.data()), yeto::Error);
  EXPECT_THROW(ys::q2_encode_into(x, 1, scales.data(), codes.data()), yeto::Error);
  x[2] = -2;
  ys::q2_encode_into(x, 4, scales.data(), codes.data());
  std::vector<float> y(5);
  ys::q2_decode_into(5, 4, scales.data(), codes.data(), y);
  auto bad = codes;
  bad[1] |= 0x04;  // a bit after the fifth code
  EXPECT_THROW(ys::q2_decode_into(5, 4, scales.data(), bad.data(), y), yeto::Error);
  auto bad_s = scales;
  bad_s[1] = NAN;
  EXPECT_THROW(ys::q2_decode_into(5, 4, bad_s.data(), codes.data(), y), yeto::Error);
  bad_s[1] = -1.0f;
  EXPECT_THROW(ys::q2_decode_into(5, 4, bad_s.data(), codes.data(), y), yeto::Error);
  std::vector<float> short_out(4);
  EXPECT_THROW(ys::q2_decode_into(5, 4, scales.data(), codes.data(), short_out), yeto::Error);
}
// The q4 bytes pinned against a straightforward scalar encoder written from the format's
// definition, so that a faster implementation cannot silently change what goes on the wire.
namespace {
struct RefQ4 {
  std::vector<float> scales;
  std::vector<std::uint8_t> codes;
};

// One value at a time: s = max|x| / 7 of the block, r = 1 / s in float32 (0 when s is 0),
// q = round_half_even(x * r) clamped to [-7, 7], nibble q + 8. A product that is NaN (a zero
// times an infinite r, when s is so small that 1 / s overflows) encodes as q = 0.
RefQ4 ref_encode(std::span<const float> x, std::uint32_t block) {
  RefQ4 r;
  const std::size_t n = x.size();
  r.scales.assign((n + block - 1) / block, 0.0f);
  r.codes.assign((n + 1) / 2, 0);
  for (std::size_t b = 0; b * block < n; ++b) {
    const std::size_t b0 = b * block, b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    for (std::size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = amax / 7.0f;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    r.scales[b] = s;
    for (std::size_t i = b0; i < b1; ++i) {
      const float p = x[i] * inv;
      int q = 0;
      if (std::isnan(p)) q = 0;
      else if (p >= 7.0f) q = 7;
      else if (p <= -7.0f) q = -7;
      else q = static_cast<int>(ys::round_half_even(p));
      r.codes[i / 2] = static_cast<std::uint8_t>(r.codes[i / 2] | ((q + 8) << (i % 2 ? 4 : 0)));
    }
  }
  return r;
}

std::vector<float> ref_decode(std::uint64_t numel, std::uint32_t block, const std::vector<float>& scales,
                              const std::vector<std::uint8_t>& codes) {
  std::vector<float> out(numel);
  for (std::uint64_t i = 0; i < numel; ++i) {
    const int nib = i % 2 ? codes[i / 2] >> 4 : codes[i / 2] & 0x0F;
    out[i] = static_cast<float>(nib - 8) * scales[i / block];
  }
  return out;
}

// Every implementation this CPU and build have (scalar, and SSE2 / AVX2 on x86-64).
std::vector<ys::Q4Impl> impls() {
  std::vector<ys::Q4Impl> v;
  for (const ys::Q4Impl impl : {ys::Q4Impl::scalar, ys::Q4Impl::sse2, ys::Q4Impl::avx2})
    if (ys::q4_impl_available(impl)) v.push_back(impl);
  return v;
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A block of `len` values of one of several kinds: wide-range normals, exact ties at .5 of
// the step, zeros (with signs), denormals, a denormal maximum (1 / s overflows), values
// near FLT_MAX, and raw random bit patterns that are finite.
void fill_block(std::mt19937& rng, float* v, std::size_t len) {
  std::uniform_int_distribution<int> kind_d(0, 7), exp_d(-40, 40), k_d(-7, 7), coin(0, 3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int kind = kind_d(rng);
  const float scale = std::ldexp(1.0f, exp_d(rng));
  for (std::size_t i = 0; i < len; ++i) {
    float x = 0.0f;
    switch (kind) {
      case 0: x = nd(rng) * scale; break;
      case 1:  // max|x| = 7 * 2^e, so s = 2^e and r = 2^-e exactly: every (k + 1/2) * 2^e is a tie
        x = (static_cast<float>(k_d(rng)) + (coin(rng) ? 0.5f : 0.0f)) * scale;
        break;
      case 2: x = coin(rng) == 0 ? nd(rng) * scale : (coin(rng) % 2 ? 0.0f : -0.0f); break;
      case 3: x = bits_to_float(static_cast<std::uint32_t>(rng()) & 0x807FFFFFu); break;  // denormals and zeros
      case 4: x = coin(rng) ? bits_to_float(static_cast<std::uint32_t>(rng()) & 0x800FFFFFu) : 0.0f; break;
      case 5: x = nd(rng) * 3.0e37f; break;
      case 6:
        do x = bits_to_float(static_cast<std::uint32_t>(rng()));
        while (!std::isfinite(x));
        break;
      default: x = 0.0f; break;
    }
    v[i] = x;
  }
  if (kind == 1 && len > 0) v[rng() % len] = (coin(rng) % 2 ? 7.0f : -7.0f) * scale;
  if (kind == 5 && len > 0 && coin(rng) == 0) v[rng() % len] = coin(rng) % 2 ? 3.4028235e38f : -3.4028235e38f;
}
}  // namespace

TEST(SyncQ4, BytesEqualTheScalarReferenceOnRandomBlocks) {
  std::mt19937 rng(20261206);
  const std::vector<std::uint32_t> blocks = {2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 128, 256, 1000};
  std::uniform_int_distribution<std::size_t> numel_d(0, 3000), offset_d(0, 3);
  std::size_t cases = 0;
  for (int round = 0; round < 12; ++round) {
    for (const std::uint32_t block : blocks) {
      std::size_t n = numel_d(rng);
      if (round == 0) n = block * 5 + 1;  // odd count, short last block
      if (round == 1) n = block * 8;      // whole blocks only
      // Unaligned input: the values start 0..3 floats into the buffer.
      const std::size_t off = offset_d(rng);
      std::vector<float> buf(n + off);
      for (std::size_t b0 = 0; b0 < n; b0 += block) fill_block(rng, buf.data() + off + b0, std::min<std::size_t>(block, n - b0));
      const std::span<const float> x(buf.data() + off, n);
      const RefQ4 ref = ref_encode(x, block);
      const auto want = ref_decode(n, block, ref.scales, ref.codes);
      for (const ys::Q4Impl impl : impls()) {
        std::vector<float> scales(ref.scales.size(), -1.0f);
        std::vector<std::uint8_t> codes(ref.codes.size(), 0xFF);  // every byte must be written
        ys::q4_encode_into(x, block, scales.data(), codes.data(), impl);
        const std::string where = std::string(ys::q4_impl_name(impl)) + " block " + std::to_string(block) + " n " +
                                  std::to_string(n);
        ASSERT_EQ(0, std::memcmp(scales.data(), ref.scales.data(), scales.size() * 4)) << where;
        for (std::size_t k = 0; k < codes.size(); ++k) ASSERT_EQ(codes[k], ref.codes[k]) << where << " byte " << k;
        // Decode bit for bit, into an unaligned output.
        std::vector<float> out(n + off, 123.0f);
        ys::q4_decode_into(n, block, scales.data(), codes.data(), std::span<float>(out.data() + off, n), impl);
        ASSERT_EQ(0, std::memcmp(out.data() + off, want.data(), n * 4)) << where;
      }
      const auto q = ys::q4_encode(x, block);  // the default implementation
      ASSERT_EQ(q.codes, ref.codes);
      ASSERT_EQ(ys::q4_decode(q), want);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 12 * blocks.size());
}

TEST(SyncQ4, DecodeEqualsTheScalarReferenceOnRandomCodes) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> nib_d(1, 15);
  std::uniform_real_distribution<float> s_d(0.0f, 10.0f);
  for (const std::uint32_t block : {2u, 3u, 8u, 31u, 32u, 64u, 65u, 128u}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{1001}, std::size_t{4096}}) {
      std::vector<float> scales((n + block - 1) / block);
      for (auto& s : scales) s = rng() % 5 == 0 ? 0.0f : s_d(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 200) - 140);
      std::vector<std::uint8_t> codes((n + 1) / 2);
      for (std::size_t i = 0; i < n; ++i) codes[i / 2] = static_cast<std::uint8_t>(codes[i / 2] | (nib_d(rng) << (i % 2 ? 4 : 0)));
      const auto want = ref_decode(n, block, scales, codes);
      for (const ys::Q4Impl impl : impls()) {
        std::vector<float> out(n);
        ys::q4_decode_into(n, block, scales.data(), codes.data(), out, impl);
        ASSERT_EQ(0, std::memcmp(out.data(), want.data(), n * 4)) << ys::q4_impl_name(impl) << " block " << block << " n " << n;
        if (n == 0) continue;
        // A zero nibble anywhere, a nonzero padding nibble, or a bad scale is refused.
        for (int t = 0; t < 8; ++t) {
          auto bad = codes;
          const std::size_t i = rng() % n;
          bad[i / 2] &= static_cast<std::uint8_t>(i % 2 ? 0x0F : 0xF0);
          EXPECT_THROW(ys::q4_decode_into(n, block, scales.data(), bad.data(), out, impl), yeto::Error) << i;
        }
        if (n % 2 == 1) {
          auto bad = codes;
          bad.back() |= 0x10;
          EXPECT_THROW(ys::q4_decode_into(n, block, scales.data(), bad.data(), out, impl), yeto::Error);
        }
        auto bad_s = scales;
        bad_s[rng() % bad_s.size()] = rng() % 2 ? -1.0f : INFINITY;
        EXPECT_THROW(ys::q4_decode_into(n, block, bad_s.data(), codes.data(), out, impl), yeto::Error);
      }
    }
  }
}

TEST(SyncQ4, NonFiniteValueAnywhereIsRefused) {
  for (const std::uint32_t block : {2u, 7u, 64u}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{31}, std::size_t{64}, std::size_t{200}}) {
      std::vector<float> x(201, 0.25f);
      for (const float bad : {NAN, INFINITY, -INFINITY}) {
        x[at] = bad;
        std::vector<float> scales(ys::q4_blocks(x.size(), block));
        std::vector<std::uint8_t> codes((x.size() + 1) / 2);
        for (const ys::Q4Impl impl : impls())
          EXPECT_THROW(ys::q4_encode_into(x, block, scales.data(), codes.data(), impl), yeto::Error)
              << ys::q4_impl_name(impl) << " " << block << " " << at;
      }
    }
  }
}

// ---------------------------------------------------------------- layout

namespace {
std::vector<ys::TensorSpec> specs() {
  return {{"a.lora_A", 100}, {"a.lora_B", 40}, {"b.lora_A", 70}, {"b.lora_B", 30}, {"c.lora_A", 60}};
}
}  // namespace

TEST(SyncLayout, BinpackBalancesBySize) {
  // Sorted: a.A 100, b.A 70, c.A 60, a.B 40, b.B 30. Fragments: 100 -> f0; 70 -> f1; 60 -> f1?
  // no: loads (100, 70): 60 -> f1 (130); 40 -> f0 (140); 30 -> f1 (160)... smallest wins each time.
  const auto l = ys::build_layout(specs(), 2, ys::FragmentPattern::binpack);
  ASSERT_EQ(l.fragments.size(), 2u);
  EXPECT_EQ(l.fragments[0].tensors, (std::vector<std::uint32_t>{0, 1}));     // 100 + 40
  EXPECT_EQ(l.fragments[1].tensors, (std::vector<std::uint32_t>{2, 3, 4}));  // 70 + 60 + 30
  EXPECT_EQ(l.fragments[0].numel, 140u);
  EXPECT_EQ(l.fragments[1].numel, 160u);
}

TEST(SyncLayout, StridedAndDeterministic) {
  const auto l = ys::build_layout(specs(), 2, ys::FragmentPattern::strided);
  EXPECT_EQ(l.fragments[0].tensors, (std::vector<std::uint32_t>{0, 2, 4}));
  EXPECT_EQ(l.fragments[1].tensors, (std::vector<std::uint32_t>{1, 3}));
  const auto l2 = ys::build_layout(specs(), 2, ys::FragmentPattern::strided);
  EXPECT_EQ(l.fingerprint(), l2.fingerprint());
  EXPECT_NE(l.fingerprint(), ys::build_layout(specs(), 2, ys::FragmentPattern::binpack).fingerprint());
  EXPECT_NE(l.fingerprint(), ys::build_layout(specs(), 3, ys::FragmentPattern::strided).fingerprint());
  auto other = specs();
  other[1].numel = 41;
  EXPECT_NE(l.fingerprint(), ys::build_layout(other, 2, ys::FragmentPattern::strided).fingerprint());
}

TEST(SyncLayout, RejectsBadInput) {
  EXPECT_THROW(ys::build_layout(specs(), 0, ys::FragmentPattern::binpack), yeto::UsageError);
  EXPECT_THROW(ys::build_layout(specs(), 6, ys::FragmentPattern::binpack), yeto::UsageError);
  auto dup = specs();
  dup[2].name = "a.lora_A";
  EXPECT_THROW(ys::build_layout(dup, 2, ys::FragmentPattern::binpack), yeto::UsageError);
  EXPECT_THROW(ys::parse_pattern("round-robin"), yeto::UsageError);
}

TEST(SyncLayout, PackApplyRoundTripAndBlend) {
  const auto l = ys::build_layout({{"x", 3}, {"y", 2}, {"z", 1}}, 2, ys::FragmentPattern::strided);
  std::vector<std::vector<float>> t = {{1, 2, 3}, {4, 5}, {6}};
  std::vector<std::span<const float>> cs;
  std::vector<std::span<float>> ms;
  for (auto& v : t) {
    cs.emplace_back(v);
    ms.emplace_back(v);
  }
  const auto f0 = ys::pack_fragment(l, 0, cs);  // x then z
  EXPECT_EQ(f0, (std::vector<float>{1, 2, 3, 6}));
  ys::apply_fragment(l, 0, std::vector<float>{10, 20, 30, 60}, ms);
  EXPECT_EQ(t[0], (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(t[2], (std::vector<float>{60}));
  EXPECT_EQ(t[1], (std::vector<float>{4, 5}));  // other fragment untouched
  ys::apply_fragment(l, 1, std::vector<float>{0, 1}, ms, 0.5f);
  EXPECT_EQ(t[1], (std::vector<float>{2.0f, 3.0f}));
  EXPECT_THROW(ys::apply_fragment(l, 1, std::vector<float>{0}, ms), yeto::Error);
}

TEST(SyncLayout, StaggeredSchedule) {
  // H = 10, F = 4: offsets 0, 2, 5, 7; fragment p is due at steps off + kH (step >= 1).
  EXPECT_EQ(ys::fragment_offset(0, 4, 10), 0u);
  EXPECT_EQ(ys::fragment_offset(1, 4, 10), 2u);
  EXPECT_EQ(ys::fragment_offset(2, 4, 10), 5u);
  EXPECT_EQ(ys::fragment_offset(3, 4, 10), 7u);
  std::vector<int> due0, due2;
  for (std::uint64_t s = 0; s <= 30; ++s) {
    if (ys::fragment_due(0, 4, 10, s)) due0.push_back(static_cast<int>(s));
    if (ys::fragment_due(2, 4, 10, s)) due2.push_back(static_cast<int>(s));
  }
  EXPECT_EQ(due0, (std::vector<int>{10, 20, 30}));
  EXPECT_EQ(due2, (std::vector<int>{5, 15, 25}));
}

// ---------------------------------------------------------------- checkpoint


namespace {
ys::SyncerState two_fragment_state() {
  ys::SyncerState s;
  s.initialised = true;
  s.layout = ys::build_layout({{"a", 3}, {"b", 2}}, 2, ys::FragmentPattern::strided);
  s.fragments.resize(2);
  s.fragments[0] = {5, ys::make_floats({0.1f, -2.5f, 3e-8f}), ys::make_floats({0.125f, -2.5f, 0}),
                    ys::make_floats({1, 2, 3}), 0.25, R"({"event":"merge"})"};
  s.fragments[1] = {7, ys::make_floats({4, 5}), ys::make_floats({4.5f, 5}), ys::make_floats({-1, -2}), -1, ""};
  s.outer_steps = 12;
  s.samples_merged = 960;
  s.wall_seconds = 3.5;
  s.registry["x"] = {"x", true, 4, 3, 24, 2, 0};
  return s;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("yeto-sync-ckpt-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void flip_byte(const fs::path& file, std::size_t at) {
  std::string bytes = yeto::read_file(file);
  bytes[at] ^= 0x20;
  yeto::atomic_write(file, bytes);
}

// The checkpoint as formats 1 and 2 wrote it (every fragment's values inline; format 1 without
// the public state), for the reading of old state directories.
std::string inline_checkpoint(const ys::SyncerState& s, std::uint32_t format) {
  std::string b;
  auto put = [&](const void* p, std::size_t n) { b.append(static_cast<const char*>(p), n); };
  auto u8 = [&](std::uint8_t v) { put(&v, 1); };
  auto u32 = [&](std::uint32_t v) { put(&v, 4); };
  auto u64 = [&](std::uint64_t v) { put(&v, 8); };
  auto str = [&](const std::string& v) {
    u32(static_cast<std::uint32_t>(v.size()));
    b += v;
  };
  auto floats = [&](const std::vector<float>& v) { put(v.data(), v.size() * 4); };
  u32(0x504B4359);
  u32(format);
  u8(1);
  u8(s.finished ? 1 : 0);
  u64(s.outer_steps);
  u64(s.samples_merged);
  put(&s.wall_seconds, 8);
  u8(s.layout.pattern == ys::FragmentPattern::binpack ? 0 : 1);
  u32(static_cast<std::uint32_t>(s.layout.fragments.size()));
  u32(static_cast<std::uint32_t>(s.layout.tensors.size()));
  for (const auto& t : s.layout.tensors) {
    str(t.name);
    u64(t.numel);
  }
  u64(s.layout.fingerprint());
  for (const auto& f : s.fragments) {
    u64(f.version);
    u64(f.params->size());
    floats(*f.params);
    floats(*f.momentum);
    if (format >= 2) floats(f.public_values());
    put(&f.spread_ema, 8);
    str(f.last_merge_event);
  }
  str("[]");
  u32(yeto::crc32c(b));
  return b;
}
}  // namespace

// Format 3: a manifest and one data file per fragment version. Exact round trip; a damaged
// manifest or data file, a missing data file and a data file of another version are refused
// with the file named; data files no manifest names are removed.
TEST(SyncCheckpoint, RoundTripIsExactAndCorruptionIsRefused) {
  const fs::path dir = fresh_dir("roundtrip");
  const fs::path path = dir / "checkpoint.bin";
  const ys::SyncerState s = two_fragment_state();
  ys::save_checkpoint(path, s);
  EXPECT_TRUE(fs::exists(dir / ys::fragment_data_name(0, 5)));
  EXPECT_TRUE(fs::exists(dir / ys::fragment_data_name(1, 7)));
  EXPECT_EQ(ys::checkpoint_data_crcs(path).size(), 2u);
  const auto r = ys::load_checkpoint(path);
  ASSERT_TRUE(r.initialised);
  EXPECT_EQ(r.layout.fingerprint(), s.layout.fingerprint());
  EXPECT_EQ(*r.fragments[0].params, *s.fragments[0].params);
  EXPECT_EQ(*r.fragments[0].momentum, *s.fragments[0].momentum);
  EXPECT_EQ(*r.fragments[0].pub, *s.fragments[0].pub);
  EXPECT_EQ(*r.fragments[1].pub, *s.fragments[1].pub);
  EXPECT_EQ(r.fragments[1].version, 7u);
  EXPECT_EQ(r.fragments[0].last_merge_event, s.fragments[0].last_merge_event);
  EXPECT_EQ(r.outer_steps, 12u);
  EXPECT_EQ(r.registry.at("x").merged, 3u);
  EXPECT_DOUBLE_EQ(r.wall_seconds, 3.5);
  // The manifest alone is small: the values are in the data files.
  EXPECT_LT(fs::file_size(path), 400u);

  const std::string bytes = yeto::read_file(path);
  for (std::size_t i : {0ul, 9ul, bytes.size() / 2, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_THROW(ys::decode_checkpoint(bad, "test", dir), yeto::Error) << i;
  }
  EXPECT_THROW(ys::decode_checkpoint(bytes.substr(0, bytes.size() - 5), "test", dir), yeto::Error);
  EXPECT_THROW(ys::decode_checkpoint(bytes, "test"), yeto::Error);  // format 3 needs its directory

  // A data file of a later version (an interrupted checkpoint) is not named: removed.
  ys::SyncerState later = s;
  later.fragments[1].version = 8;
  later.fragments[1].params = ys::make_floats({6, 7});
  ys::save_fragment_data(dir, 1, later.fragments[1]);
  EXPECT_EQ(ys::remove_unreferenced_fragment_data(dir, s), 1u);
  EXPECT_FALSE(fs::exists(dir / ys::fragment_data_name(1, 8)));
  EXPECT_EQ(*ys::load_checkpoint(path).fragments[1].params, *s.fragments[1].params);

  flip_byte(dir / ys::fragment_data_name(1, 7), 40);
  try {
    ys::load_checkpoint(path);
    ADD_FAILURE() << "a damaged data file was read";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("f1-v7.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  fs::remove(dir / ys::fragment_data_name(1, 7));
  try {
    ys::load_checkpoint(path);
    ADD_FAILURE() << "a missing data file was not noticed";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Checkpoints of formats 1 and 2 (values inline) are still read; format 1 (before the public
// state was stored) reads the public state as the parameters.
// A fragment's data file is written back to disk in chunks as it is written: while a 48 MB file
// is saved, at most about two chunks (kFragmentWriteBack) of it are dirty or under write-back in
// the page cache at once (read with cachestat, Linux 6.5 and later; skipped elsewhere and on
// filesystems without write-back), and the file reads back exact.
TEST(SyncCheckpoint, ALargeFragmentsDataFileIsWrittenBackAsItIsWritten) {
  const fs::path dir = fs::temp_directory_path() / ("yeto-writeback-" + std::to_string(::getpid()));
  fs::create_directories(dir / "fragments");
  struct statfs sf {};
  ASSERT_EQ(::statfs(dir.c_str(), &sf), 0);
  if (sf.f_type == 0x01021994 /* tmpfs */ || sf.f_type == 0x858458f6 /* ramfs */) {
    fs::remove_all(dir);
    GTEST_SKIP() << "no write-back on this filesystem";
  }
  struct Range {
    std::uint64_t off, len;
  } whole{0, 0};
  struct Stat {
    std::uint64_t cache, dirty, writeback, evicted, recently_evicted;
  };
  std::vector<float> v(4u << 20);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k % 1013) * 0.5f;
  ys::FragmentState f;
  f.version = 7;
  f.params = ys::make_floats(v);
  f.momentum = ys::make_floats(v);
  f.pub = ys::make_floats(v);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> worst{0};
  std::atomic<int> probes{0}, unsupported{0};
  std::thread watcher([&] {
    int fd = -1;
    while (!done) {
      if (fd < 0)
        for (const auto& e : fs::directory_iterator(dir / "fragments"))
          if (e.path().filename().string().rfind("f0-v7.bin.tmp.", 0) == 0) fd = ::open(e.path().c_str(), O_RDONLY);
      if (fd >= 0) {
        Stat st{};
        if (::syscall(451 /* cachestat */, fd, &whole, &st, 0) != 0) {
          ++unsupported;
          break;
        }
        ++probes;
        const std::uint64_t b = (st.dirty + st.writeback) * static_cast<std::uint64_t>(::getpagesize());
        if (b > worst) worst = b;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (fd >= 0) ::close(fd);
  });
  const std::uint32_t crc = ys::save_fragment_data(dir, 0, f);
  done = true;
  watcher.join();
  const std::string back = yeto::read_file(dir / ys::fragment_data_name(0, 7));
  EXPECT_EQ(yeto::crc32c(back), crc);
  EXPECT_GT(back.size(), 3 * v.size() * 4);
  EXPECT_EQ(std::memcmp(back.data() + back.size() - v.size() * 4, v.data(), v.size() * 4), 0);
  fs::remove_all(dir);
  if (unsupported) GTEST_SKIP() << "cachestat is not available";
  if (probes == 0) GTEST_SKIP() << "the file was written before it could be watched";
  EXPECT_LE(worst.load(), 2 * ys::kFragmentWriteBack + (1u << 20)) << probes << " probes";
}

TEST(SyncCheckpoint, FormatsOneAndTwoAreRead) {
  const ys::SyncerState s = two_fragment_state();
  const auto two = ys::decode_checkpoint(inline_checkpoint(s, 2), "format-2");
  EXPECT_EQ(*two.fragments[0].params, *s.fragments[0].params);
  EXPECT_EQ(*two.fragments[0].pub, *s.fragments[0].pub);
  EXPECT_EQ(*two.fragments[1].momentum, *s.fragments[1].momentum);
  EXPECT_EQ(two.fragments[1].version, 7u);
  const auto one = ys::decode_checkpoint(inline_checkpoint(s, 1), "format-1");
  EXPECT_EQ(*one.fragments[0].params, *s.fragments[0].params);
  EXPECT_EQ(*one.fragments[0].pub, *s.fragments[0].params);
  EXPECT_EQ(one.fragments[0].version, 5u);
  std::string nine = inline_checkpoint(s, 2);
  const std::uint32_t v9 = 9;
  std::memcpy(nine.data() + 4, &v9, 4);
  const std::uint32_t crc9 = yeto::crc32c(std::string_view(nine).substr(0, nine.size() - 4));
  std::memcpy(nine.data() + nine.size() - 4, &crc9, 4);
  EXPECT_THROW(ys::decode_checkpoint(nine, "format-9"), yeto::Error);
}

// ---------------------------------------------------------------- compressed downlink

// The q4 downlink with error feedback: after every update the public state P that learners
// hold is within half a q4 step (of that update's block) of the master θ, the residual never
// accumulates over many merges, a learner that applies the same message holds P bit for bit,
// and once θ stops moving P converges to it.
TEST(SyncDownlink, ErrorFeedbackKeepsThePublicStateWithinHalfAStepOfTheMaster) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const std::uint32_t block = 64;
  std::vector<float> theta(1000);  // 15 full blocks and a partial one
  for (auto& x : theta) x = n01(rng);
  std::vector<float> pub = theta, learner = theta;
  float worst = 0, largest_step = 0;
  for (std::uint64_t v = 1; v <= 300; ++v) {
    // An outer step of varying size (some blocks still, the scale changing over the run).
    const float scale = 1e-3f * (1.0f + 0.5f * std::sin(static_cast<float>(v)));
    for (std::size_t i = 0; i < theta.size(); ++i) {
      const float step = (i / block) % 5 == 3 ? 0.0f : scale * n01(rng);
      largest_step = std::max(largest_step, std::fabs(step));
      theta[i] -= step;
    }
    const ys::Published pb = ys::publish_update(0, v - 1, v, theta, pub, block);
    ASSERT_TRUE(pb.update.has_value());
    // What a learner receives and does: decode the message, add it, check the CRC.
    const ys::UpdateMsg u = ys::UpdateMsg::decode(pb.update->encode());
    EXPECT_EQ(u.base_version, v - 1);
    EXPECT_EQ(u.version, v);
    u.apply_to(learner);
    ASSERT_EQ(0, std::memcmp(learner.data(), pub.data(), pub.size() * 4)) << "merge " << v;
    EXPECT_EQ(ys::public_crc(learner), u.crc);
    // Per value: |θ − P| <= s/2 of its block in this update (s = max|u_block| / 7), plus the
    // rounding of the float32 addition.
    std::vector<float> scales(ys::q4_blocks(u.numel, block));
    std::memcpy(scales.data(), u.body.data(), scales.size() * 4);
    float resid = 0;
    for (std::size_t i = 0; i < theta.size(); ++i) {
      const float r = std::fabs(theta[i] - pub[i]);
      resid = std::max(resid, r);
      const float ulp = std::nextafter(std::fabs(pub[i]), INFINITY) - std::fabs(pub[i]);
      ASSERT_LE(r, scales[i / block] * 0.5f * 1.0001f + ulp) << "merge " << v << " value " << i;
    }
    EXPECT_FLOAT_EQ(pb.residual_max, resid);
    EXPECT_LE(pb.residual_max, pb.update_max / 14.0f * 1.0001f + 1e-6f);
    worst = std::max(worst, resid);
  }
  // No accumulation: the residual stays a fraction of one outer step, merge after merge.
  EXPECT_LT(worst, largest_step / 10.0f);
  // θ stands still: each update carries the residual and shrinks it at least 14-fold, down to
  // the float32 rounding of the addition.
  float before = 0;
  for (std::size_t i = 0; i < theta.size(); ++i) before = std::max(before, std::fabs(theta[i] - pub[i]));
  for (std::uint64_t v = 301; v <= 306; ++v) {
    const ys::Published pb = ys::publish_update(0, v - 1, v, theta, pub, block);
    EXPECT_LE(pb.residual_max, std::max(before / 14.0f * 1.0001f, 2.4e-7f)) << v;
    before = pb.residual_max;
  }
  EXPECT_LE(before, 2.4e-7f * 4);
}

TEST(SyncDownlink, ZeroUpdateIsExactAndOverflowFallsBackToTheMaster) {
  std::vector<float> theta = {1, -2, 3, 0.5f, 7, 8, 9, 10, 11};
  std::vector<float> pub = theta;
  const auto same = ys::publish_update(1, 4, 5, theta, pub, 8);
  ASSERT_TRUE(same.update.has_value());
  EXPECT_EQ(pub, theta);
  EXPECT_EQ(same.update_max, 0.0f);
  EXPECT_EQ(same.residual_max, 0.0f);
  // θ − P overflows float32: no update can carry it; P becomes θ (sent in full).
  theta[0] = 3e38f;
  pub[0] = -3e38f;
  const auto big = ys::publish_update(1, 5, 6, theta, pub, 8);
  EXPECT_FALSE(big.update.has_value());
  EXPECT_EQ(pub, theta);
  std::vector<float> short_pub(3);
  EXPECT_THROW(ys::publish_update(1, 6, 7, theta, short_pub, 8), yeto::Error);
}

TEST(SyncOptions, TimeoutHierarchyIsValidated) {
  ys::Timeouts t;
  EXPECT_NO_THROW(t.validate());
  t.learner_timeout_s = t.heartbeat_s;
  EXPECT_THROW(t.validate(), yeto::UsageError);
  t = ys::Timeouts{};
  t.grace_max_s = 500;  // beyond the round deadline (400)
  try {
    t.validate();
    FAIL();
  } catch (const yeto::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("sync.grace_max_s = 500 must be shorter than sync.round_deadline_s"),
              std::string::npos)
        << e.what();
  }
  t = ys::Timeouts{};
  t.reconnect_budget_s = 10;
  EXPECT_THROW(t.validate(), yeto::UsageError);
  t = ys::Timeouts{};
  t.grace_min_s = 310;  // above grace_max_s (300)
  EXPECT_THROW(t.validate(), yeto::UsageError);
  t = ys::Timeouts{};
  t.grace_fraction = 1.0;  // a whole period: allowed (with carry, see SyncOptions.GraceFractionFollowsCarry)
  EXPECT_NO_THROW(t.validate());
  t.grace_fraction = ys::kGraceFractionMax * 1.01;
  EXPECT_THROW(t.validate(), yeto::UsageError);
  t.grace_fraction = 0;
  EXPECT_THROW(t.validate(), yeto::UsageError);
}
