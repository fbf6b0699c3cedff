#include "text/clip_tokenizer.hpp"

#include <array>
#include <climits>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/hf_config.hpp"
#include "text/text_fix.hpp"
#include "text/unicode.hpp"

namespace yeto::text {
namespace {

const std::array<std::string, 256>& byte_table() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      std::string s;
      append_utf8(s, printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++));
      t[static_cast<std::size_t>(b)] = s;
    }
    return t;
  }();
  return table;
}

// The CLIP pre-tokenizer:
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// (IGNORECASE; the text is lower-cased already, so only 'ſ' folding to 's' matters).
// `fast`: the regex of CLIPTokenizerFast's pre-tokenizer (no special-token alternatives;
// \s is Unicode White_Space, which leaves out U+001C..U+001F that str.isspace() counts).
bool white_space(char32_t c, bool fast) { return is_space(c) && !(fast && c >= 0x1C && c <= 0x1F); }

std::vector<std::u32string> pre_tokenize(const std::u32string& s, bool fast) {
  static const std::u32string kSpecials[] = {U"<|startoftext|>", U"<|endoftext|>"};
  static const std::u32string kContractions[] = {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"};
  std::vector<std::u32string> out;
  std::size_t i = 0;
  const std::size_t n = s.size();
  auto fold = [](char32_t c) { return c == 0x17F ? U's' : c; };
  while (i < n) {
    bool done = false;
    for (const auto& sp : kSpecials) {
      if (fast) break;
      if (s.compare(i, sp.size(), sp) == 0) {
        out.push_back(sp);
        i += sp.size();
        done = true;
        break;
      }
    }
    if (done) continue;
    if (s[i] == U'\'') {
      for (const auto& c : kContractions) {
        if (i + 1 + c.size() > n) continue;
        bool eq = true;
        for (std::size_t k = 0; k < c.size(); ++k) {
          if (fold(s[i + 1 + k]) != c[k]) {
            eq = false;
            break;
          }
        }
        if (eq) {
          out.push_back(s.substr(i, 1 + c.size()));
          i += 1 + c.size();
          done = true;
          break;
        }
      }
      if (done) continue;
    }
    const char32_t c = s[i];
    if (is_letter(c)) {
      std::size_t j = i + 1;
      while (j < n && is_letter(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    } else if (is_number(c)) {
      out.push_back(s.substr(i, 1));
      ++i;
    } else if (white_space(c, fast)) {
      ++i;
    } else {
      std::size_t j = i + 1;
      while (j < n && !white_space(s[j], fast) && !is_letter(s[j]) && !is_number(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
  }
  return out;
}

std::u32string whitespace_clean(std::u32string_view s, bool fast = false) {
  std::u32string out;
  out.reserve(s.size());
  bool in_space = false;
  for (char32_t c : s) {
    if (white_space(c, fast)) {
      in_space = true;
      continue;
    }
    if (in_space && !out.empty()) out.push_back(U' ');
    in_space = false;
    out.push_back(c);
  }
  return out;
}

// Splits a UTF-8 string into its characters.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t len = utf8_char_length(std::string_view(s).substr(i));
    len = std::min(len, s.size() - i);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_table()[b]; }

std::unique_ptr<ClipTokenizer> ClipTokenizer::from_files(const std::filesystem::path& vocab_json,
                                                         const std::filesystem::path& merges_txt,
                                                         ClipTokenizerConfig config) {
  std::unique_ptr<ClipTokenizer> tok(new ClipTokenizer());
  tok->config_ = std::move(config);

  const nlohmann::json vocab = read_json_file(vocab_json, "CLIP vocabulary");
  if (!vocab.is_object() || vocab.empty()) {
    throw Error(vocab_json.string() + ": a CLIP vocab.json must be a non-empty JSON object {token: id}",
                ExitCode::bad_input);
  }
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0) {
      throw Error(vocab_json.string() + ": the id of token \"" + token + "\" is not a non-negative integer",
                  ExitCode::bad_input);
    }
    tok->vocab_[token] = id.get<std::int64_t>();
  }

  const std::string merges = read_text_file(merges_txt, "CLIP merges");
  // transformers reads merges.txt as: strip, split lines, drop line 0 (the "#version" header),
  // keep at most 49152 - 256 - 2 merges; each line "left right".
  std::size_t b = 0, e = merges.size();
  auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v'; };
  while (b < e && ws(merges[b])) ++b;
  while (e > b && ws(merges[e - 1])) --e;
  std::istringstream lines(merges.substr(b, e - b));
  std::string line;
  int lineno = 0, rank = 0;
  constexpr int kMaxMerges = 49152 - 256 - 2;
  while (std::getline(lines, line)) {
    ++lineno;
    if (lineno == 1) continue;
    if (rank >= kMaxMerges) break;
    std::istringstream parts(line);
    std::string left, right, extra;
    if (!(parts >> left >> right) || (parts >> extra)) {
      throw Error(merges_txt.string() + ":" + std::to_string(lineno) +
                      ": a merge line must be two symbols separated by a space, got \"" + line + "\"",
                  ExitCode::bad_input);
    }
    tok->merge_ranks_.emplace(left + " " + right, rank++);
  }
  if (rank == 0) throw Error(merges_txt.string() + ": no merges found (is this a CLIP merges.txt?)", ExitCode::bad_input);

  auto require = [&](const std::string& token, const char* what) -> std::int64_t {
    auto it = tok->vocab_.find(token);
    if (it != tok->vocab_.end()) return it->second;
    for (const auto& a : tok->config_.added_tokens) {
      if (a.content == token) return a.id;
    }
    throw Error(vocab_json.string() + ": the " + what + " token \"" + token + "\" is not in the vocabulary",
                ExitCode::bad_input);
  };
  tok->bos_id_ = require(tok->config_.bos_token, "bos");
  tok->eos_id_ = require(tok->config_.eos_token, "eos");
  tok->unk_id_ = require(tok->config_.unk_token, "unk");
  tok->pad_id_ = require(tok->config_.pad_token, "pad");

  tok->added_ = tok->config_.added_tokens;
  auto add_special = [&](const std::string& content, std::int64_t id) {
    for (const auto& a : tok->added_) {
      if (a.content == content) return;
    }
    tok->added_.push_back({content, id, false, false, true});
  };
  add_special(tok->config_.bos_token, tok->bos_id_);
  add_special(tok->config_.eos_token, tok->eos_id_);
  add_special(tok->config_.unk_token, tok->unk_id_);
  add_special(tok->config_.pad_token, tok->pad_id_);
  return tok;
}

std::unique_ptr<ClipTokenizer> ClipTokenizer::from_folder(const std::filesystem::path& dir,
                                                          const std::string& class_name) {
  ClipTokenizerConfig config;
  config.class_name = class_name;
  if (class_name == "CLIPTokenizerFast") config.cleanup = ClipTokenizerConfig::Cleanup::transformers_fast;
  const HfTokenizerFiles files = read_hf_tokenizer_files(dir);
  if (files.model_max_length) config.model_max_length = *files.model_max_length;
  if (files.bos_token) config.bos_token = *files.bos_token;
  if (files.eos_token) config.eos_token = *files.eos_token;
  if (files.unk_token) config.unk_token = *files.unk_token;
  if (files.pad_token) config.pad_token = *files.pad_token;
  config.added_tokens = files.added_tokens;
  return from_files(dir / "vocab.json", dir / "merges.txt", std::move(config));
}

std::optional<std::int64_t> ClipTokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = vocab_.find(std::string(token));
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::int64_t ClipTokenizer::id_of(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? unk_id_ : it->second;
}

void ClipTokenizer::bpe_into(const std::string& word_bytes, std::vector<std::string>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word_bytes);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::string> word = utf8_chars(word_bytes);
  std::vector<std::string> result;
  if (word.empty()) return;
  word.back() += "</w>";
  while (word.size() > 1) {
    int best_rank = INT_MAX;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merge_ranks_.find(word[i] + " " + word[i + 1]);
      if (it != merge_ranks_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == INT_MAX) break;
    const std::string first = word[best], second = word[best + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i]);
        ++i;
      }
    }
    word = std::move(merged);
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() > 100000) cache_.clear();
    cache_.emplace(word_bytes, word);
  }
  out.insert(out.end(), word.begin(), word.end());
}

