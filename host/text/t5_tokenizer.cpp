#include "text/t5_tokenizer.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "text/hf_config.hpp"

namespace yeto::text {
namespace {
constexpr const char* kUnderline = "\xe2\x96\x81";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}
}  // namespace

std::unique_ptr<T5Tokenizer> T5Tokenizer::from_model(const std::filesystem::path& spiece_model, T5TokenizerConfig config) {
  std::unique_ptr<T5Tokenizer> tok(new T5Tokenizer());
  tok->config_ = std::move(config);
  tok->sp_ = SentencePieceModel::load(spiece_model);
  if (!tok->config_.legacy) tok->sp_.set_add_dummy_prefix(false);
  const auto size = static_cast<std::int64_t>(tok->sp_.size());

  std::vector<AddedToken>& added = tok->added_;
  added = tok->config_.added_tokens;
  auto find = [&](const std::string& content) -> const AddedToken* {
    for (const auto& a : added) {
      if (a.content == content) return &a;
    }
    return nullptr;
  };
  // <extra_id_N> tokens that the files do not list explicitly.
  for (std::int64_t n = 0; n < tok->config_.extra_ids; ++n) {
    const std::string name = "<extra_id_" + std::to_string(n) + ">";
    if (!find(name)) added.push_back({name, size + tok->config_.extra_ids - 1 - n, false, false, true});
  }
  auto special_id = [&](const std::string& content, const char* what) -> std::int64_t {
    if (const AddedToken* a = find(content)) return a->id;
    if (!tok->sp_.has_piece(content)) {
      throw Error(spiece_model.string() + ": the " + std::string(what) + " token \"" + content +
                      "\" is not a piece of this SentencePiece model",
                  ExitCode::bad_input);
    }
    const std::int64_t id = tok->sp_.piece_to_id(content);
    added.push_back({content, id, false, false, true});
    return id;
  };
  tok->eos_id_ = special_id(tok->config_.eos_token, "eos");
  tok->unk_id_ = special_id(tok->config_.unk_token, "unk");
  tok->pad_id_ = special_id(tok->config_.pad_token, "pad");
  for (const auto& s : tok->config_.additional_special_tokens) {
    if (!find(s)) {
      if (!tok->sp_.has_piece(s)) {
        throw Error(spiece_model.string() + ": additional special token \"" + s + "\" has no id (not a piece, not an added token)",
                    ExitCode::bad_input);
      }
      added.push_back({s, tok->sp_.piece_to_id(s), false, false, true});
    }
  }
  tok->unk_token_length_ = tok->sp_.encode_pieces(tok->config_.unk_token).size();
  return tok;
}

std::unique_ptr<T5Tokenizer> T5Tokenizer::from_folder(const std::filesystem::path& dir, const std::string& class_name) {
  T5TokenizerConfig config;
  config.class_name = class_name;
  const HfTokenizerFiles files = read_hf_tokenizer_files(dir);
  if (files.model_max_length) config.model_max_length = *files.model_max_length;
  if (files.eos_token) config.eos_token = *files.eos_token;
  if (files.unk_token) config.unk_token = *files.unk_token;
  if (files.pad_token) config.pad_token = *files.pad_token;
  if (files.extra_ids) {
    if (*files.extra_ids < 0) {
      throw Error((dir / "tokenizer_config.json").string() + ": \"extra_ids\" must not be negative", ExitCode::bad_input);
    }
    config.extra_ids = *files.extra_ids;
  } else if (!files.added_tokens.empty() || !files.additional_special_tokens.empty()) {
    config.extra_ids = 0;  // the files list the added tokens themselves
  }
  if (files.legacy) config.legacy = *files.legacy;
  if (files.add_prefix_space) config.add_prefix_space = *files.add_prefix_space;
  config.additional_special_tokens = files.additional_special_tokens;
  config.added_tokens = files.added_tokens;
  return from_model(dir / "spiece.model", std::move(config));
}

std::int64_t T5Tokenizer::vocab_size() const {
  std::int64_t n = static_cast<std::int64_t>(sp_.size());
  for (const auto& a : added_) n = std::max(n, a.id + 1);
  return n;
}

std::optional<std::int64_t> T5Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_) {
    if (a.content == token) return a.id;
  }
  if (sp_.has_piece(token)) return sp_.piece_to_id(token);
  return std::nullopt;
}

std::int64_t T5Tokenizer::id_of_piece(const std::string& piece) const {
  for (const auto& a : added_) {
    if (a.content == piece) return a.id;
  }
  return sp_.piece_to_id(piece);
}

std::vector<std::int64_t> T5Tokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (config_.legacy || text.empty()) {
    for (const auto& piece : split_added_tokens(text, added_)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        continue;
      }
      for (const auto& [p, id] : sp_.encode_pieces(piece.text)) ids.push_back(id_of_piece(p));
    }
    return ids;
  }
  // Non-legacy: "▁" + text (spaces kept as spaces), no dummy prefix inside the model; a piece
  // starting with "▁"/" " is encoded after the unk token text, whose pieces are dropped.
  std::string t = replace_all(std::string(text), kUnderline, " ");
  if (config_.add_prefix_space) t = kUnderline + t;
  std::vector<std::string> tokens;
  std::vector<std::int64_t> token_ids;
  for (const auto& piece : split_added_tokens(t, added_)) {
    if (piece.id >= 0) {
      tokens.push_back(piece.text);
      token_ids.push_back(piece.id);
      continue;
    }
    const bool prefixed = piece.text.rfind(kUnderline, 0) == 0 || piece.text.rfind(" ", 0) == 0;
    auto pieces = sp_.encode_pieces(prefixed ? config_.unk_token + piece.text : piece.text);
    std::size_t skip = 0;
    if (prefixed && pieces.size() >= unk_token_length_) skip = unk_token_length_;
    for (std::size_t k = skip; k < pieces.size(); ++k) {
      tokens.push_back(pieces[k].first);
      token_ids.push_back(id_of_piece(pieces[k].first));
    }
  }
  std::size_t first = 0;
  if (tokens.size() > 1 && tokens[0] == kUnderline) {
    const bool next_special = std::any_of(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.special && a.content == tokens[1]; });
    if (next_special) first = 1;
  }
  ids.assign(token_ids.begin() + static_cast<std::ptrdiff_t>(first), token_ids.end());
  return ids;
}

std::vector<std::int64_t> T5Tokenizer::with_special_tokens(std::vector<std::int64_t> ids) const {
  if (ids.empty() || ids.back() != eos_id_) ids.push_back(eos_id_);
  return ids;
}

}  // namespace yeto::text
