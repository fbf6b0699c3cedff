#include "text/text_fix.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "text/unicode.hpp"
#include "text/unicode_data.hpp"

namespace yeto::text {
namespace {

// Windows-1252 bytes 0x80-0x9F; the five undefined bytes map to themselves ("sloppy").
constexpr char32_t kCp1252High[32] = {
    0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
    0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178};

// The byte a character has in sloppy Windows-1252, or -1.
int sloppy_cp1252_byte(char32_t c) {
  if (c < 0x80 || (c >= 0xA0 && c <= 0xFF)) return static_cast<int>(c);
  for (int i = 0; i < 32; ++i) {
    if (kCp1252High[i] == c) return 0x80 + i;
  }
  return -1;
}

bool is_ascii_alnum(char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_hex(char32_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

const char* find_entity(const data::NamedEntity* table, std::size_t n, const std::string& name) {
  const auto* end = table + n;
  const auto* it = std::lower_bound(table, end, name, [](const data::NamedEntity& e, const std::string& v) {
    return std::strcmp(e.name, v.c_str()) < 0;
  });
  if (it != end && name == it->name) return it->value;
  return nullptr;
}

std::string ascii_of(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) out.push_back(static_cast<char>(c));
  return out;
}

// Python html._replace_charref for a numeric reference body (digits, or x/X + hex digits).
std::u32string numeric_charref(std::u32string_view body, bool hex) {
  // Saturating parse: anything above U+10FFFF gives U+FFFD anyway.
  std::uint64_t num = 0;
  for (char32_t c : body) {
    const unsigned d = is_digit(c) ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10);
    num = num * (hex ? 16 : 10) + d;
    if (num > 0x110000) num = 0x110000;
  }
  if (num == 0x00) return U"\uFFFD";
  if (num == 0x0D) return U"\r";
  if (num >= 0x80 && num <= 0x9F) return std::u32string(1, kCp1252High[num - 0x80]);
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return U"\uFFFD";
  if ((num >= 0x1 && num <= 0x8) || (num >= 0xE && num <= 0x1F) || (num >= 0x7F && num <= 0x9F) ||
      (num >= 0xFDD0 && num <= 0xFDEF) || num == 0xB || (num & 0xFFFE) == 0xFFFE) {
    return U"";
  }
  return std::u32string(1, static_cast<char32_t>(num));
}

// Runs the fixes of one ftfy pass.
std::u32string one_pass(std::u32string text, bool unescape) {
  if (unescape) text = ftfy_unescape_html(text);
  text = ftfy_fix_encoding(text);
  text = ftfy_fix_c1_controls(text);
  text = ftfy_fix_latin_ligatures(text);
  text = ftfy_fix_character_width(text);
  text = ftfy_uncurl_quotes(text);
  text = ftfy_fix_line_breaks(text);
  text = ftfy_remove_terminal_escapes(text);
  text = ftfy_remove_control_chars(text);
  return nfc(text);
}

// A run of characters that, read as sloppy Windows-1252 bytes, is UTF-8 for non-ASCII text.
// Returns the decoded text and the length consumed, or nothing.
std::optional<std::pair<std::u32string, std::size_t>> mojibake_at(std::u32string_view s, std::size_t i) {
  std::size_t pos = i;
  std::string bytes;
  while (pos < s.size()) {
    const int lead = sloppy_cp1252_byte(s[pos]);
    std::size_t len = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      len = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      len = 3;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      len = 4;
    } else {
      break;
    }
    if (pos + len > s.size()) break;
    std::string seq(1, static_cast<char>(lead));
    bool ok = true;
    for (std::size_t k = 1; k < len; ++k) {
      const int b = sloppy_cp1252_byte(s[pos + k]);
      if (b < 0x80 || b > 0xBF) {
        ok = false;
        break;
      }
      seq.push_back(static_cast<char>(b));
    }
    if (!ok || !is_valid_utf8(seq)) break;
    bytes += seq;
    pos += len;
  }
  if (bytes.empty()) return std::nullopt;
  return std::make_pair(utf8_decode(bytes), pos - i);
}

bool looks_like_mojibake(std::u32string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (mojibake_at(s, i)) return true;
  }
  return false;
}

}  // namespace

