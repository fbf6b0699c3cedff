#include "text/tokenizer_writer.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "text/clip_tokenizer.hpp"

namespace yeto::text {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What the learnt part of both vocabularies is trained on: short image captions.
constexpr const char* kCorpus =
    "a photo of a cat sitting on a red chair in the sun . a painting of a dog running through the green grass . "
    "a close up photo of a woman with long hair smiling at the camera . an old man reading a book in the park . "
    "a small house by the lake at sunset with mountains in the background . a city street at night with cars and lights . "
    "a bowl of fruit on a wooden table , apples and oranges . a bird flying over the sea under a blue sky . "
    "a portrait of a young girl wearing a yellow dress . two children playing with a ball on the beach . "
    "a black and white picture of a horse standing in a field . a cup of coffee next to a laptop on a desk . "
    "the forest in winter covered with snow , high quality , detailed . a robot walking in a futuristic city . "
    "a boat on the river between the trees in autumn . a plate of pasta with tomato sauce and cheese . "
    "a group of people standing in front of a building . a white flower in a glass vase by the window . "
    "an astronaut riding a horse on the moon , digital art . a train crossing a bridge over the valley . "
    "the light of the morning on the water , soft colors , photograph . a cartoon of a happy little fox .";

constexpr const char* kEndOfWord = "</w>";
constexpr const char* kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space
constexpr const char* kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";

std::vector<std::string> corpus_words() {
  std::vector<std::string> words;
  for (const auto& w : split(kCorpus, ' '))
    if (!w.empty()) words.push_back(w);
  return words;
}

// Every string of `len` characters over kAlphabet, in lexicographic order, passed to `f`
// until it returns false.
template <typename F>
bool enumerate_strings(std::size_t len, F&& f) {
  const std::size_t n = std::strlen(kAlphabet);
  std::vector<std::size_t> idx(len, 0);
  while (true) {
    std::string s;
    for (std::size_t i : idx) s += kAlphabet[i];
    if (!f(s)) return false;
    std::size_t k = len;
    while (k > 0) {
      --k;
      if (++idx[k] < n) break;
      idx[k] = 0;
      if (k == 0) return true;
    }
  }
}

void write_json(const fs::path& file, const json& j) { atomic_write(file, j.dump(2) + "\n"); }

// Protobuf wire format, just what ModelProto needs.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type)); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_int32(std::string& out, int field, std::int32_t v) {
  put_tag(out, field, 0);
  put_varint(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));  // negative: 10 bytes, as protobuf does
}
void put_float(std::string& out, int field, float f) {
  put_tag(out, field, 5);
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  for (int k = 0; k < 4; ++k) out += static_cast<char>((u >> (8 * k)) & 0xff);
}

}  // namespace