void ClipTokenizer::tokens_of_clean(const std::u32string& clean, std::vector<std::string>& out) const {
  const bool fast = config_.cleanup == ClipTokenizerConfig::Cleanup::transformers_fast;
  for (const auto& piece : pre_tokenize(clean, fast)) {
    if (piece == U"<|startoftext|>" || piece == U"<|endoftext|>") {
      out.push_back(utf8_encode(piece));  // the BPE cache holds these two as themselves
      continue;
    }
    const std::string utf8 = utf8_encode(piece);
    std::string mapped;
    for (unsigned char b : utf8) mapped += byte_to_unicode(b);
    bpe_into(mapped, out);
  }
}

std::string ClipTokenizer::clean_text(std::string_view text) const {
  if (config_.cleanup == ClipTokenizerConfig::Cleanup::transformers_fast) {
    return utf8_encode(to_lower(whitespace_clean(nfc(utf8_decode(text)), true)));
  }
  std::u32string t = fix_text(utf8_decode(text));
  if (config_.cleanup == ClipTokenizerConfig::Cleanup::openai) {
    t = html_unescape(html_unescape(t));
    t = std::u32string(strip(t));
  }
  return utf8_encode(to_lower(whitespace_clean(t)));
}

std::vector<std::string> ClipTokenizer::tokens(std::string_view text) const {
  std::vector<std::string> out;
  if (config_.cleanup == ClipTokenizerConfig::Cleanup::openai) {
    tokens_of_clean(utf8_decode(clean_text(text)), out);
    return out;
  }
  for (const auto& piece : split_added_tokens(text, added_)) {
    if (piece.id >= 0) {
      out.push_back(piece.text);
    } else {
      tokens_of_clean(utf8_decode(clean_text(piece.text)), out);
    }
  }
  return out;
}

std::vector<std::int64_t> ClipTokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (config_.cleanup == ClipTokenizerConfig::Cleanup::openai) {
    for (const auto& t : tokens(text)) ids.push_back(id_of(t));
    return ids;
  }
  for (const auto& piece : split_added_tokens(text, added_)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    std::vector<std::string> toks;
    tokens_of_clean(utf8_decode(clean_text(piece.text)), toks);
    for (const auto& t : toks) {
      auto added = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.content == t; });
      ids.push_back(added != added_.end() ? added->id : id_of(t));
    }
  }
  return ids;
}

std::vector<std::int64_t> ClipTokenizer::with_special_tokens(std::vector<std::int64_t> ids) const {
  std::vector<std::int64_t> out;
  out.reserve(ids.size() + 2);
  out.push_back(bos_id_);
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(eos_id_);
  return out;
}

}  // namespace yeto::text
