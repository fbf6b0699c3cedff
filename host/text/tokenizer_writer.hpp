// Writing tokenizer folders for freshly initialised model repositories (`yeto-host
// init-model`): a byte-level CLIP BPE (vocab.json + merges.txt) and a SentencePiece unigram
// model (spiece.model, the ModelProto protobuf) for T5, each with its tokenizer_config.json
// and special_tokens_map.json. The vocabularies are generated deterministically -- merges
// and pieces learnt from a small built-in English caption corpus, then filled up with
// enumerated letter/digit strings to the size the paired text encoder embeds -- so the same
// arguments always give byte-identical files, which the readers in this directory load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace yeto::text {

struct ClipVocabulary {
  std::vector<std::string> tokens;                              // by id
  std::vector<std::pair<std::string, std::string>> merges;      // by rank
};

// A CLIP byte-level BPE vocabulary of exactly `vocab_size` ids: the 256 byte characters,
// the same with "</w>", one token per merge, then <|startoftext|> (vocab_size - 2) and
// <|endoftext|> (vocab_size - 1), as OpenAI's CLIP orders them. Throws yeto::Error
// (bad_input) when vocab_size < 514 (the byte alphabet and the two specials).
ClipVocabulary make_clip_vocabulary(std::int64_t vocab_size);

// Writes vocab.json, merges.txt, tokenizer_config.json and special_tokens_map.json into
// `dir` (created; atomic writes). `class_name`: CLIPTokenizer or CLIPTokenizerFast.
void write_clip_tokenizer(const std::filesystem::path& dir, std::int64_t vocab_size, std::int64_t model_max_length,
                          const std::string& class_name = "CLIPTokenizer");

struct UnigramPiece {
  std::string text;
  float score = 0.0f;
  int type = 1;  // SentencePiece ModelProto.SentencePiece.Type: 1 normal, 2 unknown, 3 control
};

// The pieces of a T5-style unigram model with exactly `num_pieces` pieces: <pad> (0),
// </s> (1), <unk> (2), then the printable ASCII characters and U+2581, then learnt and
// enumerated word pieces. Throws yeto::Error (bad_input) when num_pieces is too small to
// hold the specials and the characters.
std::vector<UnigramPiece> make_unigram_pieces(std::int64_t num_pieces);

// The serialised ModelProto of a unigram model over `pieces` (trainer_spec: unigram,
// unk 2, bos -1, eos 1, pad 0; normalizer_spec: identity with dummy prefix, whitespace
// removal and escaping).
std::string serialize_unigram_model(const std::vector<UnigramPiece>& pieces);

// Writes spiece.model, tokenizer_config.json and special_tokens_map.json into `dir`.
// `vocab_size` is the paired T5 encoder's embedding size; the model gets
// vocab_size - extra_ids pieces and <extra_id_N> follow them as added tokens, as
// transformers' T5Tokenizer numbers them. `class_name`: T5Tokenizer or T5TokenizerFast.
void write_t5_tokenizer(const std::filesystem::path& dir, std::int64_t vocab_size, std::int64_t model_max_length,
                        const std::string& class_name = "T5Tokenizer", std::int64_t extra_ids = 100);

}  // namespace yeto::text
