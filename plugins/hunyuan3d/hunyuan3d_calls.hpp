// Reading the numbers of a recorded Python call (case.json "python" strings such as
// `vae.volume_decoder(decoded, vae.geo_decoder, bounds=1.01, num_chunks=200, octree_resolution=7)`):
// a keyword argument's value, or the single argument of a named call (`manual_seed(4010)`).
// Torch-free. The text is scanned as Python tokens, not matched by pattern: string literals and
// nesting are skipped, a keyword counts only as a whole argument name at any call depth
// (`bounds=` does not match `xbounds=` nor `bounds == 1`), and a value is a whole Python number
// literal (sign, decimal point, exponent, `_` separators); anything else is refused.
#pragma once

#include <optional>
#include <string>

namespace yeto::hunyuan3d {

// The value of keyword argument `key` in `python`: std::nullopt when no argument has that name;
// throws std::invalid_argument naming the key when its value is not a number literal or the name
// is given twice.
std::optional<double> keyword_number(const std::string& python, const std::string& key);

// The argument of the first call of `function(...)` (a name preceded by '.', a space or an opening
// bracket, or at the start): std::nullopt when there is none; throws std::invalid_argument when
// its argument is not one number literal.
std::optional<double> call_number(const std::string& python, const std::string& function);

// A whole Python int / float literal (surrounding spaces allowed): "-1.5e-3", "1_000", "5.", ".5".
// Throws std::invalid_argument naming `what` otherwise.
double python_number(const std::string& text, const std::string& what);

}  // namespace yeto::hunyuan3d
