#include "text/tokenizer_components.hpp"

#include "core/error.hpp"
#include "text/clip_tokenizer.hpp"
#include "text/t5_tokenizer.hpp"

namespace yeto::text {

bool is_tokenizer_class(const std::string& c) {
  return c == "CLIPTokenizer" || c == "CLIPTokenizerFast" || c == "T5Tokenizer" || c == "T5TokenizerFast";
}

std::shared_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir, const std::string& class_name) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw Error(dir.string() + ": tokenizer folder not found", ExitCode::not_found);
  }
  if (class_name == "CLIPTokenizer" || class_name == "CLIPTokenizerFast") {
    return std::shared_ptr<Tokenizer>(ClipTokenizer::from_folder(dir, class_name));
  }
  if (class_name == "T5Tokenizer" || class_name == "T5TokenizerFast") {
    return std::shared_ptr<Tokenizer>(T5Tokenizer::from_folder(dir, class_name));
  }
  throw Error(dir.string() + ": no tokenizer implementation for class " + class_name +
                  " (known: CLIPTokenizer, CLIPTokenizerFast, T5Tokenizer, T5TokenizerFast)",
              ExitCode::bad_input);
}

void register_tokenizer_components(io::ComponentRegistry& registry) {
  for (const char* name : {"CLIPTokenizer", "CLIPTokenizerFast", "T5Tokenizer", "T5TokenizerFast"}) {
    const std::string cls = name;
    registry.add(cls, "tokenizer", [cls](const io::ComponentSource& source) -> std::shared_ptr<io::Component> {
      return std::make_shared<TokenizerComponent>(load_tokenizer(source.dir, cls));
    });
  }
}

}  // namespace yeto::text
