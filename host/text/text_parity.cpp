#include "text/text_parity.hpp"

#include <algorithm>
#include <map>

#include <torch/torch.h>

#include "core/error.hpp"
#include "parity/parity.hpp"
#include "text/clip_tokenizer.hpp"
#include "text/t5_tokenizer.hpp"
#include "text/tokenizer_components.hpp"

namespace yeto::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string case_label(const parity::CaseContext& ctx) { return (ctx.dir() / "case.json").string(); }

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : fallback;
}

// The tokenizer a case describes: a tokenizer folder (`tokenizer_files.dir`), or the files
// named in `tokenizer_files` (relative to the case directory) with case.json `tokenizer`
// giving special tokens and lengths.
std::shared_ptr<Tokenizer> case_tokenizer(const parity::CaseContext& ctx) {
  const json& cj = ctx.case_json();
  const std::string cls = ctx.class_name();
  const json files = cj.value("tokenizer_files", json::object());
  const json spec = cj.value("tokenizer", json::object());
  if (files.contains("dir") && files["dir"].is_string()) return load_tokenizer(ctx.dir() / files["dir"].get<std::string>(), cls);
  if (cls == "CLIPTokenizer" || cls == "CLIPTokenizerFast") {
    if (!files.contains("vocab_file") || !files.contains("merges_file")) {
      throw Error(case_label(ctx) + ": tokenizer_files needs vocab_file and merges_file (or dir)", ExitCode::bad_input);
    }
    ClipTokenizerConfig config;
    config.class_name = cls;
    config.bos_token = str_or(spec, "bos_token", config.bos_token);
    config.eos_token = str_or(spec, "eos_token", config.eos_token);
    config.unk_token = str_or(spec, "unk_token", config.unk_token);
    config.pad_token = str_or(spec, "pad_token", config.pad_token);
    if (spec.contains("model_max_length") && spec["model_max_length"].is_number_integer()) {
      config.model_max_length = spec["model_max_length"].get<std::int64_t>();
    }
    return std::shared_ptr<Tokenizer>(ClipTokenizer::from_files(ctx.dir() / files["vocab_file"].get<std::string>(),
                                                                ctx.dir() / files["merges_file"].get<std::string>(), config));
  }
  if (!files.contains("model_file")) throw Error(case_label(ctx) + ": tokenizer_files needs model_file (or dir)", ExitCode::bad_input);
  T5TokenizerConfig config;
  config.class_name = cls;
  // A bare spiece.model defines no <extra_id_N> tokens unless the case says so.
  config.extra_ids = spec.value("extra_ids", std::int64_t{0});
  config.legacy = spec.value("legacy", true);
  config.eos_token = str_or(spec, "eos_token", config.eos_token);
  config.pad_token = str_or(spec, "pad_token", config.pad_token);
  config.unk_token = str_or(spec, "unk_token", config.unk_token);
  if (spec.contains("model_max_length") && spec["model_max_length"].is_number_integer()) {
    config.model_max_length = spec["model_max_length"].get<std::int64_t>();
  }
  return std::shared_ptr<Tokenizer>(T5Tokenizer::from_model(ctx.dir() / files["model_file"].get<std::string>(), config));
}

EncodeOptions call_options(const json& args, const std::string& label) {
  EncodeOptions o;
  const std::string padding = args.value("padding", std::string("max_length"));
  if (padding == "max_length") {
    o.padding = Padding::max_length;
  } else if (padding == "longest") {
    o.padding = Padding::longest;
  } else if (padding == "do_not_pad" || padding == "none") {
    o.padding = Padding::none;
  } else {
    throw Error(label + ": unsupported padding \"" + padding + "\"", ExitCode::bad_input);
  }
  if (args.contains("max_length") && args["max_length"].is_number_integer()) o.max_length = args["max_length"].get<std::int64_t>();
  o.truncation = args.value("truncation", true);
  o.add_special_tokens = args.value("add_special_tokens", true);
  if (args.contains("pad_token_id") && args["pad_token_id"].is_number_integer()) o.pad_token_id = args["pad_token_id"].get<std::int64_t>();
  return o;
}

at::Tensor rows_tensor(const std::vector<std::vector<std::int64_t>>& rows) {
  const std::int64_t n = static_cast<std::int64_t>(rows.size());
  const std::int64_t width = rows.empty() ? 0 : static_cast<std::int64_t>(rows[0].size());
  auto t = torch::zeros({n, width}, torch::kInt64);
  auto acc = t.accessor<std::int64_t, 2>();
  for (std::int64_t r = 0; r < n; ++r) {
    if (static_cast<std::int64_t>(rows[static_cast<std::size_t>(r)].size()) != width) {
      throw Error("tokenizer parity: rows of different lengths (use padding=\"max_length\" or \"longest\")", ExitCode::bad_input);
    }
    for (std::int64_t c = 0; c < width; ++c) acc[r][c] = rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)];
  }
  return t;
}

// What a call output is, from its `from` field: the ids, the mask, or the position of the
// appended end token (the last real token of each row).
enum class OutputKind { ids, mask, last_real_position };

