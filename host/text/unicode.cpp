#include "text/unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "text/unicode_data.hpp"

namespace yeto::text {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool in_ranges(const data::CodeRange* r, std::size_t n, char32_t c) {
  const auto* end = r + n;
  const auto* it = std::upper_bound(r, end, c, [](char32_t v, const data::CodeRange& x) { return v < x.lo; });
  if (it == r) return false;
  --it;
  return c >= it->lo && c <= it->hi;
}

// Hangul syllable constants (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose_into(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const int s = static_cast<int>(c - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* b = data::decompositions;
  const auto* e = b + data::decompositions_size;
  const auto* it = std::lower_bound(b, e, c, [](const data::Decomposition& d, char32_t v) { return d.cp < v; });
  if (it != e && it->cp == c) {
    out.append(data::decomposition_pool + it->offset, it->length);
  } else {
    out.push_back(c);
  }
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* first = data::compositions;
  const auto* last = first + data::compositions_size;
  const auto* it = std::lower_bound(first, last, std::make_pair(a, b), [](const data::Composition& x, const std::pair<char32_t, char32_t>& v) {
    return x.first < v.first || (x.first == v.first && x.second < v.second);
  });
  if (it != last && it->first == a && it->second == b) return it->composite;
  return 0;
}

bool final_sigma(std::u32string_view s, std::size_t i) {
  std::size_t j = i;
  bool before = false;
  while (j > 0) {
    --j;
    if (!is_case_ignorable(s[j])) {
      before = is_cased(s[j]);
      break;
    }
  }
  if (!before) return false;
  for (std::size_t k = i + 1; k < s.size(); ++k) {
    if (!is_case_ignorable(s[k])) return !is_cased(s[k]);
  }
  return true;
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Decodes one strict UTF-8 sequence at s[i]; returns its length, 0 when invalid.
std::size_t decode_one(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len;
  char32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}
}  // namespace

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const std::size_t n = decode_one(s, i, cp);
    if (n == 0) {
      out.push_back(kReplacement);
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const std::size_t n = decode_one(s, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::size_t utf8_char_length(std::string_view s) {
  if (s.empty()) return 0;
  // SentencePiece's OneCharLen: by the lead byte's high nibble.
  static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<unsigned char>(s[0]) >> 4];
}

bool is_letter(char32_t c) { return in_ranges(data::letter_ranges, data::letter_ranges_size, c); }
bool is_number(char32_t c) { return in_ranges(data::number_ranges, data::number_ranges_size, c); }
bool is_space(char32_t c) { return in_ranges(data::space_ranges, data::space_ranges_size, c); }
bool is_cased(char32_t c) { return in_ranges(data::cased_ranges, data::cased_ranges_size, c); }
bool is_case_ignorable(char32_t c) {
  return in_ranges(data::case_ignorable_ranges, data::case_ignorable_ranges_size, c);
}

int combining_class(char32_t c) {
  const auto* b = data::combining_ranges;
  const auto* e = b + data::combining_ranges_size;
  const auto* it = std::upper_bound(b, e, c, [](char32_t v, const data::CombiningRange& x) { return v < x.lo; });
  if (it == b) return 0;
  --it;
  return (c >= it->lo && c <= it->hi) ? it->ccc : 0;
}

std::u32string to_lower(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c < 0x80) {
      out.push_back((c >= 'A' && c <= 'Z') ? c + 32 : c);
      continue;
    }
    if (c == 0x3A3) {
      out.push_back(final_sigma(s, i) ? 0x3C2 : 0x3C3);
      continue;
    }
    bool special = false;
    for (std::size_t k = 0; k < data::special_lower_size; ++k) {
      if (data::special_lower[k].from == c) {
        out += utf8_decode(data::special_lower[k].to);
        special = true;
        break;
      }
    }
    if (special) continue;
    const auto* b = data::lower_map;
    const auto* e = b + data::lower_map_size;
    const auto* it = std::lower_bound(b, e, c, [](const data::CodeMap& m, char32_t v) { return m.from < v; });
    out.push_back((it != e && it->from == c) ? it->to : c);
  }
  return out;
}

std::u32string nfd(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size() + 4);
  for (char32_t c : s) decompose_into(c, out);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  std::size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return out;
}

std::u32string nfc(std::u32string_view s) {
  bool ascii = true;
  for (char32_t c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::u32string(s);
  std::u32string d = nfd(s);
  if (d.empty()) return d;
  std::u32string out;
  out.reserve(d.size());
  std::size_t starter = std::u32string::npos;  // index in `out` of the last starter
  int last_ccc = 0;                            // class of the last character appended
  for (char32_t c : d) {
    const int ccc = combining_class(c);
    if (starter != std::u32string::npos) {
      // Blocked when something between the starter and c has class 0 or >= c's class.
      const bool adjacent = starter + 1 == out.size();
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const char32_t comp = compose_pair(out[starter], c);
        if (comp != 0) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(c);
  }
  return out;
}

std::u32string_view strip(std::u32string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

const char* unicode_version() { return data::unicode_version; }

}  // namespace yeto::text
