#include "hunyuan3d_release.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <stdexcept>
#include <vector>

namespace yeto::hunyuan3d {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Line {
  int no = 0;
  std::size_t indent = 0;
  std::string text;  // without indentation, comment and trailing blanks
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

class YamlReader {
 public:
  YamlReader(const std::string& text, std::string file) : file_(std::move(file)) {
    int no = 0;
    std::size_t start = 0;
    while (start <= text.size()) {
      auto end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string raw = text.substr(start, end - start);
      start = end + 1;
      ++no;
      std::size_t indent = 0;
      while (indent < raw.size() && raw[indent] == ' ') ++indent;
      if (indent < raw.size() && raw[indent] == '\t') fail(no, "a tab in the indentation (YAML indents with spaces)");
      std::string body = trim(strip_comment(raw.substr(indent), no));
      if (body.empty() || (indent == 0 && (body == "---" || body == "..."))) continue;
      lines_.push_back({no, indent, body});
      if (end == text.size()) break;
    }
  }

  json document() {
    if (lines_.empty()) return nullptr;
    if (lines_[0].indent != 0) fail(lines_[0].no, "the document does not start at column 1");
    json v = block(0);
    if (pos_ < lines_.size()) fail(lines_[pos_].no, "unexpected text after the document: '" + lines_[pos_].text + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw std::invalid_argument(file_ + ":" + std::to_string(line) + ": " + what);
  }

  // The text before a comment: '#' at the start or after a blank, outside quotes.
  std::string strip_comment(const std::string& s, int no) const {
    char quote = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char ch = s[i];
      if (quote) {
        if (ch == '\\' && quote == '"') ++i;
        else if (ch == quote) quote = 0;
      } else if ((ch == '"' || ch == '\'') && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '[' || s[i - 1] == ',')) {
        quote = ch;
      } else if (ch == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
        return s.substr(0, i);
      }
    }
    if (quote) fail(no, "an unterminated quoted string (multi-line scalars are not read)");
    return s;
  }

  static bool is_item(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  // The ':' that ends a mapping key (outside quotes, followed by a blank or the end), or npos.
  static std::size_t key_colon(const std::string& t) {
    char quote = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const char ch = t[i];
      if (quote) {
        if (ch == '\\' && quote == '"') ++i;
        else if (ch == quote) quote = 0;
      } else if (ch == '"' || ch == '\'') {
        if (i == 0) quote = ch;
      } else if (ch == ':' && (i + 1 == t.size() || t[i + 1] == ' ')) {
        return i;
      }
    }
    return std::string::npos;
  }

  json block(std::size_t indent) { return is_item(lines_[pos_].text) ? sequence(indent) : mapping(indent); }

  json mapping(std::size_t indent) {
    json m = json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !is_item(lines_[pos_].text)) {
      const Line& l = lines_[pos_];
      const auto colon = key_colon(l.text);
      if (colon == std::string::npos) fail(l.no, "expected 'key: value', got '" + l.text + "'");
      std::string key = trim(l.text.substr(0, colon));
      if (!key.empty() && (key[0] == '"' || key[0] == '\'')) key = quoted(key, l.no);
      if (key.empty()) fail(l.no, "an empty mapping key");
      if (m.contains(key)) fail(l.no, "the key '" + key + "' appears twice in one mapping");
      const std::string rest = trim(l.text.substr(colon + 1));
      ++pos_;
      m[key] = value(rest, indent, l.no, /*in_mapping=*/true);
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent)
      fail(lines_[pos_].no, "unexpected indentation: '" + lines_[pos_].text + "'");
    return m;
  }

