// A small raster plotting module for the run report: line and scatter charts (axes, ticks with
// numeric labels, grid, several coloured series, a legend, a title) and grouped bar charts, drawn
// into 8-bit RGB images with the report's own bitmap font. Torch-free and deterministic: the same
// inputs give the same pixels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace yeto::report {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// The series colours, in order; palette(i) wraps around.
Rgb palette(std::size_t i);

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // row-major, 3 bytes a pixel
  Image() = default;
  Image(int w, int h, Rgb background);
  void set(int x, int y, Rgb c);  // clipped to the image
  Rgb at(int x, int y) const;
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners, clipped
};

// Text in the bitmap font, top-left corner at (x, y), each font pixel scale x scale.
void draw_text(Image& img, int x, int y, const std::string& text, Rgb c, int scale = 1);
int text_width(const std::string& text, int scale = 1);

enum class SeriesStyle { line, line_points, points };

struct Series {
  std::string name;
  Rgb color;
  SeriesStyle style = SeriesStyle::line;
  std::vector<double> x, y;  // same length; non-finite points are skipped (and break a line)
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = false;  // the y axis includes 0
  bool y_integer = false;    // y ticks at whole numbers (counts)
  int width = 900, height = 420;
};

struct BarGroup {
  std::string name;
  Rgb color;
  std::vector<double> values;  // one per category
};

struct BarPlot {
  std::string title, y_label;
  std::vector<std::string> categories;
  std::vector<BarGroup> groups;  // drawn side by side within each category
  int width = 900, height = 420;
};

Image render(const LinePlot& plot);
Image render(const BarPlot& plot);

// Tick positions 1, 2 or 5 x 10^k apart covering [lo, hi] (about `target` of them), and their labels.
std::vector<double> nice_ticks(double lo, double hi, int target = 6, double min_step = 0);
std::string tick_label(double v, double step);

}  // namespace yeto::report
