// The tokenizers against the recorded reference ids (tests/fixtures/parity/clip-tokenizer and
// sentencepiece-tokenizer): every string, every row, every mask, exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "text/clip_tokenizer.hpp"
#include "text/sentencepiece.hpp"
#include "text/t5_tokenizer.hpp"

namespace fs = std::filesystem;
using yeto::text::ClipTokenizer;
using yeto::text::ClipTokenizerConfig;
using yeto::text::EncodeOptions;
using yeto::text::T5Tokenizer;

namespace {

// YETO_SOURCE_DIR rather than YETO_TEST_FIXTURES: the latter is set per calling directory.
const fs::path kFixtures = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures";
const fs::path kParity = kFixtures / "parity";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A [rows, cols] int64 tensor of a safetensors file as rows.
std::vector<std::vector<std::int64_t>> rows_of(const yeto::io::SafetensorsFile& f, const std::string& name) {
  const auto* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  EXPECT_EQ(t->dtype, yeto::io::DType::I64);
  const auto bytes = f.bytes(*t);
  const std::int64_t cols = t->shape.size() == 2 ? t->shape[1] : 1;
  std::vector<std::int64_t> flat(bytes.size() / 8);
  std::memcpy(flat.data(), bytes.data(), flat.size() * 8);
  std::vector<std::vector<std::int64_t>> rows;
  for (std::size_t r = 0; r * static_cast<std::size_t>(cols) < flat.size(); ++r) {
    rows.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(r * cols), flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * cols));
  }
  return rows;
}

std::unique_ptr<ClipTokenizer> clip(ClipTokenizerConfig::Cleanup cleanup, const std::string& pad) {
  ClipTokenizerConfig config;
  config.cleanup = cleanup;
  config.pad_token = pad;
  const fs::path vocab = kParity / "clip-bpe-vocab";
  return ClipTokenizer::from_files(vocab / "vocab.json", vocab / "merges.txt", config);
}

EncodeOptions pad_to(std::int64_t n, std::optional<std::int64_t> pad_id = std::nullopt) {
  EncodeOptions o;
  o.max_length = n;
  o.pad_token_id = pad_id;
  return o;
}

}  // namespace

// transformers' CLIPTokenizer: the recorded rows, except that for strings where it skips
// html.unescape (the fixture's ids_without_html_unescape) the row is built from those ids.
TEST(ClipTokenizerParity, TransformersIdsForEveryString) {
  const auto cs = read_json(kParity / "clip-tokenizer" / "case.json");
  const auto expected = yeto::io::SafetensorsFile::open(kParity / "clip-tokenizer" / "expected.safetensors");
  const auto pad_eos = rows_of(expected, "input_ids_pad_eos");
  const auto pad_zero = rows_of(expected, "input_ids_pad_zero");
  const auto mask = rows_of(expected, "attention_mask");
  const auto eot = rows_of(expected, "eot_index");
  // The pad_zero call pads with id 0 (clip.tokenize): the same tokenizer, another pad id.
  auto tok_eos = clip(ClipTokenizerConfig::Cleanup::transformers, "<|endoftext|>");
  auto& tok_zero = tok_eos;
  ASSERT_EQ(cs["strings"].size(), 28u);
  int matched = 0, hf_specific = 0;
  for (std::size_t i = 0; i < cs["strings"].size(); ++i) {
    const auto& s = cs["strings"][i];
    const std::string text = s["text"].get<std::string>();
    SCOPED_TRACE(s["name"].get<std::string>());
    std::vector<std::int64_t> want_eos = pad_eos[i], want_zero = pad_zero[i], want_mask = mask[i];
    if (s.contains("ids_without_html_unescape")) {
      ++hf_specific;
      const auto ids = s["ids_without_html_unescape"].get<std::vector<std::int64_t>>();
      std::vector<std::int64_t> row{49406};
      for (std::size_t k = 0; k < ids.size() && k < 75; ++k) row.push_back(ids[k]);
      row.push_back(49407);
      want_mask.assign(77, 0);
      std::fill(want_mask.begin(), want_mask.begin() + static_cast<std::ptrdiff_t>(row.size()), 1);
      want_eos = row, want_zero = row;
      want_eos.resize(77, 49407);
      want_zero.resize(77, 0);
      EXPECT_NE(want_eos, pad_eos[i]) << "the HF row should differ from the OpenAI row here";
    }
    EXPECT_EQ(tok_eos->clean_text(text), s.contains("clean_text_without_html_unescape")
                                             ? s["clean_text_without_html_unescape"].get<std::string>()
                                             : s["clean_text"].get<std::string>());
    const auto a = tok_eos->encode(text, pad_to(77));
    const auto b = tok_zero->encode(text, pad_to(77, 0));
    EXPECT_EQ(a.input_ids, want_eos);
    EXPECT_EQ(b.input_ids, want_zero);
    EXPECT_EQ(a.attention_mask, want_mask);
    EXPECT_EQ(b.attention_mask, want_mask);
    std::int64_t real = 0;
    for (auto m : a.attention_mask) real += m;
    if (!s.contains("ids_without_html_unescape")) {
      EXPECT_EQ(real - 1, eot[i][0]);
    }
    if (a.input_ids == want_eos && b.input_ids == want_zero && a.attention_mask == want_mask) ++matched;
  }
  EXPECT_EQ(matched, 28);
  EXPECT_EQ(hf_specific, 1);
}