ClipVocabulary make_clip_vocabulary(std::int64_t vocab_size) {
  constexpr std::int64_t kBase = 2 * 256 + 2;
  if (vocab_size < kBase)
    throw Error("a byte-level CLIP tokenizer needs at least " + std::to_string(kBase) +
                    " ids (256 bytes, the same with </w>, <|startoftext|>, <|endoftext|>); the text encoder's vocab_size is " +
                    std::to_string(vocab_size),
                ExitCode::bad_input);
  ClipVocabulary v;
  std::unordered_set<std::string> have;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_unicode(static_cast<unsigned char>(b)));
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_unicode(static_cast<unsigned char>(b)) + kEndOfWord);
  have.insert(v.tokens.begin(), v.tokens.end());
  const auto wanted = static_cast<std::size_t>(vocab_size - kBase);
  auto add_merge = [&](const std::string& a, const std::string& b) {
    v.merges.emplace_back(a, b);
    v.tokens.push_back(a + b);
    have.insert(a + b);
  };

  // 1. BPE learnt on the corpus: a word is its characters, the last one carrying </w>; the
  // most frequent adjacent pair is merged (ties: the smallest pair) until every corpus word
  // is one token.
  std::map<std::vector<std::string>, std::int64_t> words;
  for (const auto& w : corpus_words()) {
    std::vector<std::string> sym;
    for (char c : w) sym.emplace_back(1, c);
    sym.back() += kEndOfWord;
    ++words[sym];
  }
  while (v.merges.size() < wanted) {
    std::map<std::pair<std::string, std::string>, std::int64_t> pairs;
    for (const auto& [sym, n] : words)
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) pairs[{sym[i], sym[i + 1]}] += n;
    const std::pair<std::string, std::string>* best = nullptr;
    std::int64_t best_n = 0;
    for (const auto& [p, n] : pairs)
      if (n > best_n && !have.count(p.first + p.second)) {
        best = &p;
        best_n = n;
      }
    if (!best) break;
    const auto pair = *best;
    add_merge(pair.first, pair.second);
    std::map<std::vector<std::string>, std::int64_t> next;
    for (const auto& [sym, n] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == pair.first && sym[i + 1] == pair.second) {
          out.push_back(pair.first + pair.second);
          ++i;
        } else {
          out.push_back(sym[i]);
        }
      }
      next[out] += n;
    }
    words = std::move(next);
  }

  // 2. Filled up with letter/digit strings of growing length, each as a word-internal token
  // and as a word end, merged from its prefix and its last character.
  for (std::size_t len = 2; v.merges.size() < wanted; ++len) {
    enumerate_strings(len, [&](const std::string& s) {
      const std::string prefix = s.substr(0, len - 1), last = s.substr(len - 1);
      if (!have.count(prefix)) return true;  // only reachable tokens
      if (!have.count(s)) add_merge(prefix, last);
      if (v.merges.size() < wanted && !have.count(s + kEndOfWord)) add_merge(prefix, last + kEndOfWord);
      return v.merges.size() < wanted;
    });
  }
  v.tokens.push_back("<|startoftext|>");
  v.tokens.push_back("<|endoftext|>");
  return v;
}

void write_clip_tokenizer(const fs::path& dir, std::int64_t vocab_size, std::int64_t model_max_length,
                          const std::string& class_name) {
  const ClipVocabulary v = make_clip_vocabulary(vocab_size);
  fs::create_directories(dir);
  json vocab = json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  write_json(dir / "vocab.json", vocab);
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : v.merges) merges += a + " " + b + "\n";
  atomic_write(dir / "merges.txt", merges);

  const std::string bos = "<|startoftext|>", eos = "<|endoftext|>";
  auto added = [](const std::string& content) {
    return json{{"content", content}, {"lstrip", false}, {"normalized", true}, {"rstrip", false}, {"single_word", false},
                {"special", true}};
  };
  json cfg = {{"tokenizer_class", class_name},
              {"model_max_length", model_max_length},
              {"bos_token", bos},
              {"eos_token", eos},
              {"unk_token", eos},
              {"pad_token", eos},
              {"do_lower_case", true},
              {"errors", "replace"},
              {"add_prefix_space", false},
              {"clean_up_tokenization_spaces", true}};
  cfg["added_tokens_decoder"] = {{std::to_string(vocab_size - 2), added(bos)}, {std::to_string(vocab_size - 1), added(eos)}};
  write_json(dir / "tokenizer_config.json", cfg);
  write_json(dir / "special_tokens_map.json", {{"bos_token", bos}, {"eos_token", eos}, {"unk_token", eos}, {"pad_token", eos}});
}

