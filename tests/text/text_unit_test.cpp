// Tokenizer behaviour beyond the recorded strings: Unicode helpers, the ftfy steps, loading
// from Diffusers tokenizer folders, added tokens, truncation/padding, registration, errors.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/component_registry.hpp"
#include "support/temp_dir.hpp"
#include "text/clip_tokenizer.hpp"
#include "text/sentencepiece.hpp"
#include "text/t5_tokenizer.hpp"
#include "text/text_fix.hpp"
#include "text/tokenizer_components.hpp"
#include "text/unicode.hpp"

namespace fs = std::filesystem;
using namespace yeto::text;

namespace {

const fs::path kFixtures = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures";
const fs::path kVocab = kFixtures / "parity" / "clip-bpe-vocab";
const fs::path kSpiece = kFixtures / "parity" / "sentencepiece-tokenizer" / "spiece.model";

std::string u8(const std::u32string& s) { return utf8_encode(s); }
std::u32string u32(const std::string& s) { return utf8_decode(s); }

// Runs f, expects a yeto::Error with `code` whose message contains every needle.
template <class F>
void expect_error(F&& f, yeto::ExitCode code, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

const ClipTokenizer& clip() {
  static const auto tok = ClipTokenizer::from_files(kVocab / "vocab.json", kVocab / "merges.txt");
  return *tok;
}

}  // namespace

TEST(Unicode, Utf8RoundTripAndInvalidBytes) {
  EXPECT_EQ(u8(u32("a\xc3\xa9\xf0\x9f\x9a\x80")), "a\xc3\xa9\xf0\x9f\x9a\x80");
  EXPECT_EQ(u32("\xff" "a"), std::u32string(U"\uFFFDa"));
  EXPECT_EQ(u32("\xc0\x80"), std::u32string(U"\uFFFD\uFFFD"));  // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));                   // surrogate
  EXPECT_TRUE(is_valid_utf8("\xe2\x96\x81"));
}

TEST(Unicode, ClassesLowerAndNfcFollowPython) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(U'日'));
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_TRUE(is_number(U'½'));
  EXPECT_TRUE(is_number(U'③'));
  EXPECT_TRUE(is_space(0x1C));  // str.isspace() counts the file separators
  EXPECT_FALSE(is_space(0x200B));
  EXPECT_EQ(u8(to_lower(u32("ΣΊΣΥΦΟΣ"))), "σίσυφος");  // final sigma
  EXPECT_EQ(u8(to_lower(u32("Σ"))), "σ");
  EXPECT_EQ(u8(to_lower(u32("İ"))), "i\xcc\x87");
  EXPECT_EQ(u8(to_lower(u32("ǅ"))), "ǆ");
  EXPECT_EQ(u8(nfc(u32("cafe\xcc\x81"))), "café");
  EXPECT_EQ(u8(nfc(u32("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"))), "각");  // Hangul L V T
  EXPECT_EQ(u8(nfc(u32("a\xcc\xa3\xcc\x87"))), "ạ̇");                  // reordered, then composed
  EXPECT_EQ(u8(nfc(u32("\xe2\x84\xab"))), "Å");                         // singleton decomposition
}

TEST(TextFix, FtfyStepsOnTheirOwn) {
  EXPECT_EQ(u8(ftfy_unescape_html(u32("a &amp; b &lt;3 &#x263A; &EACUTE; &bogus; &#abc;"))), "a & b <3 ☺ É &bogus; &#abc;");
  EXPECT_EQ(u8(ftfy_fix_encoding(u32("cafÃ© naÃ¯ve"))), "café naïve");
  EXPECT_EQ(u8(ftfy_fix_encoding(u32("café naïve"))), "café naïve");         // already fine
  EXPECT_EQ(u8(ftfy_fix_encoding(u32("🚀 cafÃ©"))), "🚀 café");             // embedded run
  EXPECT_EQ(u8(ftfy_fix_latin_ligatures(u32("ﬁne ǅemal"))), "fine Džemal");
  EXPECT_EQ(u8(ftfy_fix_character_width(u32("ＡＢ１　ｶ"))), "AB1 カ");
  EXPECT_EQ(u8(ftfy_uncurl_quotes(u32("“x” ‘y’"))), "\"x\" 'y'");
  EXPECT_EQ(u8(ftfy_fix_line_breaks(u32("a\r\nb\rc\u2028d"))), "a\nb\nc\nd");
  EXPECT_EQ(u8(ftfy_remove_terminal_escapes(u32("\x1b[1;31mred\x1b[0m"))), "red");
  EXPECT_EQ(u8(ftfy_remove_control_chars(u32("a\x07" "b\xef\xbb\xbf" "c\td"))), "abc\td");
  EXPECT_EQ(u8(ftfy_fix_c1_controls(u32("\xc2\x80"))), "€");
}

