// A 5x7 bitmap font for the report's plots: printable ASCII (space to '~'), drawn from our own
// glyph table. Torch-free; no font files are read.
#pragma once

#include <array>
#include <cstdint>

namespace yeto::report {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
inline constexpr int kGlyphAdvance = 6;  // one column of space between glyphs

// The rows of character `c`, top first; bit 4 of a row is its leftmost pixel. Characters
// outside printable ASCII draw as '?'.
const std::array<std::uint8_t, kGlyphHeight>& glyph(char c);

}  // namespace yeto::report
