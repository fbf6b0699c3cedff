// Evaluates the recorded Python snippets of a parity case (see pyexpr.hpp) against C++
// implementations, and maps what they produce onto the case's expected output names.
//
// Values are tensors, numbers, strings, None, tuples/lists and objects (an implementation
// wrapped for the interpreter: a scheduler, a pipeline helper namespace...). Free functions
// (`np.linspace`, `calculate_shift`, `FluxPipeline._pack_latents`, `X.from_config`) come from
// the interpreter's function table; names resolve to interpreter variables first, then to the
// case's input tensors (`model_output.0`), then to expected tensors of outputs recorded
// earlier in the case (so a later call can use `packed.shape[1]` even when `packed` itself
// is produced by a helper this build lacks).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/error.hpp"
#include "parity/parity.hpp"
#include "parity/pyexpr.hpp"

namespace yeto::parity::py {

struct Value;
class Object;
using ValueList = std::vector<Value>;
using Kwargs = std::map<std::string, Value>;

struct None {};

struct Value {
  std::variant<None, bool, std::int64_t, double, std::string, at::Tensor, std::shared_ptr<ValueList>,
               std::shared_ptr<Object>>
      v;

  Value() = default;
  Value(None) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(static_cast<std::int64_t>(i)) {}
  Value(std::int64_t i) : v(i) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(at::Tensor t) : v(std::move(t)) {}
  Value(ValueList items) : v(std::make_shared<ValueList>(std::move(items))) {}
  Value(std::shared_ptr<Object> o) : v(std::move(o)) {}

  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_tensor() const { return std::holds_alternative<at::Tensor>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<ValueList>>(v); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v); }
  bool is_number() const {
    return std::holds_alternative<std::int64_t>(v) || std::holds_alternative<double>(v) ||
           std::holds_alternative<bool>(v);
  }

  // Conversions; each throws yeto::Error naming what was expected.
  double to_double() const;     // numbers and one-element tensors
  std::int64_t to_int() const;  // integral numbers and one-element tensors
  bool to_bool() const;
  const std::string& to_string() const;
  at::Tensor to_tensor() const;  // tensors, numbers (0-d: int64 / float64), lists of numbers (1-d)
  const ValueList& list() const;
  std::shared_ptr<Object> object() const;
  std::vector<double> to_doubles() const;  // 1-d tensors, lists of numbers
  std::string describe() const;            // "tensor [2, 4] float32", "int 3", ...
};

// An implementation the interpreter can call into: `obj.attr` and `obj.method(...)`.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // Throws yeto::Error for an unknown attribute / method.
  virtual Value attr(const std::string& name) = 0;
  virtual Value call(const std::string& method, const ValueList& args, const Kwargs& kwargs) = 0;
};

using Function = std::function<Value(const ValueList& args, const Kwargs& kwargs)>;

// Raised for a function, class or method this build does not implement; the case's outputs
// that depend on it are reported as unsupported rather than failed.
class Unsupported : public Error {
 public:
  explicit Unsupported(std::string message) : Error(std::move(message), ExitCode::not_available) {}
};

// Helpers for handlers that wrap implementations.
const Value& arg(const ValueList& args, const Kwargs& kwargs, std::size_t pos, const std::string& name);
const Value* opt_arg(const ValueList& args, const Kwargs& kwargs, std::size_t pos, const std::string& name);

class Interpreter {
 public:
  explicit Interpreter(const CaseContext& ctx);

  void define(const std::string& name, Value v) { vars_[name] = std::move(v); }
  void define_function(const std::string& name, Function f) { functions_[name] = std::move(f); }
  // What `<fresh>` evaluates to (a new instance of the case's component).
  void set_fresh(std::function<Value()> make) { fresh_ = std::move(make); }

  Value eval(const ExprPtr& e);
  Value lookup(const std::string& dotted);

  // Runs every entry of case.json `calls` in order, compares each output listed in the call's
  // `outputs` against expected.safetensors, and records comparisons in `result`. Outputs of
  // calls that reach an Unsupported implementation mark the result unsupported (with the
  // reason) and are skipped; other errors fail the case.
  void run_calls(CaseResult& result);

 private:
  struct Hook {
    std::vector<Stmt> stmts;
    std::map<std::string, std::vector<Value>> indexed;  // `name[i] = ...` collected per step
    std::map<std::string, Value> named;                 // `name.<i> = ...` after substitution
  };

  // Executes statements; `finals` receives the value of a trailing expression (flattened when
  // a tuple) or the iterable of a trailing loop; `assigned` the plain values assigned.
  void exec(const std::vector<Stmt>& stmts, std::vector<Value>& finals, std::vector<Value>& assigned,
            std::map<std::string, Value>& recorded, Hook* hook);
  std::string substitute(const std::string& name) const;

  const CaseContext& ctx_;
  std::map<std::string, Value> vars_;
  std::map<std::string, Function> functions_;
  std::function<Value()> fresh_;
  std::map<std::string, std::int64_t> loop_vars_;  // for <i> substitution
  std::map<std::string, Value> produced_;          // outputs computed so far, by name
  std::string last_object_;                        // the variable last assigned an object (`s`)
};

}  // namespace yeto::parity::py
