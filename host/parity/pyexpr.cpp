#include "parity/pyexpr.hpp"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "core/error.hpp"

namespace yeto::parity::py {
namespace {

enum class Tok { number, string, name, fresh, op, arrow, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;
  std::size_t pos = 0;
};

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

[[noreturn]] void fail(const std::string& src, std::size_t pos, const std::string& what) {
  throw Error("cannot parse the recorded call `" + src + "` at column " + std::to_string(pos + 1) + ": " + what,
              ExitCode::bad_input);
}

std::vector<Token> tokenize(const std::string& src) {
  std::vector<Token> out;
  std::size_t i = 0;
  const std::size_t n = src.size();
  while (i < n) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '#') break;  // a comment runs to the end of the snippet
    Token t;
    t.pos = i;
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(src[i + 1])))) {
      std::size_t j = i;
      while (j < n && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '.')) ++j;
      if (j < n && (src[j] == 'e' || src[j] == 'E')) {
        ++j;
        if (j < n && (src[j] == '+' || src[j] == '-')) ++j;
        while (j < n && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      t.kind = Tok::number;
      t.text = src.substr(i, j - i);
      i = j;
    } else if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < n && src[j] != c) ++j;
      if (j >= n) fail(src, i, "unterminated string");
      t.kind = Tok::string;
      t.text = src.substr(i + 1, j - i - 1);
      i = j + 1;
    } else if (src.compare(i, 7, "<fresh>") == 0) {
      t.kind = Tok::fresh;
      t.text = "<fresh>";
      i += 7;
    } else if (ident_start(c)) {
      // A dotted name: identifiers, digits and <var> placeholders joined by '.'.
      std::size_t j = i;
      while (j < n && ident_char(src[j])) ++j;
      while (j + 1 < n && src[j] == '.' &&
             (ident_char(src[j + 1]) || src[j + 1] == '<')) {
        ++j;
        if (src[j] == '<') {
          const std::size_t close = src.find('>', j);
          if (close == std::string::npos) fail(src, j, "unterminated <placeholder>");
          j = close + 1;
        } else {
          while (j < n && ident_char(src[j])) ++j;
        }
      }
      t.kind = Tok::name;
      t.text = src.substr(i, j - i);
      i = j;
    } else if (c == '-' && i + 1 < n && src[i + 1] == '>') {
      t.kind = Tok::arrow;
      t.text = "->";
      i += 2;
    } else if (std::string("()[],=:;+-*/").find(c) != std::string::npos) {
      t.kind = Tok::op;
      t.text = std::string(1, c);
      ++i;
    } else {
      fail(src, i, std::string("unexpected character '") + c + "'");
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.kind = Tok::end;
  end.pos = n;
  out.push_back(end);
  return out;
}

class Parser {
 public:
  Parser(const std::string& src) : src_(src), toks_(tokenize(src)) {}

  std::vector<Stmt> statements() {
    std::vector<Stmt> out;
    while (!at_end()) {
      if (is_op(";")) {
        advance();
        continue;
      }
      out.push_back(statement());
      if (!at_end()) expect_op(";");
    }
    return out;
  }

  ExprPtr whole_expression() {
    ExprPtr e = tuple_expr();
    if (!at_end()) fail(src_, peek().pos, "unexpected '" + peek().text + "'");
    return e;
  }

 private:
  const Token& peek() const { return toks_[pos_]; }
  const Token& advance() { return toks_[pos_++]; }
  bool at_end() const { return peek().kind == Tok::end; }
  bool is_op(const char* op) const { return peek().kind == Tok::op && peek().text == op; }
  bool is_name(const char* word) const { return peek().kind == Tok::name && peek().text == word; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(src_, peek().pos, std::string("expected '") + op + "'" +
                                               (at_end() ? " before the end" : ", saw '" + peek().text + "'"));
    advance();
  }
  std::string expect_name() {
    if (peek().kind != Tok::name) fail(src_, peek().pos, "expected a name");
    return advance().text;
  }

  Stmt statement() {
    const std::size_t start = peek().pos;
    Stmt s;
    if (is_name("for")) {
      advance();
      s.kind = Stmt::Kind::for_enumerate;
      s.target = expect_name();
      expect_op(",");
      s.target2 = expect_name();
      if (!is_name("in")) fail(src_, peek().pos, "expected 'in'");
      advance();
      ExprPtr it = postfix();
      if (it->kind != Expr::Kind::call || it->callee->text != "enumerate" || it->items.size() != 1)
        fail(src_, start, "only `for i, x in enumerate(...)` loops are supported");
      s.value = it->items[0];
      expect_op(":");
      s.body.push_back(statement());
    } else {
      ExprPtr lhs = tuple_expr();
      if (is_op("=")) {
        advance();
        if (lhs->kind == Expr::Kind::name) {
          s.kind = Stmt::Kind::assign;
          s.target = lhs->text;
        } else if (lhs->kind == Expr::Kind::index && lhs->items[0]->kind == Expr::Kind::name) {
          s.kind = Stmt::Kind::index_assign;
          s.target = lhs->items[0]->text;
          s.index = lhs->items[1];
        } else {
          fail(src_, start, "unsupported assignment target `" + lhs->str() + "`");
        }
        s.value = tuple_expr();
      } else {
        s.kind = Stmt::Kind::expr;
        s.value = lhs;
      }
    }
    if (peek().kind == Tok::arrow) {
      advance();
      s.record_as = expect_name();
    }
    const std::size_t stop = peek().pos;
    s.source = src_.substr(start, stop - start);
    while (!s.source.empty() && std::isspace(static_cast<unsigned char>(s.source.back()))) s.source.pop_back();
    return s;
  }

