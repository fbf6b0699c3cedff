#include "io/npy.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::io {
namespace {

[[noreturn]] void bad(const std::string& label, const std::string& what) {
  throw Error(label + ": invalid .npy file: " + what, ExitCode::bad_input);
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class Literal {
 public:
  Literal(std::string_view s, const std::string& label) : s_(s), label_(label) {}
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad(label_, std::string("header: expected '") + c + "' at " + std::to_string(i_));
  }
  std::string quoted() {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad(label_, "header: expected a string at " + std::to_string(i_));
    const char q = s_[i_++];
    const std::size_t e = s_.find(q, i_);
    if (e == std::string_view::npos) bad(label_, "header: unterminated string");
    std::string out(s_.substr(i_, e - i_));
    i_ = e + 1;
    return out;
  }
  bool peek_quote() {
    ws();
    return i_ < s_.size() && (s_[i_] == '\'' || s_[i_] == '"');
  }
  std::string word() {
    ws();
    const std::size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  bool done() {
    ws();
    return i_ == s_.size();
  }

 private:
  std::string_view s_;
  const std::string& label_;
  std::size_t i_ = 0;
};

}  // namespace

std::uint64_t NpyArray::numel() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

NpyArray parse_npy(std::string_view b, const std::string& label) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) bad(label, "no \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(b[6]);
  std::size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) bad(label, "truncated header length");
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(b[8 + static_cast<std::size_t>(i)]);
    hstart = 12;
  } else {
    bad(label, "format version " + std::to_string(major) + " is not supported");
  }
  if (hlen > b.size() - hstart) bad(label, "header runs past the end of the file");
  Literal lit(b.substr(hstart, hlen), label);
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false;
  NpyArray a;
  lit.expect('{');
  while (!lit.eat('}')) {
    const std::string key = lit.quoted();
    lit.expect(':');
    if (key == "descr") {
      if (!lit.peek_quote()) bad(label, "structured dtypes are not supported");
      descr = lit.quoted();
      have_descr = true;
    } else if (key == "fortran_order") {
      const std::string w = lit.word();
      if (w != "True" && w != "False") bad(label, "fortran_order is '" + w + "'");
      a.fortran_order = w == "True";
      have_order = true;
    } else if (key == "shape") {
      lit.expect('(');
      while (!lit.eat(')')) {
        const std::string w = lit.word();
        if (w.empty() || w.size() > 18 || !std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; }))
          bad(label, "shape holds '" + w + "'");
        a.shape.push_back(std::stoll(w));
        if (a.shape.size() > 64) bad(label, "more than 64 dimensions");
        lit.eat(',');
      }
      have_shape = true;
    } else {
      bad(label, "unknown header key '" + key + "'");
    }
    lit.eat(',');
  }
  if (!have_descr || !have_order || !have_shape) bad(label, "header lacks descr, fortran_order or shape");
  if (descr.size() < 2) bad(label, "dtype '" + descr + "'");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  struct Row {
    const char* code;
    DType dtype;
  };
  static const Row rows[] = {{"f8", DType::F64}, {"f4", DType::F32}, {"f2", DType::F16}, {"i8", DType::I64},
                             {"i4", DType::I32}, {"i2", DType::I16}, {"i1", DType::I8},  {"u1", DType::U8},
                             {"b1", DType::BOOL}};
  bool found = false;
  for (const auto& r : rows)
    if (code == r.code) {
      a.dtype = r.dtype;
      found = true;
    }
  if (!found || (order != '<' && order != '>' && order != '|' && order != '='))
    bad(label, "dtype '" + descr + "' is not supported (numeric f2/f4/f8, i1/i2/i4/i8, u1 and b1 only" +
                   (code == "O" ? "; object arrays need pickle and are refused" : "") + ")");
  std::uint64_t n = dtype_size(a.dtype);
  for (auto d : a.shape) {
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
      bad(label, "shape is too large");
    n *= static_cast<std::uint64_t>(d);
  }
  const std::size_t data_start = hstart + hlen;
  if (b.size() - data_start != n)
    bad(label, "shape " + shape_str(a.shape) + " x " + dtype_name(a.dtype) + " needs " + std::to_string(n) +
                   " bytes but the file holds " + std::to_string(b.size() - data_start));
  a.data.resize(n);
  if (n) std::memcpy(a.data.data(), b.data() + data_start, n);
  const std::size_t w = dtype_size(a.dtype);
  if (order == '>' && w > 1)
    for (std::size_t i = 0; i < n; i += w) std::reverse(a.data.begin() + static_cast<std::ptrdiff_t>(i),
                                                        a.data.begin() + static_cast<std::ptrdiff_t>(i + w));
  return a;
}

NpyArray read_npy(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error("cannot open '" + path.string() + "': no such file", ExitCode::not_found);
  return parse_npy(read_file(path), path.string());
}

}  // namespace yeto::io
