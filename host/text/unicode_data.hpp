// Generated Unicode and text-cleanup tables (host/text/unicode_data.cpp, written by
// host/text/tools/gen_unicode_data.py). All arrays are sorted by their first field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace yeto::text::data {

struct CodeRange {
  char32_t lo, hi;  // inclusive
};
struct CodeMap {
  char32_t from, to;
};
struct StringMap {
  char32_t from;
  const char* to;  // UTF-8
};
struct CombiningRange {
  char32_t lo, hi;
  std::uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  std::uint32_t offset;  // into decomposition_pool
  std::uint32_t length;
};
struct Composition {
  char32_t first, second, composite;
};
struct NamedEntity {
  const char* name;  // "amp;" (without the '&'; html5 also has legacy names without ';')
  const char* value;  // UTF-8
};

extern const char unicode_version[];
extern const CodeRange letter_ranges[];          // \p{L}
extern const std::size_t letter_ranges_size;
extern const CodeRange number_ranges[];          // \p{N}
extern const std::size_t number_ranges_size;
extern const CodeRange space_ranges[];           // Python str.isspace()
extern const std::size_t space_ranges_size;
extern const CodeRange cased_ranges[];           // cased, for the final-sigma rule of str.lower()
extern const std::size_t cased_ranges_size;
extern const CodeRange case_ignorable_ranges[];  // case-ignorable, same rule
extern const std::size_t case_ignorable_ranges_size;
extern const CodeMap lower_map[];                // str.lower() single-code-point mappings
extern const std::size_t lower_map_size;
extern const StringMap special_lower[];          // str.lower() multi-code-point mappings
extern const std::size_t special_lower_size;
extern const CombiningRange combining_ranges[];  // canonical combining class != 0
extern const std::size_t combining_ranges_size;
extern const Decomposition decompositions[];     // full canonical decomposition (no Hangul)
extern const std::size_t decompositions_size;
extern const char32_t decomposition_pool[];
extern const Composition compositions[];         // primary composites (no Hangul)
extern const std::size_t compositions_size;
extern const StringMap width_map[];              // ftfy's fullwidth/halfwidth map
extern const std::size_t width_map_size;
extern const NamedEntity html5_entities[];       // Python's html.entities.html5, sorted by name bytes
extern const std::size_t html5_entities_size;
extern const NamedEntity ftfy_upper_entities[];  // ftfy's extra upper-cased names ("EACUTE;")
extern const std::size_t ftfy_upper_entities_size;

}  // namespace yeto::text::data
