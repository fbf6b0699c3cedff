// The tokenizer files init-model writes: deterministic, loadable by our readers, and (for
// spiece.model) encoded identically by libsentencepiece itself when it is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "support/temp_dir.hpp"
#include "text/clip_tokenizer.hpp"
#include "text/sentencepiece.hpp"
#include "text/t5_tokenizer.hpp"
#include "text/tokenizer_components.hpp"
#include "text/tokenizer_writer.hpp"

#ifdef YETO_TEST_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace yeto::text {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::ElementsAre;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ClipTokenizerWriter, WritesAByteLevelBpeOfTheEncodersVocabularySize) {
  TempDir t;
  for (const std::int64_t size : {std::int64_t{49408}, std::int64_t{1000}}) {
    const fs::path dir = t / ("clip-" + std::to_string(size));
    write_clip_tokenizer(dir, size, 77);
    const auto tok = ClipTokenizer::from_folder(dir);
    EXPECT_EQ(tok->vocab_size(), size);
    EXPECT_EQ(tok->bos_token_id(), size - 2);
    EXPECT_EQ(tok->eos_token_id(), size - 1);
    EXPECT_EQ(tok->model_max_length(), 77);
    // Words of the built-in corpus are single tokens; anything else still tokenizes.
    EXPECT_THAT(tok->tokens("A photo of the"), ElementsAre("a</w>", "photo</w>", "of</w>", "the</w>"));
    if (size > 10000) {
      EXPECT_THAT(tok->tokens("astronaut riding"), ElementsAre("astronaut</w>", "riding</w>"));
    }
    const auto ids = tok->with_special_tokens(tok->tokenize("zebra 42 \xc3\xa9t\xc3\xa9 !"));
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids.front(), size - 2);
    EXPECT_EQ(ids.back(), size - 1);
    for (auto id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, size);
    }
    // Through the component loader, as a pipeline would load it.
    EXPECT_EQ(load_tokenizer(dir, "CLIPTokenizer")->vocab_size(), size);
  }
  // Deterministic: the same arguments give the same bytes.
  write_clip_tokenizer(t / "again", 1000, 77);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"})
    EXPECT_EQ(slurp(t / "again" / f), slurp(t / "clip-1000" / f)) << f;
  std::ifstream merges(t / "clip-1000/merges.txt");
  std::string line;
  std::size_t n = 0;
  while (std::getline(merges, line)) ++n;
  EXPECT_EQ(n, 1u + 1000 - 514);  // header + one merge per token beyond the bytes and specials
  EXPECT_THROW(write_clip_tokenizer(t / "small", 513, 77), Error);
}

TEST(T5TokenizerWriter, WritesAUnigramModelOurReaderLoads) {
  TempDir t;
  for (const std::int64_t size : {std::int64_t{640}, std::int64_t{32128}}) {
    const fs::path dir = t / ("t5-" + std::to_string(size));
    write_t5_tokenizer(dir, size, 256, "T5TokenizerFast");
    const auto sp = SentencePieceModel::load(dir / "spiece.model");
    EXPECT_EQ(static_cast<std::int64_t>(sp.size()), size - 100);
    EXPECT_EQ(sp.unk_id(), 2);
    EXPECT_EQ(sp.trainer_spec().eos_id, 1);
    EXPECT_EQ(sp.trainer_spec().pad_id, 0);
    EXPECT_EQ(sp.trainer_spec().bos_id, -1);
    const auto pieces = sp.encode_pieces("a photo of a cat");
    ASSERT_EQ(pieces.size(), 5u);
    EXPECT_EQ(pieces[1].first, "\xe2\x96\x81photo");

    const auto tok = T5Tokenizer::from_folder(dir, "T5TokenizerFast");
    EXPECT_EQ(tok->vocab_size(), size);
    EXPECT_EQ(tok->model_max_length(), 256);
    EXPECT_EQ(tok->eos_token_id(), 1);
    EXPECT_EQ(tok->token_to_id("<extra_id_0>"), size - 1);
    EXPECT_EQ(tok->token_to_id("<extra_id_99>"), size - 100);
    const auto ids = tok->with_special_tokens(tok->tokenize("A zebra, \xc3\xa9t\xc3\xa9 <extra_id_0>"));
    EXPECT_EQ(ids.back(), 1);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 2), ids.end());           // é is unknown
    EXPECT_NE(std::find(ids.begin(), ids.end(), size - 1), ids.end());    // the added token
    for (auto id : ids) EXPECT_LT(id, size);
    EXPECT_EQ(load_tokenizer(dir, "T5TokenizerFast")->vocab_size(), size);
  }
  write_t5_tokenizer(t / "again", 640, 256, "T5TokenizerFast");
  EXPECT_EQ(slurp(t / "again/spiece.model"), slurp(t / "t5-640/spiece.model"));
  EXPECT_THROW(write_t5_tokenizer(t / "small", 150, 256), Error);
}

#ifdef YETO_TEST_HAVE_SENTENCEPIECE
TEST(T5TokenizerWriter, LibSentencePieceReadsTheModelAndAgrees) {
  TempDir t;
  write_t5_tokenizer(t.path(), 640, 256);
  sentencepiece::SentencePieceProcessor proc;
  ASSERT_TRUE(proc.Load((t / "spiece.model").string()).ok());
  EXPECT_EQ(proc.GetPieceSize(), 540);
  const auto ours = SentencePieceModel::load(t / "spiece.model");
  for (const char* text : {"a photo of a cat", "  Two   children, playing!", "zebra 1234 xyz", "\xc3\xa9t\xc3\xa9 caf\xc3\xa9"}) {
    std::vector<int> theirs;
    ASSERT_TRUE(proc.Encode(text, &theirs).ok());
    std::vector<std::int64_t> expected(theirs.begin(), theirs.end());
    EXPECT_EQ(ours.encode(text), expected) << text;
  }
}
#endif

}  // namespace
}  // namespace yeto::text
