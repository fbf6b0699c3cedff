// A parser for the small Python snippets that parity case.json files record under
// `calls[*].python` ("s = <fresh>; s.set_timesteps(4); ts = s.timesteps[[0, 2]]; ..."), so a
// handler can replay a case from its description instead of hard-coding it.
//
// Supported: statements separated by ';' (expression, `target = expr`, `a[i] = expr`,
// `for i, t in enumerate(expr): stmt`), an optional `-> name` annotation naming what a
// statement's value is recorded as, `# comments`, numbers, strings, True/False/None, dotted
// names (`model_output.0`, `s.timesteps`, `model_output.<i>` with a loop variable in angle
// brackets), `<fresh>`, calls with positional and keyword arguments, indexing
// (`x[0]`, `x[[0, 2]]`, `x[-1]`), list/tuple displays and + - * / with Python precedence.
// Anything else is a parse error naming the snippet, so an unsupported case fails loudly.
// Torch-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace yeto::parity::py {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { number, string, constant, name, fresh, call, index, list, tuple, binop, neg };
  Kind kind = Kind::number;
  double number = 0.0;
  bool is_int = false;          // number written without '.', 'e'
  std::string text;             // string value, name, constant (True/False/None), operator
  std::vector<ExprPtr> items;   // call args / list items / index: {object, index} / binop: {l, r}
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call keyword arguments
  ExprPtr callee;               // call: the called expression (usually a dotted name)
  std::string str() const;      // re-rendered source, for messages
};

struct Stmt {
  enum class Kind { expr, assign, index_assign, for_enumerate };
  Kind kind = Kind::expr;
  std::string target;           // assign / index_assign: the name; for: the index variable
  std::string target2;          // for: the element variable
  ExprPtr index;                // index_assign: the subscript
  ExprPtr value;                // the expression (for: the iterable)
  std::vector<Stmt> body;       // for: the loop body
  std::string record_as;        // "-> name" annotation ("" when none)
  std::string source;
};

// Parses a whole snippet. Throws yeto::Error (bad_input) with the snippet and the position.
std::vector<Stmt> parse(const std::string& source);
ExprPtr parse_expression(const std::string& source);

}  // namespace yeto::parity::py
