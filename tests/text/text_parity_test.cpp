// The `tokenizer` parity kind through the check-parity machinery (parity::run_case).
#include <gtest/gtest.h>

#include "parity/parity.hpp"
#include "support/temp_dir.hpp"
#include "text/text_parity.hpp"

namespace fs = std::filesystem;

namespace {
const fs::path kParity = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity";
}

TEST(TokenizerParityKind, ClipAndSentencePieceCasesPass) {
  yeto::text::register_text_parity_kinds();
  ASSERT_TRUE(yeto::parity::has_kind("tokenizer"));
  for (const char* name : {"clip-tokenizer", "sentencepiece-tokenizer"}) {
    const auto r = yeto::parity::run_case(kParity / name);
    EXPECT_TRUE(r.supported) << r.error;
    EXPECT_TRUE(r.error.empty()) << r.error;
    for (const auto& c : r.comparisons) {
      EXPECT_TRUE(c.pass) << name << " " << c.name << " max_abs " << c.max_abs << " " << c.note;
      EXPECT_EQ(c.max_abs, 0.0) << c.name;
    }
    EXPECT_EQ(r.comparisons.size(), std::string(name) == "clip-tokenizer" ? 5u : 2u);
    EXPECT_TRUE(r.pass()) << name;
  }
}

TEST(TokenizerParityKind, WrongExpectedIdsFailAndUnknownClassIsUnsupported) {
  yeto::text::register_text_parity_kinds();
  yeto::test::TempDir tmp;
  // A copy of the sentencepiece case whose case.json asks for another max_length: the
  // shapes no longer match the recorded tensors, so the comparison must fail.
  const fs::path dir = tmp / "sp";
  fs::create_directories(dir);
  for (const char* f : {"expected.safetensors", "spiece.model"}) fs::copy_file(kParity / "sentencepiece-tokenizer" / f, dir / f);
  std::string cj = yeto::test::read_text(kParity / "sentencepiece-tokenizer" / "case.json");
  const std::string from = "\"max_length\": 64";
  ASSERT_NE(cj.find(from), std::string::npos);
  std::string changed = cj;
  for (std::size_t pos; (pos = changed.find(from)) != std::string::npos;) changed.replace(pos, from.size(), "\"max_length\": 63");
  tmp.write("sp/case.json", changed);
  auto r = yeto::parity::run_case(dir);
  EXPECT_FALSE(r.pass());

  std::string other = cj;
  const std::string cls = "\"class_name\": \"T5Tokenizer\"";
  ASSERT_NE(other.find(cls), std::string::npos);
  other.replace(other.find(cls), cls.size(), "\"class_name\": \"GPT2Tokenizer\"");
  tmp.write("sp/case.json", other);
  r = yeto::parity::run_case(dir);
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.error.find("GPT2Tokenizer"), std::string::npos) << r.error;
}
