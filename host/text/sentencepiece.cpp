#include "text/sentencepiece.hpp"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "text/hf_config.hpp"
#include "text/unicode.hpp"

namespace yeto::text {
namespace {

// Minimal protobuf wire-format reader over untrusted bytes.
class Wire {
 public:
  Wire(std::string_view data, const std::string& label, const char* message)
      : data_(data), label_(label), message_(message) {}
  bool done() const { return pos_ >= data_.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > data_.size() - pos_) fail("length-delimited field runs past the end");
    auto out = data_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  std::uint32_t fixed32() {
    if (data_.size() - pos_ < 4) fail("truncated 32-bit field");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(data_[pos_ + k])) << (8 * k);
    pos_ += 4;
    return v;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1:
        if (data_.size() - pos_ < 8) fail("truncated 64-bit field");
        pos_ += 8;
        break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: fail("unsupported wire type " + std::to_string(wire_type));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(label_ + ": not a valid SentencePiece model (" + message_ + " at byte " + std::to_string(pos_) +
                    ": " + what + ")",
                ExitCode::bad_input);
  }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
  const std::string& label_;
  const char* message_;
};

std::int64_t as_int32(std::uint64_t v) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(v)); }

constexpr float kUnkPenalty = 10.0f;
constexpr const char* kSpaceSymbol = "\xe2\x96\x81";

}  // namespace

SentencePieceModel SentencePieceModel::load(const std::filesystem::path& path) {
  return parse(read_text_file(path, "SentencePiece model"), path.string());
}

