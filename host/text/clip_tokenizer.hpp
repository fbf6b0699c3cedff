// CLIP byte-level BPE tokenizer (transformers' CLIPTokenizer over vocab.json + merges.txt).
//
// text -> added-token split -> per piece: ftfy fixes, whitespace collapse, lower-case ->
// CLIP pre-tokenizer regex -> UTF-8 bytes as byte characters -> BPE merges -> vocabulary ids;
// then [bos] + ids + [eos], truncation to max_length and padding with the configured pad id.
// Cleanup::openai reproduces OpenAI's simple_tokenizer instead (it also applies
// html.unescape twice and does not split added tokens first); Cleanup::transformers_fast is
// CLIPTokenizerFast's normalizer (NFC, whitespace collapse, lower-case; no ftfy).
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.hpp"

namespace yeto::text {

struct ClipTokenizerConfig {
  enum class Cleanup { transformers, openai, transformers_fast };
  Cleanup cleanup = Cleanup::transformers;
  std::string class_name = "CLIPTokenizer";
  std::int64_t model_max_length = 77;
  std::string bos_token = "<|startoftext|>";
  std::string eos_token = "<|endoftext|>";
  std::string unk_token = "<|endoftext|>";
  std::string pad_token = "<|endoftext|>";
  // added_tokens_decoder entries (ids given); bos/eos/unk/pad are added automatically.
  std::vector<AddedToken> added_tokens;
};

class ClipTokenizer final : public Tokenizer {
 public:
  // Reads vocab.json and merges.txt. Throws yeto::Error naming the file when one is missing
  // (ExitCode::not_found) or malformed (ExitCode::bad_input).
  static std::unique_ptr<ClipTokenizer> from_files(const std::filesystem::path& vocab_json,
                                                   const std::filesystem::path& merges_txt,
                                                   ClipTokenizerConfig config = {});
  // A Diffusers tokenizer folder: vocab.json, merges.txt, and when present
  // tokenizer_config.json / special_tokens_map.json. "CLIPTokenizerFast" selects
  // Cleanup::transformers_fast.
  static std::unique_ptr<ClipTokenizer> from_folder(const std::filesystem::path& dir,
                                                    const std::string& class_name = "CLIPTokenizer");

  std::string class_name() const override { return config_.class_name; }
  std::vector<std::int64_t> tokenize(std::string_view text) const override;
  std::vector<std::int64_t> with_special_tokens(std::vector<std::int64_t> ids) const override;
  std::int64_t num_special_tokens() const override { return 2; }
  std::int64_t pad_token_id() const override { return pad_id_; }
  std::int64_t model_max_length() const override { return config_.model_max_length; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(vocab_.size()); }
  std::optional<std::int64_t> token_to_id(std::string_view token) const override;

  std::int64_t bos_token_id() const { return bos_id_; }
  std::int64_t eos_token_id() const { return eos_id_; }
  const ClipTokenizerConfig& config() const { return config_; }

  // The text the pre-tokenizer sees for one piece of text (cleanup, whitespace, lower-case).
  std::string clean_text(std::string_view text) const;
  // BPE token strings of the text (vocabulary spellings, "</w>" marking word ends).
  std::vector<std::string> tokens(std::string_view text) const;

 private:
  ClipTokenizer() = default;
  void bpe_into(const std::string& word_bytes, std::vector<std::string>& out) const;
  void tokens_of_clean(const std::u32string& clean, std::vector<std::string>& out) const;
  std::int64_t id_of(const std::string& token) const;

  ClipTokenizerConfig config_;
  std::unordered_map<std::string, std::int64_t> vocab_;
  std::unordered_map<std::string, int> merge_ranks_;  // "left right" -> rank
  std::vector<AddedToken> added_;
  std::int64_t bos_id_ = 0, eos_id_ = 0, unk_id_ = 0, pad_id_ = 0;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::string>> cache_;
};

// CLIP's bytes_to_unicode(): the printable character standing for each byte, as UTF-8.
const std::string& byte_to_unicode(unsigned char b);

}  // namespace yeto::text