std::vector<UnigramPiece> make_unigram_pieces(std::int64_t num_pieces) {
  std::vector<UnigramPiece> pieces = {{"<pad>", 0.0f, 3}, {"</s>", 0.0f, 3}, {"<unk>", 0.0f, 2}};
  std::vector<std::string> chars = {kSpace};
  for (char c = 33; c < 127; ++c) chars.emplace_back(1, c);
  const auto fixed = static_cast<std::int64_t>(pieces.size() + chars.size());
  if (num_pieces < fixed)
    throw Error("a T5 SentencePiece model needs at least " + std::to_string(fixed) +
                    " pieces (<pad>, </s>, <unk>, U+2581 and the printable ASCII characters); got " + std::to_string(num_pieces) +
                    " (the text encoder's vocab_size minus the extra ids)",
                ExitCode::bad_input);
  // Single characters score low, so a whole piece always wins over spelling it out; longer
  // pieces score between -2 and -3, earlier (more frequent) ones higher.
  for (const auto& c : chars) pieces.push_back({c, -6.0f, 1});

  std::vector<std::string> multi;
  std::set<std::string> have(chars.begin(), chars.end());
  const auto wanted = static_cast<std::size_t>(num_pieces - fixed);
  auto add = [&](const std::string& s) {
    if (multi.size() < wanted && have.insert(s).second) multi.push_back(s);
    return multi.size() < wanted;
  };
  // Corpus words by frequency (ties alphabetical), as word starts.
  std::map<std::string, std::int64_t> freq;
  for (const auto& w : corpus_words()) ++freq[w];
  std::vector<std::pair<std::int64_t, std::string>> by_freq;
  for (const auto& [w, n] : freq) by_freq.emplace_back(-n, w);
  std::sort(by_freq.begin(), by_freq.end());
  for (const auto& [n, w] : by_freq) add(kSpace + w);
  // Then letter/digit strings of growing length, as word starts and word-internal pieces.
  for (std::size_t len = 1; multi.size() < wanted; ++len)
    enumerate_strings(len, [&](const std::string& s) { return add(kSpace + s) && (len < 2 || add(s)); });

  for (std::size_t i = 0; i < multi.size(); ++i) {
    const float score = -2.0f - static_cast<float>(i) / static_cast<float>(std::max<std::size_t>(1, multi.size()));
    pieces.push_back({multi[i], score, 1});
  }
  return pieces;
}

std::string serialize_unigram_model(const std::vector<UnigramPiece>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    std::string sp;
    put_bytes(sp, 1, p.text);
    put_float(sp, 2, p.score);
    if (p.type != 1) put_int32(sp, 3, p.type);  // NORMAL is the default
    put_bytes(out, 1, sp);
  }
  std::string trainer;
  put_int32(trainer, 3, 1);  // model_type UNIGRAM
  put_int32(trainer, 4, static_cast<std::int32_t>(pieces.size()));
  put_int32(trainer, 35, 0);  // byte_fallback
  put_int32(trainer, 40, 2);  // unk_id
  put_int32(trainer, 41, -1);  // bos_id (T5 has none)
  put_int32(trainer, 42, 1);   // eos_id
  put_int32(trainer, 43, 0);   // pad_id
  put_bytes(trainer, 45, "<unk>");
  put_bytes(trainer, 46, "<s>");
  put_bytes(trainer, 47, "</s>");
  put_bytes(trainer, 48, "<pad>");
  put_bytes(out, 2, trainer);
  std::string normalizer;
  put_bytes(normalizer, 1, "identity");
  put_int32(normalizer, 3, 1);  // add_dummy_prefix
  put_int32(normalizer, 4, 1);  // remove_extra_whitespaces
  put_int32(normalizer, 5, 1);  // escape_whitespaces
  put_bytes(out, 3, normalizer);
  return out;
}

void write_t5_tokenizer(const fs::path& dir, std::int64_t vocab_size, std::int64_t model_max_length,
                        const std::string& class_name, std::int64_t extra_ids) {
  if (extra_ids < 0 || extra_ids >= vocab_size)
    throw Error("T5 tokenizer: extra_ids " + std::to_string(extra_ids) + " does not fit a vocabulary of " + std::to_string(vocab_size),
                ExitCode::bad_input);
  const auto pieces = make_unigram_pieces(vocab_size - extra_ids);
  fs::create_directories(dir);
  atomic_write(dir / "spiece.model", serialize_unigram_model(pieces));
  json extra = json::array();
  for (std::int64_t i = 0; i < extra_ids; ++i) extra.push_back("<extra_id_" + std::to_string(i) + ">");
  const json cfg = {{"tokenizer_class", class_name},
                    {"model_max_length", model_max_length},
                    {"eos_token", "</s>"},
                    {"unk_token", "<unk>"},
                    {"pad_token", "<pad>"},
                    {"extra_ids", extra_ids},
                    {"additional_special_tokens", extra},
                    {"legacy", true},
                    {"add_prefix_space", true},
                    {"clean_up_tokenization_spaces", true}};
  write_json(dir / "tokenizer_config.json", cfg);
  write_json(dir / "special_tokens_map.json",
             {{"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}, {"additional_special_tokens", extra}});
}

}  // namespace yeto::text
