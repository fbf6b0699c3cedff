// The syncer's merge math, as pure functions on float32 vectors (accumulation in double).
//
//   weights   w_i = samples_i / sum_j samples_j                      (token weighting)
//   mean      Δ*  = d = sum_i w_i Δ_i        (sync.merge = "mean", the default)
//   RDA       Δ*  = r d / |d|   with r = sum_i w_i |Δ_i|  (sync.merge = "rda"; zero when |d| == 0)
//   agreement a   = |d| / r   in [0, 1]: 1 when every Δ_i points the same way, ~1/√n for n
//             uncorrelated ones, 0 when they cancel (0 when every Δ_i is 0)
//   HeLoCo    per block b of a stale Δ against the outer momentum m (see heloco_correct)
//   outer     m <- μ m + Δ*;  θ <- θ - η (Δ* + μ m)                  (SGD, Nesterov)
//
// Δ is a pseudo-gradient: θ_global_at_pull - θ_local, so it points uphill like a gradient
// and the outer step subtracts it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace yeto::sync {

// Token weights from the samples each push covered. Throws when the list is empty or sums to 0.
std::vector<double> token_weights(std::span<const std::uint64_t> samples);

// How the weighted deltas of a round become one update (sync.merge).
//   mean  the weighted mean: what the islands disagree on (their noise) averages out, as in
//         a synchronous step on the islands' pooled batches;
//   rda   radial-directional: the mean's direction with the weighted mean of the deltas' lengths,
//         so the update is 1/agreement times the mean (up to √n for n uncorrelated deltas).
enum class MergeRule { mean, rda };
const char* merge_rule_name(MergeRule r);

struct Merged {
  std::vector<float> delta;
  double norm = 0;            // |Δ*|, from the merge's own sums (in double)
  double agreement = 0;       // |Σ wᵢΔᵢ| / Σ wᵢ|Δᵢ| (see above)
  std::vector<double> norms;  // |Δᵢ|, in the deltas' order
};

// Merges equally long deltas with the given weights (summing to 1, or to the share of a round
// the deltas stand for: the update scales with it, the agreement does not). Throws when there
// are none, or their lengths or the weights' count disagree.
Merged merge_deltas(std::span<const std::span<const float>> deltas, std::span<const double> weights, MergeRule rule);

// Radial-directional average (merge_deltas with MergeRule::rda).
std::vector<float> rda_merge(std::span<const std::span<const float>> deltas, std::span<const double> weights);

struct HelocoParams {
  std::uint32_t block = 256;    // values per block (the last block may be shorter)
  double keep_cos = 0.2;        // c >= keep_cos: the block is kept as is
  double shrink_gain = 1.0;     // anti-aligned: beta = min(shrink_gain * (-c) * conf, shrink_max)
  double shrink_max = 1.0;      //   beta = 1 removes the whole component along -m, never more
  double reorient_gain = 1.0;   // weakly aligned: lambda = min(reorient_gain * (keep_cos - c) / keep_cos * conf,
  double reorient_max = 0.5;    //   reorient_max)
  double kappa = 1.0;           // conf = |m_b| / (|m_b| + kappa |Δ_b|)
};

struct HelocoStats {
  std::uint64_t kept = 0, shrunk = 0, reoriented = 0, skipped = 0;  // skipped: |Δ_b| or |m_b| is 0
};

// Corrects a stale delta in place, block by block, against the outer momentum m of the same
// fragment. With c = cos(Δ_b, m_b), v = m_b / |m_b|, u = Δ_b / |Δ_b|:
//   c >= keep_cos          keep:      Δ_b unchanged
//   c <  0                 shrink:    Δ_b - beta (Δ_b . v) v      (removes part of the opposing component)
//   0 <= c < keep_cos      reorient:  |Δ_b| ((1-lambda) u + lambda v) / |(1-lambda) u + lambda v|
// conf grows with the momentum's norm relative to the delta's: a momentum that is still small
// (early rounds) is a poor reference and barely corrects anything.
HelocoStats heloco_correct(std::span<float> delta, std::span<const float> momentum, const HelocoParams& p);

// One outer SGD step with Nesterov momentum, in place.
void outer_step(std::span<float> params, std::span<float> momentum, std::span<const float> merged, double lr,
                double mu);

bool all_finite(std::span<const float> x);
double l2_norm(std::span<const float> x);

}  // namespace yeto::sync
