#include "text/hf_config.hpp"

#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace yeto::text {

std::string read_text_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(path.string() + ": " + what + " file not found", ExitCode::not_found);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the " + what + " file", ExitCode::bad_input);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": cannot read the " + what + " file", ExitCode::bad_input);
  return ss.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& what) {
  const std::string text = read_text_file(path, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path.string() + ": the " + what + " file is not valid JSON (" + e.what() + ")", ExitCode::bad_input);
  }
}

namespace {

// A token given as "text" or {"content": "text", ...}.
std::optional<std::string> token_string(const nlohmann::json& v, const std::filesystem::path& file, const char* key) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw Error(file.string() + ": \"" + key + "\" must be a string or an object with \"content\"", ExitCode::bad_input);
}

bool flag(const nlohmann::json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  return (it != obj.end() && it->is_boolean()) ? it->get<bool>() : fallback;
}

void read_special_tokens(const nlohmann::json& j, const std::filesystem::path& file, HfTokenizerFiles& out) {
  const std::pair<const char*, std::optional<std::string>*> keys[] = {
      {"bos_token", &out.bos_token}, {"eos_token", &out.eos_token}, {"unk_token", &out.unk_token}, {"pad_token", &out.pad_token}};
  for (const auto& [key, slot] : keys) {
    if (j.contains(key)) {
      auto v = token_string(j[key], file, key);
      if (v) *slot = v;
    }
  }
  if (j.contains("additional_special_tokens") && j["additional_special_tokens"].is_array()) {
    out.additional_special_tokens.clear();
    for (const auto& t : j["additional_special_tokens"]) {
      auto v = token_string(t, file, "additional_special_tokens");
      if (v) out.additional_special_tokens.push_back(*v);
    }
  }
}

}  // namespace

HfTokenizerFiles read_hf_tokenizer_files(const std::filesystem::path& dir) {
  HfTokenizerFiles out;
  std::error_code ec;
  const auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path, ec)) {
    const auto j = read_json_file(config_path, "tokenizer config");
    if (!j.is_object()) throw Error(config_path.string() + ": must be a JSON object", ExitCode::bad_input);
    if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string()) out.tokenizer_class = j["tokenizer_class"].get<std::string>();
    if (j.contains("model_max_length") && j["model_max_length"].is_number()) {
      const double v = j["model_max_length"].get<double>();
      if (v <= 0) throw Error(config_path.string() + ": \"model_max_length\" must be positive", ExitCode::bad_input);
      out.model_max_length = v >= 9.0e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(v);
    }
    if (j.contains("extra_ids") && j["extra_ids"].is_number_integer()) out.extra_ids = j["extra_ids"].get<std::int64_t>();
    if (j.contains("legacy") && j["legacy"].is_boolean()) out.legacy = j["legacy"].get<bool>();
    if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean()) out.add_prefix_space = j["add_prefix_space"].get<bool>();
    if (j.contains("do_lower_case") && j["do_lower_case"].is_boolean()) out.do_lower_case = j["do_lower_case"].get<bool>();
    read_special_tokens(j, config_path, out);
    if (j.contains("added_tokens_decoder")) {
      const auto& dec = j["added_tokens_decoder"];
      if (!dec.is_object()) throw Error(config_path.string() + ": \"added_tokens_decoder\" must be an object", ExitCode::bad_input);
      for (const auto& [key, tok] : dec.items()) {
        std::int64_t id = -1;
        try {
          std::size_t used = 0;
          id = std::stoll(key, &used);
          if (used != key.size() || id < 0) id = -1;
        } catch (const std::exception&) {
          id = -1;
        }
        if (id < 0 || !tok.is_object() || !tok.contains("content") || !tok["content"].is_string()) {
          throw Error(config_path.string() + ": added_tokens_decoder entry \"" + key +
                          "\" must map a non-negative id to {\"content\": ...}",
                      ExitCode::bad_input);
        }
        out.added_tokens.push_back({tok["content"].get<std::string>(), id, flag(tok, "lstrip", false),
                                    flag(tok, "rstrip", false), flag(tok, "special", true)});
      }
    }
  }
  const auto map_path = dir / "special_tokens_map.json";
  if (std::filesystem::exists(map_path, ec)) {
    const auto j = read_json_file(map_path, "special tokens map");
    if (!j.is_object()) throw Error(map_path.string() + ": must be a JSON object", ExitCode::bad_input);
    read_special_tokens(j, map_path, out);
  }
  const auto added_path = dir / "added_tokens.json";
  if (std::filesystem::exists(added_path, ec)) {
    const auto j = read_json_file(added_path, "added tokens");
    if (!j.is_object()) throw Error(added_path.string() + ": must be a JSON object {token: id}", ExitCode::bad_input);
    for (const auto& [content, id] : j.items()) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0) {
        throw Error(added_path.string() + ": the id of \"" + content + "\" must be a non-negative integer", ExitCode::bad_input);
      }
      bool known = false;
      for (const auto& a : out.added_tokens) known = known || a.content == content;
      if (!known) out.added_tokens.push_back({content, id.get<std::int64_t>(), false, false, true});
    }
  }
  return out;
}

}  // namespace yeto::text
