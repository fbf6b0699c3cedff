// Text cleanup as the reference CLIP tokenizers run it before BPE:
//  - fix_text(): the fixes of ftfy.fix_text (ftfy 6.x defaults) that apply to prompt text:
//    HTML entities (skipped, like ftfy's "auto", once a line contains '<'), mojibake from UTF-8
//    read as Latin-1 / Windows-1252 (whole text or embedded runs), C1 controls, Latin
//    ligatures, full/half width, curly quotes, line breaks, terminal escapes, control
//    characters, NFC. Not covered: ftfy's other single-byte encodings (cp1251, cp1250,
//    macroman, ...) and its heuristic 'badness' score beyond the UTF-8 pattern test.
//  - html_unescape(): Python's html.unescape (what OpenAI's simple_tokenizer adds).
#pragma once

#include <string>
#include <string_view>

namespace yeto::text {

std::u32string fix_text(std::u32string_view text);
std::u32string html_unescape(std::u32string_view text);

// Diffusers' `prompt_clean` (WanPipeline and the pipelines that copy it): ftfy.fix_text, then
// html.unescape twice, strip, and every run of whitespace (str.isspace) to one space. UTF-8 in
// and out.
std::string prompt_clean(std::string_view utf8);

// The individual steps, exposed for tests.
std::u32string ftfy_unescape_html(std::u32string_view text);
std::u32string ftfy_fix_encoding(std::u32string_view text);
std::u32string ftfy_fix_c1_controls(std::u32string_view text);
std::u32string ftfy_fix_latin_ligatures(std::u32string_view text);
std::u32string ftfy_fix_character_width(std::u32string_view text);
std::u32string ftfy_uncurl_quotes(std::u32string_view text);
std::u32string ftfy_fix_line_breaks(std::u32string_view text);
std::u32string ftfy_remove_terminal_escapes(std::u32string_view text);
std::u32string ftfy_remove_control_chars(std::u32string_view text);

}  // namespace yeto::text
