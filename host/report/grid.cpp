#include "report/grid.hpp"

#include <algorithm>
#include <stdexcept>

#include "report/font.hpp"

namespace yeto::report {
namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kInk{32, 32, 32};
constexpr Rgb kRule{200, 200, 200};
constexpr int kScale = 2;  // label and title text
constexpr int kLine = (kGlyphHeight + 3) * kScale;
constexpr int kPad = 8;

// `src` scaled by nearest neighbour so that its longer side is `side`, top-left at (x, y).
void blit_scaled(Image& dst, const Image& src, int x, int y, int side) {
  const double f = static_cast<double>(side) / std::max(src.width, src.height);
  const int w = std::max(1, static_cast<int>(src.width * f)), h = std::max(1, static_cast<int>(src.height * f));
  for (int j = 0; j < h; ++j) {
    const int sy = std::min(src.height - 1, static_cast<int>(j / f));
    for (int i = 0; i < w; ++i) dst.set(x + i, y + j, src.at(std::min(src.width - 1, static_cast<int>(i / f)), sy));
  }
}

}  // namespace

std::vector<std::string> wrap_text(const std::string& text, int width, int scale) {
  const std::size_t max_chars = std::max(1, (width + scale) / (kGlyphAdvance * scale));
  std::vector<std::string> lines;
  std::string line;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    std::string word = text.substr(i, j - i);
    i = j;
    if (word.empty()) break;
    if (!line.empty() && line.size() + 1 + word.size() <= max_chars) {
      line += " " + word;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    while (word.size() > max_chars) {
      lines.push_back(word.substr(0, max_chars));
      word.erase(0, max_chars);
    }
    line = word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

Image labelled_grid(const GridSpec& spec) {
  const std::size_t cols = spec.column_titles.size(), rows = spec.row_labels.size();
  if (cols == 0 || rows == 0) throw std::invalid_argument("labelled_grid: no columns or no rows");
  if (spec.cells.size() != rows) throw std::invalid_argument("labelled_grid: one row of cells per row label");
  for (const auto& r : spec.cells) {
    if (r.size() != cols) throw std::invalid_argument("labelled_grid: one cell per column title in every row");
    for (const auto& c : r)
      if (c.width <= 0 || c.height <= 0 || c.rgb.size() != static_cast<std::size_t>(c.width) * c.height * 3)
        throw std::invalid_argument("labelled_grid: an empty or malformed cell image");
  }
  const int side = spec.cell_side, label_w = spec.label_width;
  std::vector<std::vector<std::string>> titles, labels;
  std::size_t title_lines = 1;
  for (const auto& t : spec.column_titles) {
    titles.push_back(wrap_text(t, side, kScale));
    title_lines = std::max(title_lines, titles.back().size());
  }
  const int header = static_cast<int>(title_lines) * kLine + 2 * kPad;
  std::vector<int> row_h;
  for (const auto& l : spec.row_labels) {
    labels.push_back(wrap_text(l, label_w - 2 * kPad, kScale));
    row_h.push_back(std::max(side, static_cast<int>(labels.back().size()) * kLine) + 2 * kPad);
  }
  int height = header;
  for (int h : row_h) height += h;
  const int width = label_w + static_cast<int>(cols) * (side + 2 * kPad);
  Image img(width, height, kWhite);
  for (std::size_t c = 0; c < cols; ++c) {
    const int x0 = label_w + static_cast<int>(c) * (side + 2 * kPad) + kPad;
    for (std::size_t k = 0; k < titles[c].size(); ++k)
      draw_text(img, x0 + (side - text_width(titles[c][k], kScale)) / 2, kPad + static_cast<int>(k) * kLine, titles[c][k],
                kInk, kScale);
  }
  int y = header;
  for (std::size_t r = 0; r < rows; ++r) {
    img.fill_rect(0, y - 1, width - 1, y - 1, kRule);
    for (std::size_t k = 0; k < labels[r].size(); ++k)
      draw_text(img, kPad, y + kPad + static_cast<int>(k) * kLine, labels[r][k], kInk, kScale);
    for (std::size_t c = 0; c < cols; ++c)
      blit_scaled(img, spec.cells[r][c], label_w + static_cast<int>(c) * (side + 2 * kPad) + kPad, y + kPad, side);
    y += row_h[r];
  }
  return img;
}

}  // namespace yeto::report
