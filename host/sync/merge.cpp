#include "sync/merge.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace yeto::sync {

std::vector<double> token_weights(std::span<const std::uint64_t> samples) {
  if (samples.empty()) throw Error("token_weights: no pushes");
  double total = 0;
  for (auto s : samples) total += static_cast<double>(s);
  if (total <= 0) throw Error("token_weights: the pushes cover no samples");
  std::vector<double> w;
  w.reserve(samples.size());
  for (auto s : samples) w.push_back(static_cast<double>(s) / total);
  return w;
}

double l2_norm(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

bool all_finite(std::span<const float> x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

const char* merge_rule_name(MergeRule r) { return r == MergeRule::mean ? "mean" : "rda"; }

Merged merge_deltas(std::span<const std::span<const float>> deltas, std::span<const double> weights, MergeRule rule) {
  if (deltas.empty() || deltas.size() != weights.size()) throw Error("merge_deltas: deltas and weights disagree");
  const std::size_t n = deltas[0].size();
  for (const auto& d : deltas)
    if (d.size() != n) throw Error("merge_deltas: deltas have different lengths");
  // One cache-blocked pass: the weighted mean (in double per chunk, stored as float), its
  // squared norm and every delta's squared norm; RDA then scales in a second pass.
  Merged m;
  m.delta.assign(n, 0.0f);
  std::vector<double> sq(deltas.size(), 0.0);
  double mm = 0;
  constexpr std::size_t kChunk = 2048;
  double acc[kChunk];
  for (std::size_t c0 = 0; c0 < n; c0 += kChunk) {
    const std::size_t len = std::min(kChunk, n - c0);
    std::fill(acc, acc + len, 0.0);
    for (std::size_t i = 0; i < deltas.size(); ++i) {
      const float* d = deltas[i].data() + c0;
      const double w = weights[i];
      double s = 0;
      for (std::size_t k = 0; k < len; ++k) {
        acc[k] += w * d[k];
        s += static_cast<double>(d[k]) * d[k];
      }
      sq[i] += s;
    }
    for (std::size_t k = 0; k < len; ++k) {
      mm += acc[k] * acc[k];
      m.delta[c0 + k] = static_cast<float>(acc[k]);
    }
  }
  double radius = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    m.norms.push_back(std::sqrt(sq[i]));
    radius += weights[i] * m.norms.back();
  }
  const double mn = std::sqrt(mm);
  m.agreement = radius > 0 ? std::min(1.0, mn / radius) : 0.0;
  m.norm = mn;
  if (rule == MergeRule::rda) {
    if (mn == 0.0) {
      std::fill(m.delta.begin(), m.delta.end(), 0.0f);
    } else {
      const double scale = radius / mn;
      for (auto& v : m.delta) v = static_cast<float>(v * scale);
      m.norm = radius;
    }
  }
  return m;
}

std::vector<float> rda_merge(std::span<const std::span<const float>> deltas, std::span<const double> weights) {
  return merge_deltas(deltas, weights, MergeRule::rda).delta;
}

HelocoStats heloco_correct(std::span<float> delta, std::span<const float> momentum, const HelocoParams& p) {
  if (delta.size() != momentum.size()) throw Error("heloco_correct: delta and momentum lengths differ");
  if (p.block == 0) throw Error("heloco_correct: block size 0");
  HelocoStats st;
  const std::size_t n = delta.size();
  for (std::size_t b0 = 0; b0 < n; b0 += p.block) {
    const std::size_t b1 = std::min(n, b0 + p.block);
    double dd = 0, mm = 0, dm = 0;
    for (std::size_t k = b0; k < b1; ++k) {
      dd += static_cast<double>(delta[k]) * delta[k];
      mm += static_cast<double>(momentum[k]) * momentum[k];
      dm += static_cast<double>(delta[k]) * momentum[k];
    }
    const double nd = std::sqrt(dd), nm = std::sqrt(mm);
    if (nd == 0.0 || nm == 0.0) {
      ++st.skipped;
      continue;
    }
    const double c = dm / (nd * nm);
    const double conf = nm / (nm + p.kappa * nd);
    if (c >= p.keep_cos) {
      ++st.kept;
    } else if (c < 0) {
      const double beta = std::min(p.shrink_gain * (-c) * conf, p.shrink_max);
      const double along = dm / nm;  // Δ_b . v
      for (std::size_t k = b0; k < b1; ++k)
        delta[k] = static_cast<float>(delta[k] - beta * along * (momentum[k] / nm));
      ++st.shrunk;
    } else {
      const double lambda = std::min(p.reorient_gain * (p.keep_cos - c) / p.keep_cos * conf, p.reorient_max);
      double tt = 0;
      for (std::size_t k = b0; k < b1; ++k) {
        const double t = (1 - lambda) * delta[k] / nd + lambda * momentum[k] / nm;
        tt += t * t;
      }
      const double nt = std::max(std::sqrt(tt), 1e-30);
      for (std::size_t k = b0; k < b1; ++k) {
        const double t = (1 - lambda) * delta[k] / nd + lambda * momentum[k] / nm;
        delta[k] = static_cast<float>(nd * t / nt);
      }
      ++st.reoriented;
    }
  }
  return st;
}

void outer_step(std::span<float> params, std::span<float> momentum, std::span<const float> merged, double lr,
                double mu) {
  if (params.size() != momentum.size() || params.size() != merged.size())
    throw Error("outer_step: params, momentum and update lengths differ");
  for (std::size_t k = 0; k < params.size(); ++k) {
    const double g = merged[k];
    const double m = mu * momentum[k] + g;
    momentum[k] = static_cast<float>(m);
    params[k] = static_cast<float>(params[k] - lr * (g + mu * m));
  }
}

}  // namespace yeto::sync
