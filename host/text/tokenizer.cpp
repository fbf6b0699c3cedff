#include "text/tokenizer.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace yeto::text {

Tokenizer::~Tokenizer() = default;

Encoding Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<std::int64_t> ids = tokenize(text);
  const std::int64_t max_length = options.max_length.value_or(model_max_length());
  if (max_length <= 0) throw UsageError("tokenizer: max_length must be positive (got " + std::to_string(max_length) + ")");
  // transformers: with no max_length and no real model_max_length (configs write 1e30), it
  // neither truncates nor pads to max_length.
  const bool unbounded = !options.max_length && model_max_length() >= kUnboundedLength;
  const std::int64_t specials = options.add_special_tokens ? num_special_tokens() : 0;
  std::int64_t truncated = 0;
  if (options.truncation && !unbounded) {
    const std::int64_t keep = std::max<std::int64_t>(0, max_length - specials);
    if (static_cast<std::int64_t>(ids.size()) > keep) {
      truncated = static_cast<std::int64_t>(ids.size()) - keep;
      ids.resize(static_cast<std::size_t>(keep));
    }
  }
  if (options.add_special_tokens) ids = with_special_tokens(std::move(ids));
  Encoding out;
  out.truncated = truncated;
  out.attention_mask.assign(ids.size(), 1);
  out.input_ids = std::move(ids);
  if (options.padding == Padding::max_length && !unbounded) {
    const auto target = static_cast<std::size_t>(max_length);
    if (out.input_ids.size() < target) {
      out.input_ids.resize(target, options.pad_token_id.value_or(pad_token_id()));
      out.attention_mask.resize(target, 0);
    }
  }
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, const EncodeOptions& options) const {
  std::vector<Encoding> rows;
  rows.reserve(texts.size());
  for (const auto& t : texts) rows.push_back(encode(t, options));
  if (options.padding == Padding::longest) {
    std::size_t longest = 0;
    for (const auto& r : rows) longest = std::max(longest, r.input_ids.size());
    for (auto& r : rows) {
      r.input_ids.resize(longest, options.pad_token_id.value_or(pad_token_id()));
      r.attention_mask.resize(longest, 0);
    }
  }
  return rows;
}

namespace {
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
}  // namespace

std::vector<TextPiece> split_added_tokens(std::string_view text, const std::vector<AddedToken>& tokens) {
  std::vector<TextPiece> pieces;
  std::vector<const AddedToken*> matched;  // parallel to pieces: the token of an added piece
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* best = nullptr;
    for (const auto& t : tokens) {
      if (t.content.empty() || t.content.size() > text.size() - i) continue;
      if (text.compare(i, t.content.size(), t.content) == 0 && (!best || t.content.size() > best->content.size())) best = &t;
    }
    if (!best) {
      ++i;
      continue;
    }
    if (i > start) {
      pieces.push_back({std::string(text.substr(start, i - start)), -1});
      matched.push_back(nullptr);
    }
    pieces.push_back({best->content, best->id});
    matched.push_back(best);
    i += best->content.size();
    start = i;
  }
  if (start < text.size()) {
    pieces.push_back({std::string(text.substr(start)), -1});
    matched.push_back(nullptr);
  }
  // lstrip / rstrip trim whitespace of the neighbours.
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    if (!matched[k]) continue;
    if (matched[k]->rstrip && k + 1 < pieces.size() && !matched[k + 1]) {
      auto& s = pieces[k + 1].text;
      std::size_t b = 0;
      while (b < s.size() && is_ascii_space(s[b])) ++b;
      s.erase(0, b);
    }
    if (matched[k]->lstrip && k > 0 && !matched[k - 1]) {
      auto& s = pieces[k - 1].text;
      while (!s.empty() && is_ascii_space(s.back())) s.pop_back();
    }
  }
  std::vector<TextPiece> out;
  for (auto& p : pieces) {
    if (p.id >= 0 || !p.text.empty()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace yeto::text
