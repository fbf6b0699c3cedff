#include "data/frame_sampling.hpp"

#include <algorithm>
#include <cmath>

namespace yeto::data {

FrameSelection select_frames(std::int64_t n, double source_fps, double target_fps, std::int64_t num_frames) {
  FrameSelection s;
  if (n <= 0 || num_frames <= 0) return s;
  const bool resample = target_fps > 0.0 && source_fps > 0.0 && std::abs(target_fps - source_fps) > 1e-9;
  const double step = resample ? source_fps / target_fps : 1.0;
  // A small epsilon keeps k * step from landing just below an integer through rounding.
  auto source_of = [&](std::int64_t k) { return static_cast<std::int64_t>(std::floor(static_cast<double>(k) * step + 1e-9)); };
  std::int64_t m = resample ? static_cast<std::int64_t>(std::ceil(static_cast<double>(n) / step)) + 1 : n;
  while (m > 0 && source_of(m - 1) >= n) --m;
  m = std::max<std::int64_t>(m, 1);
  s.resampled_frames = m;
  s.indices.resize(static_cast<std::size_t>(num_frames));
  if (m >= num_frames) {
    const std::int64_t start = (m - num_frames) / 2;
    for (std::int64_t k = 0; k < num_frames; ++k) s.indices[static_cast<std::size_t>(k)] = source_of(start + k);
  } else {
    for (std::int64_t k = 0; k < num_frames; ++k) s.indices[static_cast<std::size_t>(k)] = source_of(std::min(k, m - 1));
    s.padded = num_frames - m;
  }
  return s;
}

}  // namespace yeto::data
