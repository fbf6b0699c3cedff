// Reading the transformers tokenizer files of a Diffusers component folder:
// tokenizer_config.json, special_tokens_map.json, added_tokens.json.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.hpp"

namespace yeto::text {

struct HfTokenizerFiles {
  std::optional<std::string> tokenizer_class;
  std::optional<std::int64_t> model_max_length;
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token;
  std::vector<std::string> additional_special_tokens;
  std::vector<AddedToken> added_tokens;  // added_tokens_decoder, then added_tokens.json
  std::optional<std::int64_t> extra_ids;
  std::optional<bool> legacy;
  std::optional<bool> add_prefix_space;
  std::optional<bool> do_lower_case;
};

// Missing files are skipped; a file that is present but malformed throws yeto::Error
// (ExitCode::bad_input) naming it.
HfTokenizerFiles read_hf_tokenizer_files(const std::filesystem::path& dir);

// Whole-file readers: ExitCode::not_found naming the file (and `what` it should be) when it is
// missing, ExitCode::bad_input when it cannot be read or parsed.
std::string read_text_file(const std::filesystem::path& path, const std::string& what);
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& what);

}  // namespace yeto::text
