// T5 tokenizer (transformers' T5Tokenizer over spiece.model): added tokens (<pad>, </s>,
// <unk>, <extra_id_N>) are split out first, the rest goes through SentencePiece; </s> is
// appended (unless the ids already end with it); pad id 0. `legacy` true (what every
// released T5 / Flux / SD3 config says) encodes every piece between added tokens with the
// model's dummy prefix; legacy false follows transformers' newer rule (no "▁" after an
// added token, and the prefix only at the start of the text).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "text/sentencepiece.hpp"
#include "text/tokenizer.hpp"

namespace yeto::text {

struct T5TokenizerConfig {
  std::string class_name = "T5Tokenizer";
  std::int64_t model_max_length = 512;
  std::string eos_token = "</s>";
  std::string unk_token = "<unk>";
  std::string pad_token = "<pad>";
  std::int64_t extra_ids = 100;  // <extra_id_0> = size + extra_ids - 1 ... <extra_id_{n-1}> = size
  bool legacy = true;
  bool add_prefix_space = true;
  std::vector<std::string> additional_special_tokens;
  std::vector<AddedToken> added_tokens;  // added_tokens_decoder / added_tokens.json (ids given)
};

class T5Tokenizer final : public Tokenizer {
 public:
  static std::unique_ptr<T5Tokenizer> from_model(const std::filesystem::path& spiece_model, T5TokenizerConfig config = {});
  // A Diffusers tokenizer folder: spiece.model, and when present tokenizer_config.json,
  // special_tokens_map.json, added_tokens.json.
  static std::unique_ptr<T5Tokenizer> from_folder(const std::filesystem::path& dir,
                                                  const std::string& class_name = "T5Tokenizer");

  std::string class_name() const override { return config_.class_name; }
  std::vector<std::int64_t> tokenize(std::string_view text) const override;
  std::vector<std::int64_t> with_special_tokens(std::vector<std::int64_t> ids) const override;
  std::int64_t num_special_tokens() const override { return 1; }
  std::int64_t pad_token_id() const override { return pad_id_; }
  std::int64_t model_max_length() const override { return config_.model_max_length; }
  std::int64_t vocab_size() const override;
  std::optional<std::int64_t> token_to_id(std::string_view token) const override;

  std::int64_t eos_token_id() const { return eos_id_; }
  const SentencePieceModel& model() const { return sp_; }
  const T5TokenizerConfig& config() const { return config_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  T5Tokenizer() = default;
  std::int64_t id_of_piece(const std::string& piece) const;

  T5TokenizerConfig config_;
  SentencePieceModel sp_;
  std::vector<AddedToken> added_;
  std::int64_t eos_id_ = 1, pad_id_ = 0, unk_id_ = 2;
  std::size_t unk_token_length_ = 0;  // pieces of the unk token text (non-legacy trick)
};

}  // namespace yeto::text