// OpenAI's simple_tokenizer (html.unescape applied too): expected.safetensors exactly.
TEST(ClipTokenizerParity, OpenAiIdsMatchExpectedFileExactly) {
  const auto cs = read_json(kParity / "clip-tokenizer" / "case.json");
  const auto expected = yeto::io::SafetensorsFile::open(kParity / "clip-tokenizer" / "expected.safetensors");
  const auto pad_eos = rows_of(expected, "input_ids_pad_eos");
  const auto pad_zero = rows_of(expected, "input_ids_pad_zero");
  const auto mask = rows_of(expected, "attention_mask");
  auto tok_eos = clip(ClipTokenizerConfig::Cleanup::openai, "<|endoftext|>");
  auto& tok_zero = tok_eos;
  for (std::size_t i = 0; i < cs["strings"].size(); ++i) {
    const auto& s = cs["strings"][i];
    const std::string text = s["text"].get<std::string>();
    SCOPED_TRACE(s["name"].get<std::string>());
    EXPECT_EQ(tok_eos->clean_text(text), s["clean_text"].get<std::string>());
    EXPECT_EQ(tok_eos->tokenize(text), s["ids"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(tok_eos->tokens(text), s["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(tok_eos->encode(text, pad_to(77)).input_ids, pad_eos[i]);
    EXPECT_EQ(tok_zero->encode(text, pad_to(77, 0)).input_ids, pad_zero[i]);
    EXPECT_EQ(tok_zero->encode(text, pad_to(77, 0)).attention_mask, mask[i]);
  }
}

TEST(SentencePieceParity, PiecesAndIdsForEveryString) {
  const auto cs = read_json(kParity / "sentencepiece-tokenizer" / "case.json");
  const auto sp = yeto::text::SentencePieceModel::load(kParity / "sentencepiece-tokenizer" / "spiece.model");
  EXPECT_EQ(sp.size(), 500u);
  EXPECT_EQ(sp.piece_to_id("<pad>"), 0);
  EXPECT_EQ(sp.piece_to_id("</s>"), 1);
  EXPECT_EQ(sp.piece_to_id("<unk>"), 2);
  EXPECT_EQ(sp.normalizer_spec().name, "nmt_nfkc");
  ASSERT_EQ(cs["strings"].size(), 28u);
  int matched = 0;
  for (const auto& s : cs["strings"]) {
    SCOPED_TRACE(s["name"].get<std::string>());
    const std::string text = s["text"].get<std::string>();
    const auto pieces = sp.encode_pieces(text);
    std::vector<std::string> got_pieces;
    std::vector<std::int64_t> got_ids;
    for (const auto& [p, id] : pieces) got_pieces.push_back(p), got_ids.push_back(id);
    EXPECT_EQ(got_pieces, s["pieces"].get<std::vector<std::string>>());
    EXPECT_EQ(got_ids, s["ids"].get<std::vector<std::int64_t>>());
    if (got_ids == s["ids"].get<std::vector<std::int64_t>>()) ++matched;
  }
  EXPECT_EQ(matched, 28);
}

TEST(SentencePieceParity, T5RowsMatchExpectedFileExactly) {
  const auto cs = read_json(kParity / "sentencepiece-tokenizer" / "case.json");
  const auto expected = yeto::io::SafetensorsFile::open(kParity / "sentencepiece-tokenizer" / "expected.safetensors");
  const auto ids = rows_of(expected, "input_ids");
  const auto mask = rows_of(expected, "attention_mask");
  yeto::text::T5TokenizerConfig config;
  config.extra_ids = 0;  // the case's T5Tokenizer(spiece.model, extra_ids=0)
  auto tok = T5Tokenizer::from_model(kParity / "sentencepiece-tokenizer" / "spiece.model", config);
  for (std::size_t i = 0; i < cs["strings"].size(); ++i) {
    const auto& s = cs["strings"][i];
    SCOPED_TRACE(s["name"].get<std::string>());
    const auto enc = tok->encode(s["text"].get<std::string>(), pad_to(64));
    EXPECT_EQ(enc.input_ids, ids[i]);
    EXPECT_EQ(enc.attention_mask, mask[i]);
  }
}