SentencePieceModel SentencePieceModel::parse(std::string_view bytes, const std::string& label) {
  SentencePieceModel m;
  m.label_ = label;
  bool have_normalizer = false;
  Wire top(bytes, label, "ModelProto");
  while (!top.done()) {
    const std::uint64_t tag = top.varint();
    const int field = static_cast<int>(tag >> 3), wt = static_cast<int>(tag & 7);
    if (field == 1 && wt == 2) {
      Wire w(top.bytes(), label, "ModelProto.pieces");
      Piece p;
      while (!w.done()) {
        const std::uint64_t t = w.varint();
        const int f = static_cast<int>(t >> 3), pwt = static_cast<int>(t & 7);
        if (f == 1 && pwt == 2) {
          p.text = std::string(w.bytes());
        } else if (f == 2 && pwt == 5) {
          const std::uint32_t u = w.fixed32();
          std::memcpy(&p.score, &u, sizeof(float));
        } else if (f == 3 && pwt == 0) {
          const std::uint64_t ty = w.varint();
          if (ty < 1 || ty > 6) w.fail("unknown piece type " + std::to_string(ty));
          p.type = static_cast<PieceType>(ty);
        } else {
          w.skip(pwt);
        }
      }
      m.pieces_.push_back(std::move(p));
    } else if (field == 2 && wt == 2) {
      Wire w(top.bytes(), label, "TrainerSpec");
      while (!w.done()) {
        const std::uint64_t t = w.varint();
        const int f = static_cast<int>(t >> 3), twt = static_cast<int>(t & 7);
        if (twt == 0 && (f == 3 || f == 24 || f == 35 || (f >= 40 && f <= 43))) {
          const std::uint64_t v = w.varint();
          switch (f) {
            case 3: m.trainer_.model_type = static_cast<int>(v); break;
            case 24: m.trainer_.treat_whitespace_as_suffix = v != 0; break;
            case 35: m.trainer_.byte_fallback = v != 0; break;
            case 40: m.trainer_.unk_id = as_int32(v); break;
            case 41: m.trainer_.bos_id = as_int32(v); break;
            case 42: m.trainer_.eos_id = as_int32(v); break;
            case 43: m.trainer_.pad_id = as_int32(v); break;
            default: break;
          }
        } else if (twt == 2 && f >= 45 && f <= 48) {
          const std::string s(w.bytes());
          if (f == 45) m.trainer_.unk_piece = s;
          if (f == 46) m.trainer_.bos_piece = s;
          if (f == 47) m.trainer_.eos_piece = s;
          if (f == 48) m.trainer_.pad_piece = s;
        } else {
          w.skip(twt);
        }
      }
    } else if (field == 3 && wt == 2) {
      have_normalizer = true;
      Wire w(top.bytes(), label, "NormalizerSpec");
      while (!w.done()) {
        const std::uint64_t t = w.varint();
        const int f = static_cast<int>(t >> 3), nwt = static_cast<int>(t & 7);
        if (f == 1 && nwt == 2) {
          m.normalizer_.name = std::string(w.bytes());
        } else if (f == 2 && nwt == 2) {
          m.normalizer_.precompiled_charsmap = std::string(w.bytes());
        } else if (f >= 3 && f <= 5 && nwt == 0) {
          const bool v = w.varint() != 0;
          if (f == 3) m.normalizer_.add_dummy_prefix = v;
          if (f == 4) m.normalizer_.remove_extra_whitespaces = v;
          if (f == 5) m.normalizer_.escape_whitespaces = v;
        } else {
          w.skip(nwt);
        }
      }
    } else {
      top.skip(wt);
    }
  }
  (void)have_normalizer;
  if (m.pieces_.empty()) throw Error(label + ": not a valid SentencePiece model (no pieces)", ExitCode::bad_input);
  if (m.trainer_.model_type != 1) {
    static const char* kNames[] = {"?", "unigram", "bpe", "word", "char"};
    const int t = m.trainer_.model_type;
    throw Error(label + ": SentencePiece model type " + ((t >= 0 && t <= 4) ? kNames[t] : std::to_string(t).c_str()) +
                    " is not supported (only unigram models, as T5 ships)",
                ExitCode::bad_input);
  }

  // Pieces: the reserved map (control, unknown, byte) and the others, as ModelInterface does.
  m.min_score_ = FLT_MAX;
  m.max_score_ = FLT_MIN;
  for (std::size_t i = 0; i < m.pieces_.size(); ++i) {
    const Piece& p = m.pieces_[i];
    if (p.text.empty()) throw Error(label + ": not a valid SentencePiece model (piece " + std::to_string(i) + " is empty)", ExitCode::bad_input);
    const bool normal = p.type == PieceType::normal || p.type == PieceType::user_defined || p.type == PieceType::unused;
    auto& map = normal ? m.normal_ : m.reserved_;
    if (!map.emplace(p.text, static_cast<std::int64_t>(i)).second) {
      throw Error(label + ": not a valid SentencePiece model (piece \"" + p.text + "\" is defined twice)", ExitCode::bad_input);
    }
    if (p.type == PieceType::user_defined) m.user_defined_.push_back(p.text);
    if (p.type == PieceType::unknown) {
      if (m.unk_id_ >= 0) throw Error(label + ": not a valid SentencePiece model (more than one unknown piece)", ExitCode::bad_input);
      m.unk_id_ = static_cast<std::int64_t>(i);
    }
    if (p.type == PieceType::normal) {
      m.min_score_ = std::min(m.min_score_, p.score);
      m.max_score_ = std::max(m.max_score_, p.score);
    }
  }
  if (m.unk_id_ < 0) throw Error(label + ": not a valid SentencePiece model (no unknown piece)", ExitCode::bad_input);
  if (m.min_score_ == FLT_MAX) m.min_score_ = 0.0f;
  if (m.max_score_ == FLT_MIN) m.max_score_ = 0.0f;
  if (m.trainer_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      if (!m.reserved_.count(name)) {
        throw Error(label + ": not a valid SentencePiece model (byte_fallback is on but piece " + name + " is missing)", ExitCode::bad_input);
      }
    }
  }

  // Trie over normal, user-defined and unused pieces.
  m.trie_.emplace_back();
  for (const auto& [text, id] : m.normal_) {
    std::int32_t node = 0;
    for (unsigned char b : text) {
      std::int32_t child = m.trie_child(node, b);
      if (child < 0) {
        child = static_cast<std::int32_t>(m.trie_.size());
        auto& ch = m.trie_[static_cast<std::size_t>(node)].children;
        ch.insert(std::upper_bound(ch.begin(), ch.end(), std::make_pair(b, std::int32_t{-1}),
                                   [](const auto& a, const auto& c) { return a.first < c.first; }),
                  {b, child});
        m.trie_.emplace_back();
      }
      node = child;
    }
    m.trie_[static_cast<std::size_t>(node)].id = static_cast<std::int32_t>(id);
  }

  // Precompiled charsmap: <uint32 trie size><double array><replacement strings>.
  const std::string& blob = m.normalizer_.precompiled_charsmap;
  if (!blob.empty()) {
    auto bad = [&](const std::string& what) {
      return Error(label + ": not a valid SentencePiece model (precompiled_charsmap: " + what + ")", ExitCode::bad_input);
    };
    if (blob.size() <= 4) throw bad("too short");
    std::uint32_t trie_size = 0;
    for (int k = 0; k < 4; ++k) trie_size |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[static_cast<std::size_t>(k)])) << (8 * k);
    if (trie_size >= blob.size() - 4 + 1 || trie_size % 4 != 0 || trie_size == 0) throw bad("bad trie size");
    if (4 + static_cast<std::size_t>(trie_size) > blob.size()) throw bad("trie runs past the end");
    m.charsmap_units_.resize(trie_size / 4);
    for (std::size_t u = 0; u < m.charsmap_units_.size(); ++u) {
      std::uint32_t v = 0;
      for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[4 + u * 4 + static_cast<std::size_t>(k)])) << (8 * k);
      m.charsmap_units_[u] = v;
    }
    m.charsmap_pool_ = blob.substr(4 + trie_size);
  }
  return m;
}

