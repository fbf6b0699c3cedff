#include "report/plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "report/font.hpp"

namespace yeto::report {
namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kGrid{228, 228, 228};
constexpr Rgb kAxis{60, 60, 60};
constexpr Rgb kText{30, 30, 30};
constexpr int kTitleScale = 3;
constexpr int kTextScale = 2;
constexpr int kLineHeight = kGlyphHeight * kTextScale;

// A line two pixels wide from (x0, y0) to (x1, y1).
void draw_line(Image& img, int x0, int y0, int x1, int y1, Rgb c) {
  const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
  const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  while (true) {
    img.fill_rect(x0, y0, x0 + 1, y0 + 1, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void draw_marker(Image& img, int x, int y, Rgb c) {
  img.fill_rect(x - 4, y - 4, x + 4, y + 4, kWhite);
  img.fill_rect(x - 3, y - 3, x + 3, y + 3, c);
}

struct Range {
  double lo = 0, hi = 1;
};

// The axis range: the ticks' span around the data (a single value gets room on both sides).
Range axis_range(double lo, double hi, bool from_zero, std::vector<double>& ticks, double min_step = 0) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi <= lo) {
    const double d = lo != 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= d;
    hi += d;
    if (from_zero && lo < 0 && hi > 0 && lo + d >= 0) lo = 0;
  }
  ticks = nice_ticks(lo, hi, 6, min_step);
  return {std::min(lo, ticks.front()), std::max(hi, ticks.back())};
}

// The legend as rows of (swatch, name) above the plot area; returns its height.
int legend_height(const std::vector<std::pair<std::string, Rgb>>& entries, int width) {
  if (entries.empty()) return 0;
  int rows = 1, x = 0;
  for (const auto& [name, c] : entries) {
    const int w = 28 + text_width(name, kTextScale) + 18;
    if (x > 0 && x + w > width) ++rows, x = 0;
    x += w;
  }
  return rows * (kLineHeight + 8);
}

void draw_legend(Image& img, int left, int top, int width, const std::vector<std::pair<std::string, Rgb>>& entries) {
  int x = 0, y = top;
  for (const auto& [name, c] : entries) {
    const int w = 28 + text_width(name, kTextScale) + 18;
    if (x > 0 && x + w > width) x = 0, y += kLineHeight + 8;
    img.fill_rect(left + x, y + 2, left + x + 21, y + kLineHeight - 3, c);
    draw_text(img, left + x + 28, y, name, kText, kTextScale);
    x += w;
  }
}

struct Frame {
  int left, top, right, bottom;  // the plot area, inclusive
  int px(double v, const Range& r) const {
    return left + static_cast<int>(std::lround((v - r.lo) / (r.hi - r.lo) * (right - left)));
  }
  int py(double v, const Range& r) const {
    return bottom - static_cast<int>(std::lround((v - r.lo) / (r.hi - r.lo) * (bottom - top)));
  }
};

// Title, legend, y label and the y axis with its ticks and grid; returns the plot area.
Frame draw_frame(Image& img, const std::string& title, const std::string& y_label,
                 const std::vector<std::pair<std::string, Rgb>>& legend, const std::vector<double>& y_ticks,
                 const Range& y, double y_step, int bottom_space) {
  int top = 10;
  draw_text(img, std::max(4, (img.width - text_width(title, kTitleScale)) / 2), top, title, kBlack, kTitleScale);
  top += kGlyphHeight * kTitleScale + 12;
  int label_w = 0;
  for (double t : y_ticks) label_w = std::max(label_w, text_width(tick_label(t, y_step), kTextScale));
  const int left = 16 + label_w + 8;
  const int right = img.width - 24;
  draw_legend(img, left, top, right - left, legend);
  top += legend_height(legend, right - left);
  if (!y_label.empty()) {
    draw_text(img, left, top, y_label, kText, kTextScale);
    top += kLineHeight + 10;
  }
  Frame f{left, top, right, img.height - bottom_space};
  for (double t : y_ticks) {
    if (t < y.lo - 1e-12 * (y.hi - y.lo) || t > y.hi + 1e-12 * (y.hi - y.lo)) continue;
    const int py = f.py(t, y);
    img.fill_rect(f.left, py, f.right, py, kGrid);
    img.fill_rect(f.left - 5, py, f.left - 1, py, kAxis);
    const std::string s = tick_label(t, y_step);
    draw_text(img, f.left - 8 - text_width(s, kTextScale), py - kLineHeight / 2, s, kText, kTextScale);
  }
  return f;
}

double tick_step(const std::vector<double>& ticks) { return ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0; }

}  // namespace

Rgb palette(std::size_t i) {
  static constexpr std::array<Rgb, 10> kColors = {{{31, 119, 180},
                                                   {214, 39, 40},
                                                   {44, 160, 44},
                                                   {255, 127, 14},
                                                   {148, 103, 189},
                                                   {23, 190, 207},
                                                   {140, 86, 75},
                                                   {227, 119, 194},
                                                   {127, 127, 127},
                                                   {188, 189, 34}}};
  return kColors[i % kColors.size()];
}

Image::Image(int w, int h, Rgb background) : width(w), height(h), rgb(static_cast<std::size_t>(w) * h * 3) {
  for (std::size_t i = 0; i < rgb.size(); i += 3) rgb[i] = background.r, rgb[i + 1] = background.g, rgb[i + 2] = background.b;
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  const std::size_t i = (static_cast<std::size_t>(y) * width + x) * 3;
  rgb[i] = c.r, rgb[i + 1] = c.g, rgb[i + 2] = c.b;
}

Rgb Image::at(int x, int y) const {
  const std::size_t i = (static_cast<std::size_t>(y) * width + x) * 3;
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

void Image::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  for (int y = std::max(0, y0); y <= std::min(height - 1, y1); ++y)
    for (int x = std::max(0, x0); x <= std::min(width - 1, x1); ++x) set(x, y, c);
}

void draw_text(Image& img, int x, int y, const std::string& text, Rgb c, int scale) {
  for (char ch : text) {
    const auto& rows = glyph(ch);
    for (int r = 0; r < kGlyphHeight; ++r)
      for (int col = 0; col < kGlyphWidth; ++col)
        if (rows[static_cast<std::size_t>(r)] & (1u << (kGlyphWidth - 1 - col)))
          img.fill_rect(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, c);
    x += kGlyphAdvance * scale;
  }
}

int text_width(const std::string& text, int scale) {
  return text.empty() ? 0 : (static_cast<int>(text.size()) * kGlyphAdvance - 1) * scale;
}

std::vector<double> nice_ticks(double lo, double hi, int target, double min_step) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  step = std::max(step, min_step);
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last && ticks.size() < 60; k += 1) {
    double t = k * step;
    if (std::abs(t) < step * 1e-9) t = 0;
    ticks.push_back(t);
  }
  return ticks;
}

