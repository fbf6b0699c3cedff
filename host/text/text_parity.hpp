// The `tokenizer` parity kind: case directories whose case.json `kind` is "tokenizer"
// (class CLIPTokenizer / CLIPTokenizerFast / T5Tokenizer / T5TokenizerFast). The handler
// tokenizes case.json `strings` with each call's scalar_args (padding, max_length,
// truncation, add_special_tokens, pad_token_id) and compares every output exactly.
// Torch-side (library yeto_text_parity); the tokenizers themselves are in yeto_text.
#pragma once

namespace yeto::text {

void register_text_parity_kinds();

}  // namespace yeto::text
