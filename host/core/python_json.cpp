#include "core/python_json.hpp"

#include <limits>

#include "core/error.hpp"

namespace yeto {
namespace {

// Placeholders that cannot collide with a real string value of a scheduler config.
const char* const kPosInf = "__yeto_python_json:+Infinity__";
const char* const kNegInf = "__yeto_python_json:-Infinity__";
const char* const kNaN = "__yeto_python_json:NaN__";

void restore_nonfinite(nlohmann::json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == kPosInf) j = std::numeric_limits<double>::infinity();
    else if (s == kNegInf) j = -std::numeric_limits<double>::infinity();
    else if (s == kNaN) j = std::numeric_limits<double>::quiet_NaN();
  } else if (j.is_array() || j.is_object()) {
    for (auto& x : j) restore_nonfinite(x);
  }
}

}  // namespace

nlohmann::json parse_python_json(const std::string& text, const std::string& label) {
  std::string out;
  out.reserve(text.size() + 32);
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    auto word = [&](const char* w) { return text.compare(i, std::char_traits<char>::length(w), w) == 0; };
    if (word("-Infinity")) {
      out += std::string("\"") + kNegInf + "\"";
      i += 8;
    } else if (word("Infinity")) {
      out += std::string("\"") + kPosInf + "\"";
      i += 7;
    } else if (word("NaN")) {
      out += std::string("\"") + kNaN + "\"";
      i += 2;
    } else {
      out += c;
    }
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(out);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(label + ": invalid JSON: " + e.what(), ExitCode::bad_input);
  }
  restore_nonfinite(j);
  if (!j.is_object()) throw Error(label + ": expected a JSON object", ExitCode::bad_input);
  return j;
}

}  // namespace yeto
