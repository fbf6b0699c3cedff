#include "data/resize.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace yeto::data {
namespace {

// Taps of one output coordinate: source indices [first, first + count) with weights.
struct AxisWeights {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;  // `taps` per output coordinate
  int taps = 0;
};

AxisWeights axis_weights(int src_len, double offset, double extent, int dst_len) {
  AxisWeights a;
  const double scale = extent / dst_len;  // source pixels per output pixel
  a.taps = scale >= 1.0 ? static_cast<int>(std::ceil(scale)) + 2 : 2;
  a.first.resize(dst_len);
  a.count.resize(dst_len);
  a.weights.assign(static_cast<std::size_t>(dst_len) * a.taps, 0.0f);
  for (int i = 0; i < dst_len; ++i) {
    float* w = &a.weights[static_cast<std::size_t>(i) * a.taps];
    if (scale >= 1.0) {
      const double lo = offset + i * scale;
      const double hi = lo + scale;
      const int j0 = std::max(0, static_cast<int>(std::floor(lo)));
      const int j1 = std::min(src_len, static_cast<int>(std::ceil(hi)));
      int n = 0;
      double total = 0.0;
      for (int j = j0; j < j1 && n < a.taps; ++j, ++n) {
        const double cover = std::min(hi, j + 1.0) - std::max(lo, static_cast<double>(j));
        w[n] = static_cast<float>(std::max(0.0, cover));
        total += w[n];
      }
      if (total <= 0.0) {  // degenerate: fall back to the nearest pixel
        a.first[i] = std::clamp(static_cast<int>(lo), 0, src_len - 1);
        a.count[i] = 1;
        w[0] = 1.0f;
        continue;
      }
      for (int k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
      a.first[i] = j0;
      a.count[i] = n;
    } else {
      const double centre = offset + (i + 0.5) * scale - 0.5;
      int j0 = static_cast<int>(std::floor(centre));
      double f = centre - j0;
      if (j0 < 0) {
        j0 = 0;
        f = 0.0;
      }
      if (j0 >= src_len - 1) {
        j0 = src_len - 1;
        f = 0.0;
      }
      a.first[i] = j0;
      a.count[i] = (f > 0.0 && j0 + 1 < src_len) ? 2 : 1;
      w[0] = static_cast<float>(1.0 - f);
      w[1] = static_cast<float>(f);
      if (a.count[i] == 1) w[0] = 1.0f;
    }
  }
  return a;
}

}  // namespace

void resize_rgb(const std::uint8_t* src, int sw, int sh, std::uint8_t* out, int dw, int dh, ResizeMode mode) {
  double ox = 0.0, oy = 0.0, ew = sw, eh = sh;
  if (mode == ResizeMode::center_crop) {
    // Scale so the output is covered, then take the centred dw x dh window of the scaled image.
    const double s = std::max(static_cast<double>(dw) / sw, static_cast<double>(dh) / sh);
    ew = std::min<double>(sw, dw / s);
    eh = std::min<double>(sh, dh / s);
    ox = (sw - ew) / 2.0;
    oy = (sh - eh) / 2.0;
  }
  if (sw == dw && sh == dh && ox == 0.0 && oy == 0.0) {
    std::copy(src, src + static_cast<std::size_t>(sw) * sh * 3, out);
    return;
  }
  const AxisWeights ax = axis_weights(sw, ox, ew, dw);
  const AxisWeights ay = axis_weights(sh, oy, eh, dh);
  // Horizontal pass over only the source rows the vertical pass needs.
  const int row_lo = ay.first.front();
  const int row_hi = ay.first.back() + ay.count.back();
  std::vector<float> tmp(static_cast<std::size_t>(row_hi - row_lo) * dw * 3);
  for (int y = row_lo; y < row_hi; ++y) {
    const std::uint8_t* s = src + static_cast<std::size_t>(y) * sw * 3;
    float* t = &tmp[static_cast<std::size_t>(y - row_lo) * dw * 3];
    for (int x = 0; x < dw; ++x) {
      const float* w = &ax.weights[static_cast<std::size_t>(x) * ax.taps];
      float r = 0, g = 0, b = 0;
      const std::uint8_t* p = s + static_cast<std::size_t>(ax.first[x]) * 3;
      for (int k = 0; k < ax.count[x]; ++k, p += 3) {
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      t[x * 3 + 0] = r;
      t[x * 3 + 1] = g;
      t[x * 3 + 2] = b;
    }
  }
  // Vertical pass row by row: whole-row multiply-adds, which the compiler vectorises.
  const std::size_t row_len = static_cast<std::size_t>(dw) * 3;
  std::vector<float> acc(row_len);
  for (int y = 0; y < dh; ++y) {
    const float* w = &ay.weights[static_cast<std::size_t>(y) * ay.taps];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k < ay.count[y]; ++k) {
      const float wk = w[k];
      const float* t = &tmp[static_cast<std::size_t>(ay.first[y] + k - row_lo) * row_len];
      for (std::size_t x = 0; x < row_len; ++x) acc[x] += wk * t[x];
    }
    std::uint8_t* o = out + static_cast<std::size_t>(y) * row_len;
    for (std::size_t x = 0; x < row_len; ++x) {
      const float v = acc[x] + 0.5f;  // round half up: values are never negative
      o[x] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : static_cast<std::uint8_t>(v);
    }
  }
}

Image resize_image(const Image& src, int width, int height, ResizeMode mode) {
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<std::size_t>(width) * height * 3);
  resize_rgb(src.rgb.data(), src.width, src.height, out.rgb.data(), width, height, mode);
  return out;
}

}  // namespace yeto::data
