#include "hunyuan3d_calls.hpp"

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace yeto::hunyuan3d {

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Positions of `python` outside string literals, with the bracket depth at each.
struct Scan {
  std::vector<int> depth;     // -1 inside a string literal
  explicit Scan(const std::string& s) : depth(s.size(), 0) {
    int d = 0;
    char quote = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (quote) {
        depth[i] = -1;
        if (c == '\\') {
          if (i + 1 < s.size()) depth[++i] = -1;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        depth[i] = -1;
        continue;
      }
      if (c == '(' || c == '[' || c == '{') ++d;
      depth[i] = d;
      if (c == ')' || c == ']' || c == '}') --d;
    }
  }
};

// The end of the argument starting at `from`: the next ',' or closing bracket at its depth.
std::size_t argument_end(const std::string& s, const Scan& scan, std::size_t from) {
  const int d = scan.depth[from];
  for (std::size_t i = from; i < s.size(); ++i) {
    if (scan.depth[i] < 0) continue;
    if (scan.depth[i] == d && s[i] == ',') return i;
    if (scan.depth[i] == d && (s[i] == ')' || s[i] == ']' || s[i] == '}')) return i;
    if (scan.depth[i] < d) return i;
  }
  return s.size();
}

}  // namespace

double python_number(const std::string& text, const std::string& what) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  std::string digits;
  bool digit_before = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      // PEP 515: one underscore between digits only.
      if (!digit_before || i + 1 >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i + 1])))
        throw std::invalid_argument(what + ": '" + text + "' is not a number");
      continue;
    }
    digit_before = std::isdigit(static_cast<unsigned char>(c)) != 0;
    digits += c;
  }
  bool any_digit = false;
  for (char c : digits) {
    if (std::isdigit(static_cast<unsigned char>(c))) any_digit = true;
    else if (c != '+' && c != '-' && c != '.' && c != 'e' && c != 'E')
      throw std::invalid_argument(what + ": '" + text + "' is not a number");
  }
  if (!any_digit) throw std::invalid_argument(what + ": '" + text + "' is not a number");
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) throw std::invalid_argument(what + ": '" + text + "' is not a number");
  return v;
}

std::optional<double> keyword_number(const std::string& python, const std::string& key) {
  const Scan scan(python);
  std::optional<double> found;
  for (std::size_t at = python.find(key); at != std::string::npos; at = python.find(key, at + 1)) {
    if (scan.depth[at] <= 0) continue;  // in a string, or not inside a call
    if (at > 0 && (ident_char(python[at - 1]) || python[at - 1] == '.')) continue;
    std::size_t i = at + key.size();
    if (i < python.size() && ident_char(python[i])) continue;
    while (i < python.size() && python[i] == ' ') ++i;
    if (i >= python.size() || python[i] != '=' || (i + 1 < python.size() && python[i + 1] == '=')) continue;
    // The name must start an argument: after '(' or ',' (spaces aside).
    std::size_t b = at;
    while (b > 0 && python[b - 1] == ' ') --b;
    if (b == 0 || (python[b - 1] != '(' && python[b - 1] != ',')) continue;
    const std::size_t from = i + 1;
    const std::size_t end = argument_end(python, scan, from);
    const double v = python_number(python.substr(from, end - from), "keyword argument '" + key + "'");
    if (found) throw std::invalid_argument("keyword argument '" + key + "' is given twice");
    found = v;
  }
  return found;
}

std::optional<double> call_number(const std::string& python, const std::string& function) {
  const Scan scan(python);
  const std::string open = function + "(";
  for (std::size_t at = python.find(open); at != std::string::npos; at = python.find(open, at + 1)) {
    if (scan.depth[at] < 0) continue;
    if (at > 0 && ident_char(python[at - 1])) continue;
    const std::size_t from = at + open.size();
    const std::size_t end = argument_end(python, scan, from);
    if (end >= python.size() || python[end] != ')')
      throw std::invalid_argument(function + "(...) must have exactly one argument");
    return python_number(python.substr(from, end - from), function + "(...)'s argument");
  }
  return std::nullopt;
}

}  // namespace yeto::hunyuan3d
