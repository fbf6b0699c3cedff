// A labelled image grid: column titles on top, one row per label, every cell an image scaled by
// nearest neighbour to a common side. `yeto-host sample --grid` writes one (base model |
// base + adapter per prompt). Torch-free and deterministic.
#pragma once

#include <string>
#include <vector>

#include "report/plot.hpp"

namespace yeto::report {

struct GridSpec {
  std::vector<std::string> column_titles;  // one per image column
  std::vector<std::string> row_labels;     // one per row, wrapped into the label column
  std::vector<std::vector<Image>> cells;   // [row][column]; every row has one image per column
  int cell_side = 192;                     // the longer side of a scaled cell, in pixels
  int label_width = 240;                   // the label column, in pixels
};

// Throws std::invalid_argument when the rows or columns do not match or a cell is empty.
Image labelled_grid(const GridSpec& spec);

// The lines `text` breaks into at spaces so that each is at most `width` pixels at `scale`
// (a word longer than that is cut).
std::vector<std::string> wrap_text(const std::string& text, int width, int scale = 1);

}  // namespace yeto::report