std::string tick_label(double v, double step) {
  char buf[64];
  if (std::abs(v) < std::abs(step) * 1e-9) return "0";
  const double a = std::max(std::abs(v), std::abs(step));
  if (a >= 1e6 || std::abs(step) < 1e-4) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(std::abs(step)) - 1e-9)), 0, 6);
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

Image render(const LinePlot& plot) {
  Image img(plot.width, plot.height, kWhite);
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  std::vector<std::pair<std::string, Rgb>> legend;
  for (const auto& s : plot.series) {
    bool any = false;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      any = true;
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
    }
    if (any) legend.emplace_back(s.name, s.color);
  }
  const bool empty = legend.empty();
  std::vector<double> xt, yt;
  const Range xr = axis_range(xlo, xhi, false, xt);
  const Range yr = axis_range(ylo, yhi, plot.y_from_zero, yt, plot.y_integer ? 1.0 : 0.0);
  const int bottom_space = 14 + kLineHeight + 8 + (plot.x_label.empty() ? 0 : kLineHeight + 8);
  const Frame f = draw_frame(img, plot.title, plot.y_label, legend, yt, yr, tick_step(yt), bottom_space);
  const double xs = tick_step(xt);
  for (double t : xt) {
    const int px = f.px(t, xr);
    img.fill_rect(px, f.top, px, f.bottom, kGrid);
    img.fill_rect(px, f.bottom + 1, px, f.bottom + 5, kAxis);
    const std::string s = tick_label(t, xs);
    draw_text(img, px - text_width(s, kTextScale) / 2, f.bottom + 10, s, kText, kTextScale);
  }
  img.fill_rect(f.left, f.top, f.left, f.bottom, kAxis);
  img.fill_rect(f.left, f.bottom, f.right, f.bottom, kAxis);
  if (!plot.x_label.empty())
    draw_text(img, (f.left + f.right - text_width(plot.x_label, kTextScale)) / 2, f.bottom + 14 + kLineHeight + 4,
              plot.x_label, kText, kTextScale);
  if (empty) {
    const std::string msg = "no data";
    draw_text(img, (f.left + f.right - text_width(msg, kTextScale)) / 2, (f.top + f.bottom) / 2, msg, kAxis, kTextScale);
    return img;
  }
  for (const auto& s : plot.series) {
    const std::size_t n = std::min(s.x.size(), s.y.size());
    if (s.style != SeriesStyle::points) {
      bool have = false;
      int lx = 0, ly = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
          have = false;
          continue;
        }
        const int px = f.px(s.x[i], xr), py = f.py(s.y[i], yr);
        if (have) draw_line(img, lx, ly, px, py, s.color);
        else img.fill_rect(px, py, px + 1, py + 1, s.color);
        lx = px, ly = py, have = true;
      }
    }
    if (s.style != SeriesStyle::line)
      for (std::size_t i = 0; i < n; ++i)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) draw_marker(img, f.px(s.x[i], xr), f.py(s.y[i], yr), s.color);
  }
  return img;
}