std::u32string html_unescape(std::u32string_view s) {
  if (s.find(U'&') == std::u32string_view::npos) return std::u32string(s);
  std::u32string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] != U'&') {
      out.push_back(s[i++]);
      continue;
    }
    const std::size_t start = i + 1;
    // #digits;?  |  #[xX]hex;?
    if (start < s.size() && s[start] == U'#') {
      std::size_t j = start + 1;
      bool hex = false;
      if (j < s.size() && is_digit(s[j])) {
        while (j < s.size() && is_digit(s[j])) ++j;
      } else if (j + 1 < s.size() && (s[j] == U'x' || s[j] == U'X') && is_hex(s[j + 1])) {
        hex = true;
        ++j;
        while (j < s.size() && is_hex(s[j])) ++j;
      } else {
        out.push_back(s[i++]);
        continue;
      }
      const std::size_t body_begin = start + (hex ? 2 : 1);
      out += numeric_charref(s.substr(body_begin, j - body_begin), hex);
      if (j < s.size() && s[j] == U';') ++j;
      i = j;
      continue;
    }
    // [^\t\n\f <&#;]{1,32};?
    std::size_t j = start;
    while (j < s.size() && j - start < 32) {
      const char32_t c = s[j];
      if (c == U'\t' || c == U'\n' || c == U'\f' || c == U' ' || c == U'<' || c == U'&' || c == U'#' || c == U';') break;
      ++j;
    }
    if (j == start) {
      out.push_back(s[i++]);
      continue;
    }
    if (j < s.size() && s[j] == U';') ++j;
    const std::u32string_view name = s.substr(start, j - start);
    const std::string key = utf8_encode(name);
    if (const char* v = find_entity(data::html5_entities, data::html5_entities_size, key)) {
      out += utf8_decode(v);
    } else {
      bool done = false;
      for (std::size_t x = name.size() - 1; x > 1; --x) {
        const std::string prefix = utf8_encode(name.substr(0, x));
        if (const char* v2 = find_entity(data::html5_entities, data::html5_entities_size, prefix)) {
          out += utf8_decode(v2);
          out += name.substr(x);
          done = true;
          break;
        }
      }
      if (!done) {
        out.push_back(U'&');
        out += name;
      }
    }
    i = j;
  }
  return out;
}

