#include "core/error.hpp"

namespace yeto {

std::string Location::str() const {
  if (file.empty()) return {};
  // Appended piecewise: `":" + std::to_string(n)` trips a false GCC 12 -Wrestrict warning.
  std::string s = file;
  if (line > 0) {
    s.append(":").append(std::to_string(line));
    if (column > 0) s.append(":").append(std::to_string(column));
  }
  return s;
}

std::string with_location(const Location& where, const std::string& message) {
  const std::string w = where.str();
  return w.empty() ? message : w + ": " + message;
}

}  // namespace yeto
