// Tokenizers as Diffusers components: loading from a tokenizer folder (tokenizer/,
// tokenizer_2/, ...) and registration under the transformers class names.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "io/component_registry.hpp"
#include "text/tokenizer.hpp"

namespace yeto::text {

// CLIPTokenizer, CLIPTokenizerFast, T5Tokenizer, T5TokenizerFast (the fast classes run the
// same algorithm: their files are the slow tokenizer's files).
bool is_tokenizer_class(const std::string& class_name);

// Loads the tokenizer of `class_name` from a component folder. Throws yeto::Error naming the
// folder/file: ExitCode::not_found for missing files, bad_input for malformed ones or an
// unknown class.
std::shared_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir, const std::string& class_name);

class TokenizerComponent final : public io::Component {
 public:
  explicit TokenizerComponent(std::shared_ptr<Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::string class_name() const override { return tokenizer_->class_name(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<Tokenizer> shared() const { return tokenizer_; }

 private:
  std::shared_ptr<Tokenizer> tokenizer_;
};

// Registers the four tokenizer classes with kind "tokenizer".
void register_tokenizer_components(io::ComponentRegistry& registry);

}  // namespace yeto::text