  json sequence(std::size_t indent) {
    json a = json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && is_item(lines_[pos_].text)) {
      const Line& l = lines_[pos_];
      const std::string rest = trim(l.text.substr(1));
      if (key_colon(rest) != std::string::npos)
        fail(l.no, "a mapping inside a block sequence is not read (only sequences of scalars)");
      ++pos_;
      a.push_back(value(rest, indent, l.no, /*in_mapping=*/false));
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent)
      fail(lines_[pos_].no, "unexpected indentation: '" + lines_[pos_].text + "'");
    return a;
  }

  json value(std::string rest, std::size_t indent, int no, bool in_mapping) {
    std::string anchor;
    if (!rest.empty() && rest[0] == '&') {
      const auto sp = rest.find(' ');
      anchor = rest.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
      if (anchor.empty()) fail(no, "an anchor without a name");
      rest = sp == std::string::npos ? "" : trim(rest.substr(sp));
    }
    json v;
    if (rest.empty()) {
      if (pos_ < lines_.size() && lines_[pos_].indent > indent) v = block(lines_[pos_].indent);
      else if (in_mapping && pos_ < lines_.size() && lines_[pos_].indent == indent && is_item(lines_[pos_].text))
        v = sequence(indent);
      else v = nullptr;
    } else if (rest[0] == '*') {
      const auto it = anchors_.find(rest.substr(1));
      if (it == anchors_.end()) fail(no, "the alias '" + rest + "' names no anchor defined before it");
      v = it->second;
    } else if (rest[0] == '[') {
      if (rest.back() != ']') fail(no, "a flow sequence must close on its line: '" + rest + "'");
      v = json::array();
      const std::string inner = trim(rest.substr(1, rest.size() - 2));
      if (!inner.empty()) {
        if (inner.find_first_of("[]{}") != std::string::npos) fail(no, "nested flow collections are not read");
        std::size_t s = 0;
        while (s <= inner.size()) {
          auto e = inner.find(',', s);
          if (e == std::string::npos) e = inner.size();
          const std::string item = trim(inner.substr(s, e - s));
          if (item.empty()) fail(no, "an empty item in '" + rest + "'");
          v.push_back(scalar(item, no));
          s = e + 1;
        }
      }
    } else if (rest[0] == '{' || rest[0] == '|' || rest[0] == '>' || rest[0] == '!' || rest[0] == '%' ||
               rest[0] == '@' || rest[0] == '`') {
      fail(no, "'" + rest + "': flow mappings, block scalars, tags and directives are not read");
    } else {
      v = scalar(rest, no);
    }
    if (!anchor.empty()) anchors_[anchor] = v;
    return v;
  }

  std::string quoted(const std::string& s, int no) const {
    const char q = s[0];
    if (s.size() < 2 || s.back() != q) fail(no, "a quoted string must close on its line: " + s);
    const std::string body = s.substr(1, s.size() - 2);
    std::string out;
    for (std::size_t i = 0; i < body.size(); ++i) {
      if (q == '\'' && body[i] == '\'' && i + 1 < body.size() && body[i + 1] == '\'') {
        out += '\'';
        ++i;
      } else if (q == '"' && body[i] == '\\' && i + 1 < body.size()) {
        const char e = body[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        out += body[i];
      }
    }
    return out;
  }

  // PyYAML's (YAML 1.1) resolution of a plain scalar.
  json scalar(const std::string& s, int no) const {
    if (s[0] == '"' || s[0] == '\'') return quoted(s, no);
    static const std::regex null_re("~|null|Null|NULL");
    static const std::regex true_re("yes|Yes|YES|true|True|TRUE|on|On|ON");
    static const std::regex false_re("no|No|NO|false|False|FALSE|off|Off|OFF");
    static const std::regex int_re("[-+]?(0|[1-9][0-9_]*)");
    static const std::regex float_re(R"([-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?)");
    static const std::regex inf_re(R"(([-+]?)\.(inf|Inf|INF))");
    static const std::regex nan_re(R"(\.(nan|NaN|NAN))");
    std::smatch m;
    if (std::regex_match(s, null_re)) return nullptr;
    if (std::regex_match(s, true_re)) return true;
    if (std::regex_match(s, false_re)) return false;
    std::string digits;
    for (const char ch : s)
      if (ch != '_') digits += ch;
    try {
      if (std::regex_match(s, int_re)) return std::stoll(digits);
      if (std::regex_match(s, float_re) && s.find_first_of("0123456789") != std::string::npos)
        return std::stod(digits);
    } catch (const std::out_of_range&) {
      fail(no, "the number '" + s + "' is out of range");
    }
    if (std::regex_match(s, m, inf_re))
      return m[1] == "-" ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    if (std::regex_match(s, nan_re)) return std::numeric_limits<double>::quiet_NaN();
    return s;
  }

  std::string file_;
  std::vector<Line> lines_;
  std::size_t pos_ = 0;
  std::map<std::string, json> anchors_;
};

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw std::invalid_argument(file + ": " + what);
}

const json& section(const json& yaml, const std::string& file, const std::string& name, const std::string& what) {
  if (!yaml.contains(name) || !yaml.at(name).is_object())
    bad(file, "no '" + name + "' section (a mapping with 'target' and 'params': " + what + ")");
  return yaml.at(name);
}

// The section's target class: the last part of its module path, which must be one of `classes`.
void check_target(const json& sec, const std::string& file, const std::string& name,
                  const std::vector<std::string>& classes) {
  if (!sec.contains("target") || !sec.at("target").is_string())
    bad(file, "'" + name + ".target' is missing (the class path, e.g. hy3dshape...." + classes.front() + ")");
  const std::string target = sec.at("target").get<std::string>();
  const auto dot = target.rfind('.');
  const std::string cls = dot == std::string::npos ? target : target.substr(dot + 1);
  for (const auto& c : classes)
    if (c == cls) return;
  std::string list;
  for (const auto& c : classes) list += (list.empty() ? "" : ", ") + c;
  bad(file, "'" + name + ".target' is '" + target + "'; the hunyuan3d plugin serves " + list);
}

const json& mapping_at(const json& parent, const std::string& file, const std::string& path, const std::string& key) {
  if (!parent.contains(key) || !parent.at(key).is_object())
    bad(file, "'" + path + "." + key + "' is missing or not a mapping");
  return parent.at(key);
}