TEST(TextFix, FixTextSkipsHtmlOnceALineHasATag) {
  EXPECT_EQ(u8(fix_text(u32("Tom &amp; Jerry"))), "Tom & Jerry");
  EXPECT_EQ(u8(fix_text(u32("<b>x</b> &amp;"))), "<b>x</b> &amp;");
  EXPECT_EQ(u8(fix_text(u32("&amp;\n<b>\n&amp;"))), "&\n<b>\n&amp;");  // off from the '<' line on
  EXPECT_EQ(u8(fix_text(u32("&amp;amp;"))), "&");                      // repeated until stable
  EXPECT_EQ(u8(html_unescape(u32("&amp;amp; &notit; &#128;"))), "&amp; ¬it; €");
}

TEST(TextFix, DiffusersPromptClean) {
  // ftfy (mojibake), html.unescape twice, strip, whitespace runs (str.isspace) to one space.
  EXPECT_EQ(prompt_clean("  a  &amp;amp; b\t\n c &#233; "), "a & b c \xC3\xA9");
  EXPECT_EQ(prompt_clean("caf\xC3\x83\xC2\xA9\xE3\x80\x80" "au lait"), "caf\xC3\xA9 au lait");
  EXPECT_EQ(prompt_clean("waves crossing a dark shoreline"), "waves crossing a dark shoreline");
  EXPECT_EQ(prompt_clean(" \n "), "");
}

TEST(ClipTokenizer, ByteLevelBpeBasics) {
  EXPECT_EQ(byte_to_unicode('!'), "!");
  EXPECT_EQ(byte_to_unicode(' '), "\xc4\xa0");  // U+0120
  EXPECT_EQ(byte_to_unicode(0), "\xc4\x80");
  const auto& tok = clip();
  EXPECT_EQ(tok.vocab_size(), 49408);
  EXPECT_EQ(tok.bos_token_id(), 49406);
  EXPECT_EQ(tok.eos_token_id(), 49407);
  EXPECT_EQ(tok.pad_token_id(), 49407);
  EXPECT_EQ(tok.tokens("a photo of a cat"), (std::vector<std::string>{"a</w>", "photo</w>", "of</w>", "a</w>", "cat</w>"}));
  EXPECT_EQ(tok.tokenize("a photo of a cat"), tok.tokenize("  A   PHOTO\tof a Cat "));
  EXPECT_EQ(tok.tokenize("it's"), (std::vector<std::int64_t>{*tok.token_to_id("it</w>"), *tok.token_to_id("'s</w>")}));
  // Repeated calls hit the BPE cache and give the same answer.
  EXPECT_EQ(tok.tokenize("supercalifragilistic"), tok.tokenize("supercalifragilistic"));
  // A literal end token in the text is the end token (HF splits it out before BPE).
  EXPECT_EQ(tok.tokenize("hi<|endoftext|>"), (std::vector<std::int64_t>{*tok.token_to_id("hi</w>"), 49407}));
  EXPECT_TRUE(tok.tokenize("").empty());
}