Image render(const BarPlot& plot) {
  Image img(plot.width, plot.height, kWhite);
  double hi = 0;
  std::vector<std::pair<std::string, Rgb>> legend;
  for (const auto& g : plot.groups) {
    legend.emplace_back(g.name, g.color);
    for (double v : g.values)
      if (std::isfinite(v)) hi = std::max(hi, v);
  }
  std::vector<double> yt;
  const Range yr = axis_range(0, hi > 0 ? hi : 1, true, yt);
  const int bottom_space = 14 + kLineHeight + 8;
  const Frame f = draw_frame(img, plot.title, plot.y_label, legend, yt, yr, tick_step(yt), bottom_space);
  const std::size_t nc = std::max<std::size_t>(1, plot.categories.size());
  const std::size_t ng = std::max<std::size_t>(1, plot.groups.size());
  const double slot = static_cast<double>(f.right - f.left) / static_cast<double>(nc);
  const double bar = slot * 0.8 / static_cast<double>(ng);
  for (std::size_t c = 0; c < plot.categories.size(); ++c) {
    const double x0 = f.left + slot * static_cast<double>(c) + slot * 0.1;
    for (std::size_t g = 0; g < plot.groups.size(); ++g) {
      const auto& grp = plot.groups[g];
      if (c >= grp.values.size() || !std::isfinite(grp.values[c]) || grp.values[c] <= 0) continue;
      const int bx0 = static_cast<int>(std::lround(x0 + bar * static_cast<double>(g)));
      const int bx1 = static_cast<int>(std::lround(x0 + bar * static_cast<double>(g + 1))) - 2;
      img.fill_rect(bx0, f.py(grp.values[c], yr), std::max(bx0, bx1), f.bottom - 1, grp.color);
    }
    const std::string& name = plot.categories[c];
    const int cx = static_cast<int>(std::lround(f.left + slot * (static_cast<double>(c) + 0.5)));
    draw_text(img, cx - text_width(name, kTextScale) / 2, f.bottom + 10, name, kText, kTextScale);
  }
  img.fill_rect(f.left, f.top, f.left, f.bottom, kAxis);
  img.fill_rect(f.left, f.bottom, f.right, f.bottom, kAxis);
  return img;
}

}  // namespace yeto::report
