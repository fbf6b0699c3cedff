// Unicode helpers for the tokenizers: UTF-8 coding, the character classes the CLIP
// pre-tokenizer uses, Python's str.lower() and NFC normalization. Torch-free.
#pragma once

#include <string>
#include <string_view>

namespace yeto::text {

// Decodes UTF-8; every byte that does not start a valid sequence becomes U+FFFD.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
// Strict check: shortest forms only, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s);
// Length of the UTF-8 sequence starting at s[0] as SentencePiece counts it (1 for a bad lead byte).
std::size_t utf8_char_length(std::string_view s);

bool is_letter(char32_t c);       // \p{L}
bool is_number(char32_t c);       // \p{N}
bool is_space(char32_t c);        // Python str.isspace()
bool is_cased(char32_t c);
bool is_case_ignorable(char32_t c);
int combining_class(char32_t c);

// Python's str.lower(): full lower-case mapping with the final-sigma rule.
std::u32string to_lower(std::u32string_view s);
// unicodedata.normalize("NFC", s).
std::u32string nfc(std::u32string_view s);
// Canonical decomposition + canonical ordering (NFD).
std::u32string nfd(std::u32string_view s);

// Python's str.strip() (whitespace by str.isspace()).
std::u32string_view strip(std::u32string_view s);

// The Unicode version the generated tables follow.
const char* unicode_version();

}  // namespace yeto::text