void require_keys(const json& params, const std::string& file, const std::string& path,
                  const std::vector<const char*>& keys) {
  for (const char* k : keys)
    if (!params.contains(k) || params.at(k).is_null())
      bad(file, "'" + path + "." + k + "' is missing (the checkpoint's shapes depend on it)");
}

}  // namespace

json read_release_yaml(const std::string& text, const std::string& file) {
  return YamlReader(text, file).document();
}

fs::path release_folder(const fs::path& model_dir) {
  std::error_code ec;
  if (fs::is_regular_file(model_dir / "config.yaml", ec)) return model_dir;
  if (fs::is_regular_file(model_dir / "hunyuan3d-dit-v2-1" / "config.yaml", ec)) return model_dir / "hunyuan3d-dit-v2-1";
  return {};
}

fs::path release_checkpoint(const fs::path& folder) {
  std::error_code ec;
  const char* const names[] = {"model.fp16.safetensors", "model.safetensors", "model.fp16.ckpt", "model.ckpt"};
  for (const char* n : names)
    if (fs::is_regular_file(folder / n, ec)) return folder / n;
  bad(folder.string(), "no checkpoint next to config.yaml (tried model.fp16.safetensors, model.safetensors, "
                       "model.fp16.ckpt, model.ckpt)");
}

ReleaseConfigs release_configs(const json& yaml, const std::string& file) {
  if (!yaml.is_object()) bad(file, "expected a mapping of sections (model, vae, conditioner, scheduler)");
  ReleaseConfigs c;

  const json& model = section(yaml, file, "model", "the HunYuanDiTPlain denoiser");
  check_target(model, file, "model", {"HunYuanDiTPlain"});
  c.model = mapping_at(model, file, "model", "params");
  require_keys(c.model, file, "model.params", {"input_size", "in_channels", "hidden_size", "context_dim", "depth", "num_heads"});
  c.model["_class_name"] = "HunYuanDiTPlain";

  const json& vae = section(yaml, file, "vae", "the ShapeVAE");
  check_target(vae, file, "vae", {"ShapeVAE"});
  c.vae = mapping_at(vae, file, "vae", "params");
  require_keys(c.vae, file, "vae.params", {"num_latents", "embed_dim", "width", "heads", "num_decoder_layers"});
  c.vae["_class_name"] = "ShapeVAE";

  const json& cond = section(yaml, file, "conditioner", "the image conditioner");
  check_target(cond, file, "conditioner", {"SingleImageEncoder"});
  const json& params = mapping_at(cond, file, "conditioner", "params");
  const json& enc = mapping_at(params, file, "conditioner.params", "main_image_encoder");
  const std::string where = "conditioner.params.main_image_encoder";
  if (!enc.contains("type") || !enc.at("type").is_string())
    bad(file, "'" + where + ".type' is missing (DinoImageEncoder)");
  if (enc.at("type") != "DinoImageEncoder")
    bad(file, "'" + where + ".type' is '" + enc.at("type").get<std::string>() +
                  "'; the hunyuan3d plugin serves DinoImageEncoder");
  const json& kwargs = mapping_at(enc, file, where, "kwargs");
  if (!kwargs.contains("config") || !kwargs.at("config").is_object())
    bad(file, "'" + where + ".kwargs.config' is missing: the Dinov2Config must be given inline (an encoder "
                            "loaded by 'version' from transformers is not read)");
  c.conditioner = json::object();
  for (const char* k : {"config", "image_size", "use_cls_token"})
    if (kwargs.contains(k)) c.conditioner[k] = kwargs.at(k);
  c.conditioner["_class_name"] = "DinoImageEncoder";

  const json& sched = section(yaml, file, "scheduler", "the flow-matching scheduler");
  check_target(sched, file, "scheduler", {"FlowMatchEulerDiscreteScheduler"});
  c.scheduler = sched.contains("params") && !sched.at("params").is_null() ? mapping_at(sched, file, "scheduler", "params")
                                                                           : json::object();
  c.scheduler["_class_name"] = "FlowMatchEulerDiscreteScheduler";
  return c;
}

json release_plan(const ReleaseConfigs& c, const fs::path& checkpoint) {
  const std::string w = checkpoint.string();
  json comps = json::object();
  comps["model"] = {{"class", "HunYuanDiTPlain"}, {"config", c.model}, {"weights", w}, {"weights_prefix", "model."}};
  comps["vae"] = {{"class", "ShapeVAE"},
                  {"config", c.vae},
                  {"weights", w},
                  {"weights_prefix", "vae."},
                  {"ignore_weights", json::array({"encoder.", "pre_kl."})}};
  comps["conditioner"] = {{"class", "DinoImageEncoder"},
                          {"config", c.conditioner},
                          {"weights", w},
                          {"weights_prefix", "conditioner.main_image_encoder."}};
  comps["scheduler"] = {{"class", "hy3dshape.schedulers.FlowMatchEulerDiscreteScheduler"}, {"config", c.scheduler}};
  return {{"components", comps}, {"family", "hunyuan3d"}};
}

}  // namespace yeto::hunyuan3d
