// Tokenizers as the Hugging Face pipelines call them: text -> ids (+ special tokens), then
// truncation, padding and the attention mask. Torch-free: ids are std::int64_t.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::text {

enum class Padding {
  none,        // no padding
  longest,     // pad every row of a batch to the longest row
  max_length,  // pad to max_length (the tokenizer's model_max_length when not given)
};

// A model_max_length at least this large means "no limit" (transformers' VERY_LARGE_INTEGER).
inline constexpr std::int64_t kUnboundedLength = std::int64_t{1} << 40;

struct EncodeOptions {
  Padding padding = Padding::max_length;
  bool truncation = true;
  std::optional<std::int64_t> max_length;  // default: model_max_length()
  bool add_special_tokens = true;
  // Pads with this id instead of pad_token_id() (e.g. OpenAI's clip.tokenize pads with 0
  // without making "!" an added token).
  std::optional<std::int64_t> pad_token_id;
};

struct Encoding {
  std::vector<std::int64_t> input_ids;
  std::vector<std::int64_t> attention_mask;
  std::int64_t truncated = 0;  // tokens of the text that truncation cut off
};

// A token matched verbatim in the text before the model sees it (transformers' added tokens:
// the special tokens, "<extra_id_N>", a pad token like "!" listed in added_tokens_decoder).
struct AddedToken {
  std::string content;
  std::int64_t id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool special = true;
};

class Tokenizer {
 public:
  virtual ~Tokenizer();

  // The transformers class it stands for ("CLIPTokenizer", "T5Tokenizer", ...).
  virtual std::string class_name() const = 0;
  // Ids of the text without special tokens, untruncated (tokenizer(text, add_special_tokens=False)).
  virtual std::vector<std::int64_t> tokenize(std::string_view text) const = 0;
  // Adds bos/eos as the tokenizer's build_inputs_with_special_tokens does.
  virtual std::vector<std::int64_t> with_special_tokens(std::vector<std::int64_t> ids) const = 0;
  virtual std::int64_t num_special_tokens() const = 0;
  virtual std::int64_t pad_token_id() const = 0;
  virtual std::int64_t model_max_length() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  // The id of a token string (vocabulary or added token), if it has one.
  virtual std::optional<std::int64_t> token_to_id(std::string_view token) const = 0;

  // tokenizer(text, padding=..., truncation=..., max_length=..., add_special_tokens=...).
  Encoding encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, const EncodeOptions& options = {}) const;
};

// Splits text at added tokens the way transformers' slow tokenizers do (leftmost match, the
// longest one there; lstrip/rstrip trim the neighbouring text). Pieces that are not added
// tokens come back with id -1.
struct TextPiece {
  std::string text;
  std::int64_t id = -1;
};
std::vector<TextPiece> split_added_tokens(std::string_view text, const std::vector<AddedToken>& tokens);

}  // namespace yeto::text