  ExprPtr tuple_expr() {
    ExprPtr first = expr();
    if (!is_op(",")) return first;
    auto t = std::make_shared<Expr>();
    t->kind = Expr::Kind::tuple;
    t->items.push_back(first);
    while (is_op(",")) {
      advance();
      if (is_op(")") || is_op("]") || is_op(";") || is_op("=") || at_end()) break;
      t->items.push_back(expr());
    }
    return t;
  }

  ExprPtr expr() {
    ExprPtr l = term();
    while (is_op("+") || is_op("-")) {
      auto b = std::make_shared<Expr>();
      b->kind = Expr::Kind::binop;
      b->text = advance().text;
      b->items = {l, term()};
      l = b;
    }
    return l;
  }

  ExprPtr term() {
    ExprPtr l = unary();
    while (is_op("*") || is_op("/")) {
      auto b = std::make_shared<Expr>();
      b->kind = Expr::Kind::binop;
      b->text = advance().text;
      b->items = {l, unary()};
      l = b;
    }
    return l;
  }

  ExprPtr unary() {
    if (is_op("-")) {
      advance();
      ExprPtr inner = unary();
      if (inner->kind == Expr::Kind::number) {
        auto n = std::make_shared<Expr>(*inner);
        n->number = -n->number;
        return n;
      }
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::neg;
      e->items = {inner};
      return e;
    }
    return postfix();
  }

  ExprPtr postfix() {
    ExprPtr e = atom();
    for (;;) {
      if (is_op("(")) {
        advance();
        auto c = std::make_shared<Expr>();
        c->kind = Expr::Kind::call;
        c->callee = e;
        while (!is_op(")")) {
          if (peek().kind == Tok::name && toks_[pos_ + 1].kind == Tok::op && toks_[pos_ + 1].text == "=") {
            std::string key = advance().text;
            advance();
            c->kwargs.emplace_back(key, expr());
          } else {
            if (!c->kwargs.empty()) fail(src_, peek().pos, "positional argument after keyword argument");
            c->items.push_back(expr());
          }
          if (!is_op(",")) break;
          advance();
        }
        expect_op(")");
        e = c;
      } else if (is_op("[")) {
        advance();
        auto ix = std::make_shared<Expr>();
        ix->kind = Expr::Kind::index;
        ix->items = {e, tuple_expr()};
        expect_op("]");
        e = ix;
      } else {
        return e;
      }
    }
  }

  ExprPtr atom() {
    const Token& t = peek();
    auto e = std::make_shared<Expr>();
    switch (t.kind) {
      case Tok::number: {
        advance();
        e->kind = Expr::Kind::number;
        e->text = t.text;
        e->number = std::strtod(t.text.c_str(), nullptr);
        e->is_int = t.text.find_first_of(".eE") == std::string::npos;
        return e;
      }
      case Tok::string:
        advance();
        e->kind = Expr::Kind::string;
        e->text = t.text;
        return e;
      case Tok::fresh:
        advance();
        e->kind = Expr::Kind::fresh;
        e->text = t.text;
        return e;
      case Tok::name:
        advance();
        e->kind = (t.text == "True" || t.text == "False" || t.text == "None") ? Expr::Kind::constant
                                                                              : Expr::Kind::name;
        e->text = t.text;
        return e;
      case Tok::op:
        if (t.text == "(") {
          advance();
          ExprPtr inner = tuple_expr();
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          advance();
          e->kind = Expr::Kind::list;
          while (!is_op("]")) {
            e->items.push_back(expr());
            if (!is_op(",")) break;
            advance();
          }
          expect_op("]");
          return e;
        }
        break;
      default:
        break;
    }
    fail(src_, t.pos, at_end() ? "unexpected end" : "unexpected '" + t.text + "'");
  }

  const std::string& src_;
  std::vector<Token> toks_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string Expr::str() const {
  std::ostringstream o;
  switch (kind) {
    case Kind::number: o << (text.empty() ? std::to_string(number) : text); break;
    case Kind::string: o << '\'' << text << '\''; break;
    case Kind::constant:
    case Kind::name:
    case Kind::fresh: o << text; break;
    case Kind::call: {
      o << callee->str() << '(';
      bool first = true;
      for (const auto& a : items) {
        o << (first ? "" : ", ") << a->str();
        first = false;
      }
      for (const auto& [k, v] : kwargs) {
        o << (first ? "" : ", ") << k << '=' << v->str();
        first = false;
      }
      o << ')';
      break;
    }
    case Kind::index: o << items[0]->str() << '[' << items[1]->str() << ']'; break;
    case Kind::list:
    case Kind::tuple: {
      o << (kind == Kind::list ? '[' : '(');
      for (std::size_t i = 0; i < items.size(); ++i) o << (i ? ", " : "") << items[i]->str();
      o << (kind == Kind::list ? ']' : ')');
      break;
    }
    case Kind::binop: o << items[0]->str() << ' ' << text << ' ' << items[1]->str(); break;
    case Kind::neg: o << '-' << items[0]->str(); break;
  }
  return o.str();
}

std::vector<Stmt> parse(const std::string& source) { return Parser(source).statements(); }

ExprPtr parse_expression(const std::string& source) { return Parser(source).whole_expression(); }

}  // namespace yeto::parity::py