std::int32_t SentencePieceModel::trie_child(std::int32_t node, unsigned char b) const {
  const auto& ch = trie_[static_cast<std::size_t>(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& a, unsigned char v) { return a.first < v; });
  return (it != ch.end() && it->first == b) ? it->second : -1;
}

std::int64_t SentencePieceModel::piece_to_id(std::string_view piece) const {
  const std::string key(piece);
  if (auto it = reserved_.find(key); it != reserved_.end()) return it->second;
  if (auto it = normal_.find(key); it != normal_.end()) return it->second;
  return unk_id_;
}

bool SentencePieceModel::has_piece(std::string_view piece) const {
  const std::string key(piece);
  return reserved_.count(key) || normal_.count(key);
}

// darts-clone commonPrefixSearch, keeping the longest match. Returns its length (0: none).
std::size_t SentencePieceModel::charsmap_longest_match(std::string_view input, std::uint32_t& value) const {
  if (charsmap_units_.empty()) return 0;
  const auto& a = charsmap_units_;
  auto offset = [](std::uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  auto label = [](std::uint32_t unit) { return unit & ((1u << 31) | 0xFFu); };
  auto has_leaf = [](std::uint32_t unit) { return ((unit >> 8) & 1u) == 1u; };
  std::size_t longest = 0;
  std::uint32_t id = 0;
  std::uint32_t unit = a[0];
  id ^= offset(unit);
  for (std::size_t i = 0; i < input.size(); ++i) {
    const auto c = static_cast<unsigned char>(input[i]);
    id ^= c;
    if (id >= a.size()) return longest;
    unit = a[id];
    if (label(unit) != c) return longest;
    id ^= offset(unit);
    if (id >= a.size()) return longest;
    if (has_leaf(unit)) {
      const std::uint32_t v = a[id] & ((1u << 31) - 1);
      if (v < charsmap_pool_.size()) {
        longest = i + 1;
        value = v;
      }
    }
  }
  return longest;
}

// One normalization step: the replacement of the longest prefix rule (or one character).
std::pair<std::string_view, std::size_t> SentencePieceModel::normalize_prefix(std::string_view input) const {
  if (input.empty()) return {{}, 0};
  // User-defined symbols are matched first and kept as they are.
  std::size_t user = 0;
  for (const auto& u : user_defined_) {
    if (u.size() > user && input.substr(0, u.size()) == u) user = u.size();
  }
  if (user > 0) return {input.substr(0, user), user};
  std::uint32_t value = 0;
  const std::size_t len = charsmap_longest_match(input, value);
  if (len > 0) {
    const char* s = charsmap_pool_.data() + value;
    const std::size_t max = charsmap_pool_.size() - value;
    return {std::string_view(s, strnlen(s, max)), len};
  }
  // Copy one character; a malformed UTF-8 byte becomes U+FFFD and consumes one byte.
  const std::size_t n = std::min(utf8_char_length(input), input.size());
  if (!is_valid_utf8(input.substr(0, n))) return {"\xEF\xBF\xBD", 1};
  return {input.substr(0, n), n};
}

std::string SentencePieceModel::normalize(std::string_view input) const {
  std::string out;
  if (input.empty()) return out;
  const auto& spec = normalizer_;
  if (spec.remove_extra_whitespaces) {
    while (!input.empty()) {
      const auto p = normalize_prefix(input);
      if (p.first != " ") break;
      input.remove_prefix(p.second);
    }
  }
  if (input.empty()) return out;
  const std::string space = spec.escape_whitespaces ? kSpaceSymbol : " ";
  const bool suffix = trainer_.treat_whitespace_as_suffix;
  if (!suffix && spec.add_dummy_prefix) out += space;
  bool prev_space = spec.remove_extra_whitespaces;
  while (!input.empty()) {
    const auto p = normalize_prefix(input);
    std::string_view sp = p.first;
    while (prev_space && !sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (char c : sp) {
        if (spec.escape_whitespaces && c == ' ') {
          out += kSpaceSymbol;
        } else {
          out.push_back(c);
        }
      }
      prev_space = sp.back() == ' ';
    }
    input.remove_prefix(p.second);
    if (!spec.remove_extra_whitespaces) prev_space = false;
  }
  if (spec.remove_extra_whitespaces) {
    while (out.size() >= space.size() && out.compare(out.size() - space.size(), space.size(), space) == 0) {
      out.resize(out.size() - space.size());
    }
  }
  if (suffix && spec.add_dummy_prefix) out += space;
  return out;
}

std::vector<std::pair<std::string, std::int64_t>> SentencePieceModel::viterbi(std::string_view normalized) const {
  struct Best {
    std::int64_t id = -1;
    float score = 0.0f;
    std::int64_t starts_at = -1;
  };
  const std::size_t size = normalized.size();
  std::vector<Best> best(size + 1);
  const float unk_score = min_score_ - kUnkPenalty;
  std::size_t start = 0;
  while (start < size) {
    const float till_here = best[start].score;
    bool has_single_node = false;
    const std::size_t mblen = std::min(utf8_char_length(normalized.substr(start)), size - start);
    std::int32_t node = 0;
    for (std::size_t pos = start; pos < size; ++pos) {
      node = trie_child(node, static_cast<unsigned char>(normalized[pos]));
      if (node < 0) break;
      const std::int32_t id = trie_[static_cast<std::size_t>(node)].id;
      if (id < 0) continue;
      const Piece& p = pieces_[static_cast<std::size_t>(id)];
      if (p.type == PieceType::unused) continue;
      Best& target = best[pos + 1];
      const std::size_t length = pos + 1 - start;
      float candidate;
      if (p.type == PieceType::user_defined) {
        const double score = static_cast<double>(static_cast<float>(length) * max_score_) - 0.1;
        candidate = static_cast<float>(score + static_cast<double>(till_here));
      } else {
        candidate = p.score + till_here;
      }
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = candidate;
        target.starts_at = static_cast<std::int64_t>(start);
        target.id = id;
      }
      if (!has_single_node && length == mblen) has_single_node = true;
    }
    if (!has_single_node) {
      Best& target = best[start + mblen];
      const float candidate = unk_score + till_here;
      if (target.starts_at == -1 || candidate > target.score) {
        target.score = candidate;
        target.starts_at = static_cast<std::int64_t>(start);
        target.id = unk_id_;
      }
    }
    start += mblen;
  }
  std::vector<std::pair<std::string, std::int64_t>> out;
  std::size_t end = size;
  while (end > 0) {
    const Best& b = best[end];
    const auto s = static_cast<std::size_t>(b.starts_at);
    out.emplace_back(std::string(normalized.substr(s, end - s)), b.id);
    end = s;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::string, std::int64_t>> SentencePieceModel::encode_pieces(std::string_view text) const {
  const std::string normalized = normalize(text);
  std::vector<std::pair<std::string, std::int64_t>> out;
  if (normalized.empty()) return out;
  bool prev_unk = false;
  for (auto& [piece, id] : viterbi(normalized)) {
    const bool unk = id == unk_id_;
    if (unk && trainer_.byte_fallback) {
      for (unsigned char b : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        out.emplace_back(name, piece_to_id(name));
      }
    } else if (unk && prev_unk) {
      out.back().first += piece;
    } else {
      out.emplace_back(std::move(piece), id);
    }
    prev_unk = unk;
  }
  return out;
}

std::vector<std::int64_t> SentencePieceModel::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (const auto& p : encode_pieces(text)) ids.push_back(p.second);
  return ids;
}

}  // namespace yeto::text