OutputKind output_kind(const std::string& key, const json& spec, const std::string& label) {
  const std::string from = str_or(spec, "from", key);
  if (from == "input_ids") return OutputKind::ids;
  if (from == "attention_mask") return OutputKind::mask;
  if (from.rfind("position of the appended", 0) == 0) return OutputKind::last_real_position;
  throw Error(label + ": output \"" + key + "\" comes from \"" + from + "\", which the tokenizer kind does not produce",
              ExitCode::bad_input);
}

void run_tokenizer_case(const parity::CaseContext& ctx, parity::CaseResult& result) {
  const std::string cls = ctx.class_name();
  if (!is_tokenizer_class(cls)) {
    parity::mark_unsupported(result, parity::unsupported_class_message(cls));
    return;
  }
  const std::string label = case_label(ctx);
  const json& cj = ctx.case_json();
  if (!cj.contains("strings") || !cj["strings"].is_array()) throw Error(label + ": a tokenizer case needs \"strings\"", ExitCode::bad_input);
  std::vector<std::string> texts;
  for (const auto& s : cj["strings"]) {
    if (!s.contains("text") || !s["text"].is_string()) throw Error(label + ": every entry of \"strings\" needs \"text\"", ExitCode::bad_input);
    texts.push_back(s["text"].get<std::string>());
  }
  const auto tok = case_tokenizer(ctx);
  const bool clip = cls.rfind("CLIP", 0) == 0;
  if (!cj.contains("calls") || !cj["calls"].is_array() || cj["calls"].empty()) throw Error(label + ": no calls", ExitCode::bad_input);

  for (const auto& call : cj["calls"]) {
    const std::string call_name = str_or(call, "name", "call");
    const EncodeOptions opts = call_options(call.value("scalar_args", json::object()), label + " call " + call_name);
    const auto rows = tok->encode_batch(texts, opts);
    std::vector<std::vector<std::int64_t>> ids, masks;
    std::vector<std::int64_t> last;
    for (const auto& r : rows) {
      ids.push_back(r.input_ids);
      masks.push_back(r.attention_mask);
      std::int64_t real = 0;
      for (auto m : r.attention_mask) real += m;
      last.push_back(real - 1);
    }
    // Rows the fixture records differently for transformers (CLIP: transformers applies ftfy
    // but not html.unescape): their expected row is rebuilt from `ids_without_html_unescape`
    // with this call's options, the way transformers' CLIPTokenizer builds it.
    std::map<std::size_t, Encoding> hf_rows;
    if (clip) {
      for (std::size_t i = 0; i < cj["strings"].size(); ++i) {
        const auto& s = cj["strings"][i];
        if (!s.contains("ids_without_html_unescape")) continue;
        std::vector<std::int64_t> hf = s["ids_without_html_unescape"].get<std::vector<std::int64_t>>();
        const std::int64_t max_length = opts.max_length.value_or(tok->model_max_length());
        if (opts.truncation && static_cast<std::int64_t>(hf.size()) > max_length - tok->num_special_tokens()) {
          hf.resize(static_cast<std::size_t>(std::max<std::int64_t>(0, max_length - tok->num_special_tokens())));
        }
        if (opts.add_special_tokens) hf = tok->with_special_tokens(hf);
        Encoding e;
        e.attention_mask.assign(hf.size(), 1);
        e.input_ids = hf;
        const std::size_t width = ids[i].size();
        e.input_ids.resize(width, opts.pad_token_id.value_or(tok->pad_token_id()));
        e.attention_mask.resize(width, 0);
        hf_rows[i] = e;
      }
    }
    const json outputs = call.value("outputs", json::object());
    for (const auto& [key, spec] : outputs.items()) {
      const OutputKind kind = output_kind(key, spec, label);
      at::Tensor actual;
      if (kind == OutputKind::ids) {
        actual = rows_tensor(ids);
      } else if (kind == OutputKind::mask) {
        actual = rows_tensor(masks);
      } else {
        actual = torch::tensor(last, torch::kInt64);
      }
      const std::string name = key + " [" + call_name + "]";
      if (hf_rows.empty() || !ctx.has_expected(key)) {
        parity::Comparison c;
        try {
          c = parity::compare_tensors(name, actual, ctx.expected(key), ctx.tolerance(key));
        } catch (const Error& e) {
          c.name = name;
          c.note = e.what();
        }
        result.comparisons.push_back(c);
        continue;
      }
      at::Tensor expected = ctx.expected(key).clone();
      for (const auto& [row, e] : hf_rows) {
        const auto r = static_cast<std::int64_t>(row);
        if (kind == OutputKind::last_real_position) {
          expected[r] = static_cast<std::int64_t>(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1)) - 1;
        } else if (expected.dim() == 2 && expected.size(1) == static_cast<std::int64_t>(e.input_ids.size())) {
          const auto& v = kind == OutputKind::ids ? e.input_ids : e.attention_mask;
          expected[r] = torch::tensor(v, torch::kInt64);
        }
      }
      parity::Comparison c = parity::compare_tensors(name, actual, expected, ctx.tolerance(key));
      c.note += (c.note.empty() ? "" : "; ") + std::to_string(hf_rows.size()) +
                " row(s) follow transformers (ids_without_html_unescape)";
      result.comparisons.push_back(c);
    }
  }
}

}  // namespace

void register_text_parity_kinds() { parity::register_kind("tokenizer", run_tokenizer_case); }

}  // namespace yeto::text
