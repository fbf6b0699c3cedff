// A SentencePiece unigram model read from spiece.model (the ModelProto protobuf, parsed by
// hand), with SentencePiece's normalizer (precompiled charsmap such as nmt_nfkc, dummy
// prefix, extra-whitespace removal, whitespace escaping as U+2581, user-defined symbols) and
// its Viterbi segmentation (unknown runs merged into one <unk>, or byte fallback).
// Reproduces SentencePieceProcessor::Encode of sentencepiece 0.1.97. No libsentencepiece.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace yeto::text {

class SentencePieceModel {
 public:
  enum class PieceType : std::uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  struct Piece {
    std::string text;
    float score = 0.0f;
    PieceType type = PieceType::normal;
  };
  struct NormalizerSpec {
    std::string name;
    std::string precompiled_charsmap;
    bool add_dummy_prefix = true;
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
  };
  struct TrainerSpec {
    int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
    bool treat_whitespace_as_suffix = false;
    bool byte_fallback = false;
    std::int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
    std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  };

  // Throws yeto::Error naming the file: ExitCode::not_found when missing, ExitCode::bad_input
  // when it is not a valid unigram model.
  static SentencePieceModel load(const std::filesystem::path& path);
  static SentencePieceModel parse(std::string_view bytes, const std::string& label);

  // What SentencePiece feeds its model: normalized text with spaces as U+2581.
  std::string normalize(std::string_view text) const;
  // (piece, id) pairs of SentencePieceProcessor::Encode(text).
  std::vector<std::pair<std::string, std::int64_t>> encode_pieces(std::string_view text) const;
  std::vector<std::int64_t> encode(std::string_view text) const;

  std::size_t size() const { return pieces_.size(); }
  const Piece& piece(std::int64_t id) const { return pieces_.at(static_cast<std::size_t>(id)); }
  // SentencePiece's PieceToId: control/unknown pieces first, then the others, else unk_id.
  std::int64_t piece_to_id(std::string_view piece) const;
  bool has_piece(std::string_view piece) const;
  std::int64_t unk_id() const { return unk_id_; }
  const NormalizerSpec& normalizer_spec() const { return normalizer_; }
  const TrainerSpec& trainer_spec() const { return trainer_; }
  // transformers' non-legacy T5 mode turns the dummy prefix off.
  void set_add_dummy_prefix(bool on) { normalizer_.add_dummy_prefix = on; }

 private:
  struct TrieNode {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    std::int32_t id = -1;
  };
  std::pair<std::string_view, std::size_t> normalize_prefix(std::string_view input) const;
  std::size_t charsmap_longest_match(std::string_view input, std::uint32_t& value) const;
  std::int32_t trie_child(std::int32_t node, unsigned char b) const;
  std::vector<std::pair<std::string, std::int64_t>> viterbi(std::string_view normalized) const;

  std::string label_;
  std::vector<Piece> pieces_;
  NormalizerSpec normalizer_;
  TrainerSpec trainer_;
  std::unordered_map<std::string, std::int64_t> reserved_;  // control, unknown, byte
  std::unordered_map<std::string, std::int64_t> normal_;    // normal, user-defined, unused
  std::vector<std::string> user_defined_;
  std::vector<TrieNode> trie_;
  std::int64_t unk_id_ = -1;
  float min_score_ = 0.0f, max_score_ = 0.0f;
  // Precompiled charsmap: a darts-clone double array and the pool of replacement strings.
  std::vector<std::uint32_t> charsmap_units_;
  std::string charsmap_pool_;
};

}  // namespace yeto::text