std::u32string ftfy_unescape_html(std::u32string_view s) {
  // Matches of &#?[0-9A-Za-z]{1,24}; are replaced; everything else is kept.
  std::u32string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == U'&') {
      std::size_t j = i + 1;
      const bool numeric = j < s.size() && s[j] == U'#';
      if (numeric) ++j;
      const std::size_t body = j;
      while (j < s.size() && is_ascii_alnum(s[j]) && j - body < 25) ++j;
      const std::size_t n = j - body;
      if (n >= 1 && n <= 24 && j < s.size() && s[j] == U';') {
        const std::u32string_view match = s.substr(i, j + 1 - i);
        const std::string name = ascii_of(match.substr(1));  // without '&'
        const char* v = numeric ? nullptr : find_entity(data::html5_entities, data::html5_entities_size, name);
        if (!v && !numeric) v = find_entity(data::ftfy_upper_entities, data::ftfy_upper_entities_size, name);
        if (v) {
          out += utf8_decode(v);
        } else if (numeric) {
          const std::u32string un = html_unescape(match);
          if (un.find(U';') != std::u32string::npos) {
            out += match;
          } else {
            out += un;
          }
        } else {
          out += match;
        }
        i = j + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

std::u32string ftfy_fix_encoding(std::u32string_view input) {
  std::u32string text(input);
  for (int guard = 0; guard < 16; ++guard) {
    const std::u32string before = text;
    bool ascii = std::all_of(text.begin(), text.end(), [](char32_t c) { return c < 0x80; });
    if (ascii || !looks_like_mojibake(text)) return text;
    // The whole text re-encoded as Latin-1, then as sloppy Windows-1252, decoded as UTF-8.
    bool fixed = false;
    for (int enc = 0; enc < 2 && !fixed; ++enc) {
      std::string bytes;
      bool ok = true;
      for (char32_t c : text) {
        const int b = enc == 0 ? (c <= 0xFF ? static_cast<int>(c) : -1) : sloppy_cp1252_byte(c);
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (ok && is_valid_utf8(bytes)) {
        text = utf8_decode(bytes);
        fixed = true;
      }
    }
    if (!fixed) {
      // Mojibake embedded in otherwise fine text: decode each run on its own.
      std::u32string out;
      std::size_t i = 0;
      while (i < text.size()) {
        auto m = mojibake_at(text, i);
        if (m && m->second < text.size()) {
          out += m->first;
          i += m->second;
        } else {
          out.push_back(text[i++]);
        }
      }
      text = out;
    }
    if (text == before) return text;
  }
  return text;
}

std::u32string ftfy_fix_c1_controls(std::u32string_view s) {
  std::u32string out(s);
  for (char32_t& c : out) {
    if (c >= 0x80 && c <= 0x9F) c = kCp1252High[c - 0x80];
  }
  return out;
}

std::u32string ftfy_fix_latin_ligatures(std::u32string_view s) {
  static const std::pair<char32_t, const char32_t*> kLigatures[] = {
      {0x0132, U"IJ"}, {0x0133, U"ij"}, {0x0149, U"\u02BCn"}, {0x01C4, U"D\u017D"}, {0x01C5, U"D\u017E"},
      {0x01C6, U"d\u017E"}, {0x01C7, U"LJ"}, {0x01C8, U"Lj"}, {0x01C9, U"lj"}, {0x01CA, U"NJ"},
      {0x01CB, U"Nj"}, {0x01CC, U"nj"}, {0xFB00, U"ff"}, {0xFB01, U"fi"}, {0xFB02, U"fl"},
      {0xFB03, U"ffi"}, {0xFB04, U"ffl"}, {0xFB05, U"\u017Ft"}, {0xFB06, U"st"}};
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    const char32_t* rep = nullptr;
    for (const auto& [from, to] : kLigatures) {
      if (from == c) {
        rep = to;
        break;
      }
    }
    if (rep) {
      out += rep;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::u32string ftfy_fix_character_width(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c == 0x3000 || (c >= 0xFF01 && c < 0xFFF0)) {
      const auto* b = data::width_map;
      const auto* e = b + data::width_map_size;
      const auto* it = std::lower_bound(b, e, c, [](const data::StringMap& m, char32_t v) { return m.from < v; });
      if (it != e && it->from == c) {
        out += utf8_decode(it->to);
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

std::u32string ftfy_uncurl_quotes(std::u32string_view s) {
  std::u32string out(s);
  for (char32_t& c : out) {
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) {
      c = U'\'';
    } else if (c >= 0x201C && c <= 0x201F) {
      c = U'"';
    }
  }
  return out;
}

std::u32string ftfy_fix_line_breaks(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c == U'\r') {
      out.push_back(U'\n');
      if (i + 1 < s.size() && s[i + 1] == U'\n') ++i;
    } else if (c == 0x2028 || c == 0x2029 || c == 0x85) {
      out.push_back(U'\n');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::u32string ftfy_remove_terminal_escapes(std::u32string_view s) {
  // \033\[((?:\d|;)*)([a-zA-Z])
  std::u32string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == 0x1B && i + 1 < s.size() && s[i + 1] == U'[') {
      std::size_t j = i + 2;
      while (j < s.size() && (is_digit(s[j]) || s[j] == U';')) ++j;
      if (j < s.size() && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z'))) {
        i = j + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

std::u32string ftfy_remove_control_chars(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    const bool drop = c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
                      (c >= 0x206A && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
    if (!drop) out.push_back(c);
  }
  return out;
}

std::u32string fix_text(std::u32string_view text) {
  std::u32string out;
  bool unescape = true;  // ftfy's unescape_html="auto": off from the first line containing '<'
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t brk = text.find(U'\n', pos);
    brk = (brk == std::u32string_view::npos) ? text.size() : brk + 1;
    std::u32string segment(text.substr(pos, brk - pos));
    if (segment.find(U'<') != std::u32string::npos) unescape = false;
    for (int guard = 0; guard < 32; ++guard) {
      std::u32string next = one_pass(segment, unescape);
      if (next == segment) break;
      segment = std::move(next);
    }
    out += segment;
    pos = brk;
  }
  return out;
}

std::string prompt_clean(std::string_view utf8) {
  const std::u32string t = html_unescape(html_unescape(fix_text(utf8_decode(utf8))));
  std::u32string out;
  bool space = false;
  for (const char32_t c : t) {
    if (is_space(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += U' ';
    space = false;
    out += c;
  }
  return utf8_encode(out);
}

}  // namespace yeto::text