TEST(ClipTokenizer, TruncationPaddingAndMask) {
  const auto& tok = clip();
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "cat ";
  const auto enc = tok.encode(long_text);  // model_max_length 77 by default
  ASSERT_EQ(enc.input_ids.size(), 77u);
  EXPECT_EQ(enc.input_ids.front(), 49406);
  EXPECT_EQ(enc.input_ids.back(), 49407);
  EXPECT_EQ(std::count(enc.attention_mask.begin(), enc.attention_mask.end(), 1), 77);

  EncodeOptions no_pad;
  no_pad.padding = Padding::none;
  EXPECT_EQ(tok.encode("a cat", no_pad).input_ids, (std::vector<std::int64_t>{49406, 320, 2368, 49407}));
  no_pad.add_special_tokens = false;
  EXPECT_EQ(tok.encode("a cat", no_pad).input_ids, (std::vector<std::int64_t>{320, 2368}));
  EncodeOptions untruncated;
  untruncated.padding = Padding::none;
  untruncated.truncation = false;
  EXPECT_EQ(tok.encode(long_text, untruncated).input_ids.size(), 102u);

  EncodeOptions longest;
  longest.padding = Padding::longest;
  const auto rows = tok.encode_batch({"a cat", "a photo of a cat"}, longest);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input_ids, (std::vector<std::int64_t>{49406, 320, 2368, 49407, 49407, 49407, 49407}));
  EXPECT_EQ(rows[0].attention_mask, (std::vector<std::int64_t>{1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(rows[1].input_ids.size(), 7u);

  // A config without a real limit (model_max_length 1e30): no truncation, no padding.
  yeto::test::TempDir tmp;
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(kVocab / f, tmp / f);
  tmp.write("tokenizer_config.json", "{\"model_max_length\": 1e30}");
  const auto unbounded = ClipTokenizer::from_folder(tmp.path());
  EXPECT_EQ(unbounded->encode(long_text).input_ids.size(), 102u);
  EXPECT_EQ(unbounded->encode("a cat").input_ids, (std::vector<std::int64_t>{49406, 320, 2368, 49407}));
  EncodeOptions explicit_length;
  explicit_length.max_length = 77;
  EXPECT_EQ(unbounded->encode("a cat", explicit_length).input_ids.size(), 77u);

  EncodeOptions bad;
  bad.max_length = 0;
  EXPECT_THROW(tok.encode("x", bad), yeto::UsageError);
}

TEST(ClipTokenizer, RepositoryFoldersDecidePadAndAddedTokens) {
  const auto l = ClipTokenizer::from_folder(kFixtures / "repos" / "flux-tiny" / "tokenizer");
  EXPECT_EQ(l->model_max_length(), 77);
  EXPECT_EQ(l->pad_token_id(), 49407);
  EXPECT_EQ(l->encode("a cat").input_ids[4], 49407);
  // SD3/SDXL CLIP-G: pad "!" (id 0), an added special token that prompts are split on.
  const auto g = ClipTokenizer::from_folder(kFixtures / "repos" / "sd35-tiny" / "tokenizer_2");
  EXPECT_EQ(g->pad_token_id(), 0);
  const auto row = g->encode("a cat");
  EXPECT_EQ(row.input_ids, (std::vector<std::int64_t>{49406, 320, 2368, 49407, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(g->tokenize("wow!"), (std::vector<std::int64_t>{*g->token_to_id("wow</w>"), 0}));
  EXPECT_EQ(l->tokenize("wow!"), (std::vector<std::int64_t>{*l->token_to_id("wow</w>"), 256}));  // "!</w>"
}

// CLIPTokenizerFast normalizes with NFC + whitespace + lower-case only: it agrees with the
// slow tokenizer wherever ftfy changes nothing, and differs where ftfy's fixes matter.
TEST(ClipTokenizer, FastVariantSkipsFtfy) {
  ClipTokenizerConfig config;
  config.cleanup = ClipTokenizerConfig::Cleanup::transformers_fast;
  config.class_name = "CLIPTokenizerFast";
  const auto fast = ClipTokenizer::from_files(kVocab / "vocab.json", kVocab / "merges.txt", config);
  std::ifstream in(kFixtures / "parity" / "clip-tokenizer" / "case.json");
  const auto cs = nlohmann::json::parse(in);
  int same = 0, differ = 0;
  for (const auto& s : cs["strings"]) {
    const std::string text = s["text"].get<std::string>();
    const auto hf = s.contains("ids_without_html_unescape") ? s["ids_without_html_unescape"] : s["ids"];
    const bool nfc_only = s["name"] == "accents_decomposed";
    if (!s["ftfy_changes_text"].get<bool>() || nfc_only) {
      EXPECT_EQ(fast->tokenize(text), hf.get<std::vector<std::int64_t>>()) << s["name"];
      ++same;
    } else if (s["name"] == "ligatures" || s["name"] == "fullwidth" || s["name"] == "mojibake" || s["name"] == "html_entities") {
      EXPECT_NE(fast->tokenize(text), hf.get<std::vector<std::int64_t>>()) << s["name"];
      ++differ;
    }
  }
  EXPECT_EQ(same, 20);
  EXPECT_EQ(differ, 4);
  const auto folder = ClipTokenizer::from_folder(kFixtures / "repos" / "flux-tiny" / "tokenizer", "CLIPTokenizerFast");
  EXPECT_EQ(folder->config().cleanup, ClipTokenizerConfig::Cleanup::transformers_fast);
  EXPECT_EQ(folder->class_name(), "CLIPTokenizerFast");
}

TEST(SentencePiece, NormalizerAndSegmentation) {
  const auto sp = SentencePieceModel::load(kSpiece);
  EXPECT_TRUE(sp.normalizer_spec().add_dummy_prefix);
  EXPECT_TRUE(sp.normalizer_spec().remove_extra_whitespaces);
  EXPECT_FALSE(sp.normalizer_spec().precompiled_charsmap.empty());
  EXPECT_EQ(sp.trainer_spec().bos_id, -1);
  EXPECT_EQ(sp.trainer_spec().pad_id, 0);
  EXPECT_EQ(sp.normalize("  a   photo \t"), "\xe2\x96\x81" "a\xe2\x96\x81photo");
  EXPECT_EQ(sp.normalize("ＦＵＬＬ ﬁ"), "\xe2\x96\x81" "FULL\xe2\x96\x81" "fi");  // nmt_nfkc
  EXPECT_EQ(sp.normalize(""), "");
  EXPECT_EQ(sp.normalize(" \t "), "");
  EXPECT_EQ(sp.encode("a photo of a cat"), (std::vector<std::int64_t>{5, 471, 10, 5, 82, 13}));
  EXPECT_EQ(sp.encode("🔥🔥"), (std::vector<std::int64_t>{3, 2}));  // one <unk> for the run
  EXPECT_EQ(sp.piece_to_id("no-such-piece"), 2);
  EXPECT_EQ(sp.piece(5).text, "\xe2\x96\x81" "a");
}

TEST(T5Tokenizer, RepositoryFolderExtraIdsAndEos) {
  const auto tok = T5Tokenizer::from_folder(kFixtures / "repos" / "flux-tiny" / "tokenizer_2");
  EXPECT_EQ(tok->model_max_length(), 512);
  EXPECT_EQ(tok->pad_token_id(), 0);
  EXPECT_EQ(tok->eos_token_id(), 1);
  EXPECT_EQ(*tok->token_to_id("<extra_id_0>"), 599);
  EXPECT_EQ(*tok->token_to_id("<extra_id_99>"), 500);
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->tokenize("a photo of a cat"), (std::vector<std::int64_t>{5, 471, 10, 5, 82, 13}));
  // Added tokens in the text are split out; sentencepiece alone would not do that.
  EXPECT_EQ(tok->tokenize("a<extra_id_0> cat</s>"), (std::vector<std::int64_t>{5, 599, 82, 13, 1}));
  EncodeOptions o;
  o.max_length = 8;
  const auto enc = tok->encode("a cat</s>", o);  // already ends with </s>: none added
  EXPECT_EQ(enc.input_ids, (std::vector<std::int64_t>{5, 82, 13, 1, 0, 0, 0, 0}));
  EXPECT_EQ(enc.attention_mask, (std::vector<std::int64_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  const auto empty = tok->encode("", o);
  EXPECT_EQ(empty.input_ids, (std::vector<std::int64_t>{1, 0, 0, 0, 0, 0, 0, 0}));
  o.max_length = 3;
  EXPECT_EQ(tok->encode("a photo of a cat", o).input_ids, (std::vector<std::int64_t>{5, 471, 1}));

  const auto ltx = T5Tokenizer::from_folder(kFixtures / "repos" / "ltx-tiny" / "tokenizer");
  EXPECT_EQ(ltx->model_max_length(), 128);
  EXPECT_EQ(*ltx->token_to_id("<extra_id_5>"), 594);
}

TEST(T5Tokenizer, LegacyFalseDropsThePrefixAfterAddedTokens) {
  T5TokenizerConfig legacy_cfg, new_cfg;
  new_cfg.legacy = false;
  const auto legacy = T5Tokenizer::from_model(kSpiece, legacy_cfg);
  const auto modern = T5Tokenizer::from_model(kSpiece, new_cfg);
  for (const char* s : {"a photo of a cat", "  spaces  everywhere ", "", "x"}) {
    EXPECT_EQ(legacy->tokenize(s), modern->tokenize(s)) << s;
  }
  const auto a = legacy->tokenize("<extra_id_0>. x");
  const auto b = modern->tokenize("<extra_id_0>. x");
  ASSERT_GE(a.size(), 2u);
  ASSERT_GE(b.size(), 2u);
  EXPECT_EQ(a[0], 599);
  EXPECT_EQ(b[0], 599);
  EXPECT_EQ(a[1], 3);   // legacy: "▁" then "."
  EXPECT_EQ(b[1], 8);   // non-legacy: "." directly
}

// The rows the tiny-repository pipeline runs fed to their text encoders (recorded in the
// fixtures' flux/sd35/pixart/ltx reference case.json "tokenization"), from the repository
// folders: CLIP-L pads with <|endoftext|>, CLIP-G with "!" (0), T5 max_sequence_length 32.
TEST(TokenizerComponents, PipelineRowsOfTheTinyRepositories) {
  const auto clip_l = load_tokenizer(kFixtures / "repos" / "flux-tiny" / "tokenizer", "CLIPTokenizer");
  const auto clip_g = load_tokenizer(kFixtures / "repos" / "sd35-tiny" / "tokenizer_2", "CLIPTokenizer");
  const auto t5 = load_tokenizer(kFixtures / "repos" / "flux-tiny" / "tokenizer_2", "T5TokenizerFast");
  const auto ltx = load_tokenizer(kFixtures / "repos" / "ltx-tiny" / "tokenizer", "T5Tokenizer");
  const std::string prompt = "a red circle on a white background";
  std::vector<std::int64_t> bpe = {49406, 320, 736, 7117, 525, 320, 1579, 5994, 49407};
  std::vector<std::int64_t> l = bpe, g = bpe;
  l.resize(77, 49407);
  g.resize(77, 0);
  EncodeOptions clip_opts;
  clip_opts.max_length = 77;
  EXPECT_EQ(clip_l->encode(prompt, clip_opts).input_ids, l);
  EXPECT_EQ(clip_g->encode(prompt, clip_opts).input_ids, g);
  std::vector<std::int64_t> empty_l = {49406, 49407}, empty_g = {49406, 49407};
  empty_l.resize(77, 49407);
  empty_g.resize(77, 0);
  EXPECT_EQ(clip_l->encode("", clip_opts).input_ids, empty_l);
  EXPECT_EQ(clip_g->encode("", clip_opts).input_ids, empty_g);

  EncodeOptions t5_opts;
  t5_opts.max_length = 32;
  std::vector<std::int64_t> row = {5, 3, 127, 34, 74, 47, 39, 24, 5, 103, 36, 312, 70, 251, 1};
  std::vector<std::int64_t> mask(row.size(), 1);
  row.resize(32, 0);
  mask.resize(32, 0);
  const auto enc = t5->encode(prompt, t5_opts);
  EXPECT_EQ(enc.input_ids, row);
  EXPECT_EQ(enc.attention_mask, mask);
  std::vector<std::int64_t> wave = {131, 44, 7, 3, 149, 15, 5, 343, 209, 381, 35, 25, 167, 1};
  wave.resize(32, 0);
  EXPECT_EQ(ltx->encode("waves crossing a dark shoreline", t5_opts).input_ids, wave);
  std::vector<std::int64_t> neg(32, 0);
  neg[0] = 1;
  EXPECT_EQ(ltx->encode("", t5_opts).input_ids, neg);
}

TEST(TokenizerComponents, RegisteredUnderTransformersClassNames) {
  yeto::io::ComponentRegistry registry;
  register_tokenizer_components(registry);
  for (const char* c : {"CLIPTokenizer", "CLIPTokenizerFast", "T5Tokenizer", "T5TokenizerFast"}) {
    EXPECT_TRUE(registry.has(c)) << c;
    EXPECT_EQ(registry.kind(c), "tokenizer");
  }
  yeto::io::ComponentSource src;
  src.class_name = "T5TokenizerFast";
  src.dir = kFixtures / "repos" / "flux-tiny" / "tokenizer_2";
  const auto comp = registry.create(src);
  ASSERT_NE(comp, nullptr);
  EXPECT_EQ(comp->class_name(), "T5TokenizerFast");
  const auto* t = dynamic_cast<const TokenizerComponent*>(comp.get());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->tokenizer().encode("a cat").input_ids.size(), 512u);
  src.class_name = "CLIPTokenizer";
  src.dir = kFixtures / "repos" / "flux-tiny" / "tokenizer";
  EXPECT_EQ(registry.create(src)->class_name(), "CLIPTokenizer");
  expect_error([&] { load_tokenizer(src.dir, "GPT2Tokenizer"); }, yeto::ExitCode::bad_input, {"GPT2Tokenizer"});
}

TEST(TokenizerErrors, MissingOrCorruptFilesNameTheFile) {
  yeto::test::TempDir tmp;
  // Missing files.
  expect_error([&] { ClipTokenizer::from_files(tmp / "vocab.json", kVocab / "merges.txt"); }, yeto::ExitCode::not_found,
               {(tmp / "vocab.json").string(), "not found"});
  expect_error([&] { ClipTokenizer::from_files(kVocab / "vocab.json", tmp / "merges.txt"); }, yeto::ExitCode::not_found,
               {(tmp / "merges.txt").string()});
  expect_error([&] { SentencePieceModel::load(tmp / "spiece.model"); }, yeto::ExitCode::not_found,
               {(tmp / "spiece.model").string()});
  expect_error([&] { load_tokenizer(tmp / "nope", "CLIPTokenizer"); }, yeto::ExitCode::not_found, {"nope"});
  expect_error([&] { T5Tokenizer::from_folder(tmp.path()); }, yeto::ExitCode::not_found, {"spiece.model"});
  // Corrupt files.
  const auto bad_json = tmp.write("bad/vocab.json", "{\"a\": 1,");
  expect_error([&] { ClipTokenizer::from_files(bad_json, kVocab / "merges.txt"); }, yeto::ExitCode::bad_input,
               {bad_json.string(), "not valid JSON"});
  const auto not_object = tmp.write("arr/vocab.json", "[1, 2]");
  expect_error([&] { ClipTokenizer::from_files(not_object, kVocab / "merges.txt"); }, yeto::ExitCode::bad_input, {not_object.string()});
  const auto bad_id = tmp.write("id/vocab.json", "{\"a\": \"x\"}");
  expect_error([&] { ClipTokenizer::from_files(bad_id, kVocab / "merges.txt"); }, yeto::ExitCode::bad_input, {bad_id.string(), "\"a\""});
  const auto bad_merges = tmp.write("m/merges.txt", "#version: 0.2\na b\nc d e\n");
  expect_error([&] { ClipTokenizer::from_files(kVocab / "vocab.json", bad_merges); }, yeto::ExitCode::bad_input,
               {bad_merges.string() + ":3"});
  const auto no_special = tmp.write("ns/vocab.json", "{\"a\": 0}");
  expect_error([&] { ClipTokenizer::from_files(no_special, kVocab / "merges.txt"); }, yeto::ExitCode::bad_input,
               {"<|startoftext|>", no_special.string()});
  const auto bad_config = tmp.write("cfg/tokenizer_config.json", "{\"model_max_length\": -3}");
  expect_error([&] { ClipTokenizer::from_folder(bad_config.parent_path()); }, yeto::ExitCode::bad_input, {bad_config.string()});

  std::string model;
  {
    std::ifstream in(kSpiece, std::ios::binary);
    model.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto truncated = tmp.write("t/spiece.model", model.substr(0, model.size() / 2));
  expect_error([&] { SentencePieceModel::load(truncated); }, yeto::ExitCode::bad_input, {truncated.string(), "not a valid SentencePiece model"});
  const auto garbage = tmp.write("g/spiece.model", std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12));
  expect_error([&] { SentencePieceModel::load(garbage); }, yeto::ExitCode::bad_input, {garbage.string()});
  const auto text_file = tmp.write("x/spiece.model", "this is not a model\n");
  expect_error([&] { SentencePieceModel::load(text_file); }, yeto::ExitCode::bad_input, {text_file.string()});
  const auto empty = tmp.write("e/spiece.model", "");
  expect_error([&] { SentencePieceModel::load(empty); }, yeto::ExitCode::bad_input, {empty.string(), "no pieces"});
}
