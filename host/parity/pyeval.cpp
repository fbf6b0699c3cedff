#include "parity/pyeval.hpp"

#include <set>
#include <sstream>

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::parity::py {
namespace {

[[noreturn]] void type_error(const Value& v, const std::string& wanted) {
  throw Error("expected " + wanted + ", got " + v.describe(), ExitCode::bad_input);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream o;
  o << '[';
  for (std::int64_t i = 0; i < t.dim(); ++i) o << (i ? ", " : "") << t.size(i);
  o << ']';
  return o.str();
}

bool is_integral(const Value& v) {
  return std::holds_alternative<std::int64_t>(v.v) || std::holds_alternative<bool>(v.v);
}

Value arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (op == "/" ) return a.to_double() / b.to_double();  // Python true division
    if (is_integral(a) && is_integral(b)) {
      const std::int64_t x = a.to_int(), y = b.to_int();
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      return x * y;
    }
    const double x = a.to_double(), y = b.to_double();
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    return x * y;
  }
  if (a.is_tensor() && b.is_number()) {
    const at::Tensor& t = std::get<at::Tensor>(a.v);
    const at::Scalar s = is_integral(b) ? at::Scalar(b.to_int()) : at::Scalar(b.to_double());
    if (op == "+") return t + s;
    if (op == "-") return t - s;
    if (op == "*") return t * s;
    return t / s;
  }
  if (a.is_number() && b.is_tensor()) {
    const at::Tensor& t = std::get<at::Tensor>(b.v);
    const at::Scalar s = is_integral(a) ? at::Scalar(a.to_int()) : at::Scalar(a.to_double());
    if (op == "+") return t + s;
    if (op == "-") return at::rsub(t, s);
    if (op == "*") return t * s;
    return at::reciprocal(t) * s;
  }
  if (a.is_tensor() && b.is_tensor()) {
    const at::Tensor& x = std::get<at::Tensor>(a.v);
    const at::Tensor& y = std::get<at::Tensor>(b.v);
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    return x / y;
  }
  throw Error("cannot apply '" + op + "' to " + a.describe() + " and " + b.describe(), ExitCode::bad_input);
}

Value index_value(const Value& base, const Value& index) {
  if (base.is_list()) {
    const ValueList& items = base.list();
    std::int64_t i = index.to_int();
    const auto n = static_cast<std::int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw Error("index " + std::to_string(index.to_int()) + " out of range for a list of " +
                                     std::to_string(n), ExitCode::bad_input);
    return items[static_cast<std::size_t>(i)];
  }
  if (base.is_tensor()) {
    const at::Tensor& t = std::get<at::Tensor>(base.v);
    if (t.dim() == 0) throw Error("cannot index a 0-d tensor", ExitCode::bad_input);
    if (index.is_list() || index.is_tensor()) {
      at::Tensor idx = index.to_tensor().to(at::kLong).reshape({-1});
      idx = at::where(idx < 0, idx + t.size(0), idx);
      return t.index_select(0, idx);
    }
    std::int64_t i = index.to_int();
    if (i < 0) i += t.size(0);
    if (i < 0 || i >= t.size(0))
      throw Error("index " + std::to_string(index.to_int()) + " out of range for a tensor of shape " + shape_text(t),
                  ExitCode::bad_input);
    return t.select(0, i);
  }
  type_error(base, "a list or tensor to index");
}

// np.linspace(start, stop, num) in float64, endpoint included.
Value np_linspace(const ValueList& args, const Kwargs& kwargs) {
  const double a = arg(args, kwargs, 0, "start").to_double();
  const double b = arg(args, kwargs, 1, "stop").to_double();
  const std::int64_t n = opt_arg(args, kwargs, 2, "num") ? arg(args, kwargs, 2, "num").to_int() : 50;
  at::Tensor out = at::empty({n}, at::kDouble);
  auto* p = out.data_ptr<double>();
  const double step = n > 1 ? (b - a) / static_cast<double>(n - 1) : 0.0;
  for (std::int64_t i = 0; i < n; ++i) p[i] = a + static_cast<double>(i) * step;
  if (n > 1) p[n - 1] = b;
  return out;
}

}  // namespace

double Value::to_double() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  if (auto* t = std::get_if<at::Tensor>(&v); t && t->numel() == 1) return t->to(at::kDouble).item<double>();
  type_error(*this, "a number");
}

std::int64_t Value::to_int() const {
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (auto* d = std::get_if<double>(&v); d && *d == static_cast<double>(static_cast<std::int64_t>(*d)))
    return static_cast<std::int64_t>(*d);
  if (auto* t = std::get_if<at::Tensor>(&v); t && t->numel() == 1 && !at::isFloatingType(t->scalar_type()))
    return t->to(at::kLong).item<std::int64_t>();
  type_error(*this, "an integer");
}

bool Value::to_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i != 0;
  type_error(*this, "a bool");
}

const std::string& Value::to_string() const {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  type_error(*this, "a string");
}

at::Tensor Value::to_tensor() const {
  if (auto* t = std::get_if<at::Tensor>(&v)) return *t;
  if (auto* i = std::get_if<std::int64_t>(&v)) return at::scalar_tensor(*i, at::kLong);
  if (auto* b = std::get_if<bool>(&v)) return at::scalar_tensor(*b, at::kBool);
  if (auto* d = std::get_if<double>(&v)) return at::scalar_tensor(*d, at::kDouble);
  if (is_list()) {
    const ValueList& items = list();
    bool all_int = true;
    std::vector<at::Tensor> parts;
    for (const Value& x : items) {
      if (!x.is_number() && !x.is_tensor()) type_error(*this, "a list of numbers or tensors");
      if (!is_integral(x) && !(x.is_tensor() && !at::isFloatingType(std::get<at::Tensor>(x.v).scalar_type())))
        all_int = false;
      parts.push_back(x.to_tensor());
    }
    if (parts.empty()) return at::empty({0}, at::kDouble);
    at::Tensor out = at::stack(parts);
    return all_int ? out.to(at::kLong) : out;
  }
  type_error(*this, "a tensor");
}

const ValueList& Value::list() const {
  if (auto* l = std::get_if<std::shared_ptr<ValueList>>(&v)) return **l;
  type_error(*this, "a list or tuple");
}

std::shared_ptr<Object> Value::object() const {
  if (auto* o = std::get_if<std::shared_ptr<Object>>(&v)) return *o;
  type_error(*this, "an object");
}

std::vector<double> Value::to_doubles() const {
  at::Tensor t = to_tensor().to(at::kDouble).contiguous().reshape({-1});
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::string Value::describe() const {
  if (is_none()) return "None";
  if (auto* b = std::get_if<bool>(&v)) return std::string("bool ") + (*b ? "True" : "False");
  if (auto* i = std::get_if<std::int64_t>(&v)) return "int " + std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    std::ostringstream o;
    o << "float " << *d;
    return o.str();
  }
  if (auto* s = std::get_if<std::string>(&v)) return "str '" + *s + "'";
  if (auto* t = std::get_if<at::Tensor>(&v)) return "tensor " + shape_text(*t) + " " + std::string(c10::toString(t->scalar_type()));
  if (is_list()) return "sequence of " + std::to_string(list().size());
  return "object " + object()->type_name();
}

const Value* opt_arg(const ValueList& args, const Kwargs& kwargs, std::size_t pos, const std::string& name) {
  if (pos < args.size()) return &args[pos];
  auto it = kwargs.find(name);
  if (it != kwargs.end()) return &it->second;
  return nullptr;
}

const Value& arg(const ValueList& args, const Kwargs& kwargs, std::size_t pos, const std::string& name) {
  const Value* v = opt_arg(args, kwargs, pos, name);
  if (!v) throw Error("missing argument `" + name + "` (position " + std::to_string(pos) + ")", ExitCode::bad_input);
  return *v;
}

Interpreter::Interpreter(const CaseContext& ctx) : ctx_(ctx) {
  define_function("np.linspace", np_linspace);
  define_function("numpy.linspace", np_linspace);
  define_function("float", [](const ValueList& a, const Kwargs& k) { return Value(arg(a, k, 0, "x").to_double()); });
  define_function("int", [](const ValueList& a, const Kwargs& k) { return Value(arg(a, k, 0, "x").to_int()); });
  // dtype arguments (`torch.float32`) reach helpers as their names.
  for (const char* dt : {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"}) {
    define(std::string("torch.") + dt, Value(std::string(dt)));
    define(std::string("np.") + dt, Value(std::string(dt)));
  }
}

std::string Interpreter::substitute(const std::string& name) const {
  std::string out = name;
  for (const auto& [var, value] : loop_vars_) {
    const std::string ph = "<" + var + ">";
    for (std::size_t p = out.find(ph); p != std::string::npos; p = out.find(ph))
      out.replace(p, ph.size(), std::to_string(value));
  }
  return out;
}

Value Interpreter::lookup(const std::string& dotted_in) {
  const std::string dotted = substitute(dotted_in);
  const std::vector<std::string> parts = split(dotted, '.');
  // Longest prefix first: "model_output.0" is one input; "s.timesteps" is s, then .timesteps.
  for (std::size_t n = parts.size(); n >= 1; --n) {
    std::string head = parts[0];
    for (std::size_t i = 1; i < n; ++i) head += "." + parts[i];
    std::optional<Value> base;
    if (auto it = vars_.find(head); it != vars_.end()) base = it->second;
    else if (auto jt = produced_.find(head); jt != produced_.end()) base = jt->second;
    else if (ctx_.has_input(head)) base = Value(ctx_.input(head));
    else if (n < parts.size() && ctx_.has_expected(head)) base = Value(ctx_.expected(head));
    if (!base) continue;
    Value v = *base;
    for (std::size_t i = n; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      if (v.is_object()) {
        v = v.object()->attr(p);
      } else if (v.is_tensor() && p == "shape") {
        const at::Tensor& t = std::get<at::Tensor>(v.v);
        ValueList dims;
        for (std::int64_t d = 0; d < t.dim(); ++d) dims.emplace_back(t.size(d));
        v = Value(std::move(dims));
      } else {
        throw Error("`" + dotted + "`: " + v.describe() + " has no attribute `" + p + "`", ExitCode::bad_input);
      }
    }
    return v;
  }
  if (ctx_.has_expected(dotted)) return Value(ctx_.expected(dotted));
  throw Error("unknown name `" + dotted + "` (not a variable, input or recorded output of the case)",
              ExitCode::bad_input);
}

Value Interpreter::eval(const ExprPtr& e) {
  switch (e->kind) {
    case Expr::Kind::number:
      if (e->is_int) return Value(static_cast<std::int64_t>(e->number));
      return Value(e->number);
    case Expr::Kind::string: return Value(e->text);
    case Expr::Kind::constant:
      if (e->text == "True") return Value(true);
      if (e->text == "False") return Value(false);
      return Value(None{});
    case Expr::Kind::name: return lookup(e->text);
    case Expr::Kind::fresh:
      if (!fresh_) throw Unsupported("`<fresh>` is not defined for class " + ctx_.class_name());
      return fresh_();
    case Expr::Kind::list:
    case Expr::Kind::tuple: {
      ValueList items;
      for (const auto& x : e->items) items.push_back(eval(x));
      return Value(std::move(items));
    }
    case Expr::Kind::binop: return arith(e->text, eval(e->items[0]), eval(e->items[1]));
    case Expr::Kind::neg: return arith("*", Value(static_cast<std::int64_t>(-1)), eval(e->items[0]));
    case Expr::Kind::index: return index_value(eval(e->items[0]), eval(e->items[1]));
    case Expr::Kind::call: {
      if (e->callee->kind != Expr::Kind::name)
        throw Error("only calls of named functions or methods are supported: `" + e->str() + "`", ExitCode::bad_input);
      const std::string name = substitute(e->callee->text);
      // Resolve what is called before evaluating the arguments, so a function this build
      // lacks is reported as such rather than as a failure inside its arguments.
      auto fn = functions_.find(name);
      std::optional<Value> owner;
      std::string method;
      if (fn == functions_.end()) {
        const auto dot = name.rfind('.');
        if (dot == std::string::npos || vars_.count(split(name.substr(0, dot), '.')[0]) == 0)
          throw Unsupported("no implementation registered for `" + name + "`");
        owner = lookup(name.substr(0, dot));
        method = name.substr(dot + 1);
        if (!owner->is_object())
          throw Error("`" + name.substr(0, dot) + "` is " + owner->describe() + ", not an object with method `" + method +
                          "`",
                      ExitCode::bad_input);
      }
      ValueList args;
      Kwargs kwargs;
      for (const auto& a : e->items) args.push_back(eval(a));
      for (const auto& [k, v] : e->kwargs) kwargs[k] = eval(v);
      if (fn != functions_.end()) return fn->second(args, kwargs);
      return owner->object()->call(method, args, kwargs);
    }
  }
  throw Error("unhandled expression `" + e->str() + "`", ExitCode::bad_input);
}

void Interpreter::exec(const std::vector<Stmt>& stmts, std::vector<Value>& finals, std::vector<Value>& assigned,
                       std::map<std::string, Value>& recorded, Hook* hook) {
  for (std::size_t k = 0; k < stmts.size(); ++k) {
    const Stmt& s = stmts[k];
    const bool last = k + 1 == stmts.size();
    switch (s.kind) {
      case Stmt::Kind::assign: {
        Value v = eval(s.value);
        const std::string target = substitute(s.target);
        if (target != s.target || s.target.find('.') != std::string::npos) {
          recorded[target] = v;  // `loop.x0_pred.<i> = ...` records an output
        } else {
          vars_[target] = v;
          if (!v.is_object()) assigned.push_back(v);
          else last_object_ = target;
        }
        if (!s.record_as.empty()) recorded[substitute(s.record_as)] = v;
        break;
      }
      case Stmt::Kind::index_assign: {
        Value v = eval(s.value);
        auto& slot = recorded[s.target];
        if (!slot.is_list()) slot = Value(ValueList{});
        auto& items = *std::get<std::shared_ptr<ValueList>>(slot.v);
        const std::int64_t at_index = eval(s.index).to_int();
        if (at_index != static_cast<std::int64_t>(items.size()))
          throw Error("`" + s.source + "`: entries must be assigned in order", ExitCode::bad_input);
        items.push_back(v);
        break;
      }
      case Stmt::Kind::expr: {
        Value v = eval(s.value);
        if (!s.record_as.empty()) recorded[substitute(s.record_as)] = v;
        if (last) {
          if (v.is_list() && s.value->kind == Expr::Kind::tuple) {
            for (const Value& x : v.list()) finals.push_back(x);
          } else {
            finals.push_back(v);
          }
        }
        break;
      }
      case Stmt::Kind::for_enumerate: {
        Value seq = eval(s.value);
        std::vector<Value> elems;
        if (seq.is_list()) {
          elems = seq.list();
        } else {
          const at::Tensor t = seq.to_tensor().clone();
          seq = Value(t);
          for (std::int64_t i = 0; i < t.size(0); ++i) elems.emplace_back(t.select(0, i));
        }
        for (std::size_t i = 0; i < elems.size(); ++i) {
          loop_vars_[s.target] = static_cast<std::int64_t>(i);
          vars_[s.target] = Value(static_cast<std::int64_t>(i));
          vars_[s.target2] = elems[i];
          std::vector<Value> inner_finals, inner_assigned;
          exec(s.body, inner_finals, inner_assigned, recorded, nullptr);
          if (!s.body.empty() && !s.body.back().record_as.empty() && s.body.back().kind == Stmt::Kind::assign)
            recorded[substitute(s.body.back().record_as)] = vars_[s.body.back().target];
          if (hook) {
            std::vector<Value> f2, a2;
            exec(hook->stmts, f2, a2, recorded, nullptr);
          }
        }
        loop_vars_.erase(s.target);
        if (!s.record_as.empty()) recorded[substitute(s.record_as)] = seq;
        if (last) finals.push_back(seq);
        break;
      }
    }
  }
}

void Interpreter::run_calls(CaseResult& result) {
  const nlohmann::json& cj = ctx_.case_json();
  if (!cj.contains("calls") || !cj["calls"].is_array())
    throw Error("case.json has no `calls` list", ExitCode::bad_input);
  const nlohmann::json& calls = cj["calls"];
  const std::string after_each = "after each ";
  std::set<std::string> seen;

  auto python_of = [&](std::size_t k) -> std::string {
    const auto& c = calls[k];
    if (!c.contains("python") || !c["python"].is_string())
      throw Error("case.json calls[" + std::to_string(k) + "] has no `python` string", ExitCode::bad_input);
    return c["python"].get<std::string>();
  };
  auto outputs_of = [&](std::size_t k) {
    std::vector<std::string> outs;
    if (calls[k].contains("outputs"))
      for (const auto& o : calls[k]["outputs"]) outs.push_back(o.get<std::string>());
    return outs;
  };

  for (std::size_t k = 0; k < calls.size(); ++k) {
    const std::string py = python_of(k);
    if (py.rfind(after_each, 0) == 0) continue;  // consumed by the loop call before it
    std::vector<std::string> outs = outputs_of(k);
    std::vector<std::string> hook_outs;
    std::optional<Hook> hook;
    if (k + 1 < calls.size()) {
      const std::string next = python_of(k + 1);
      if (next.rfind(after_each, 0) == 0) {
        const auto colon = next.find(':');
        if (colon == std::string::npos)
          throw Error("case.json calls[" + std::to_string(k + 1) + "]: expected `after each ...: statements`",
                      ExitCode::bad_input);
        hook.emplace();
        hook->stmts = parse(next.substr(colon + 1));
        hook_outs = outputs_of(k + 1);
      }
    }
    std::vector<std::string> all_outs = outs;
    all_outs.insert(all_outs.end(), hook_outs.begin(), hook_outs.end());
    for (const auto& o : all_outs) seen.insert(o);

    std::map<std::string, Value> recorded;
    std::vector<Value> finals_only, with_assigned;
    try {
      const std::vector<Stmt> stmts = parse(py);
      std::vector<std::optional<std::int64_t>> ns;
      if (calls[k].contains("N") && calls[k]["N"].is_array()) {
        for (const auto& n : calls[k]["N"]) ns.emplace_back(n.get<std::int64_t>());
      } else {
        ns.emplace_back(std::nullopt);
      }
      for (const auto& n : ns) {
        if (n) vars_["N"] = Value(*n);
        std::vector<Value> finals, assigned;
        exec(stmts, finals, assigned, recorded, hook ? &*hook : nullptr);
        bool no_value = true;
        for (const Value& f : finals) no_value = no_value && f.is_none();
        if (no_value && !last_object_.empty() && !outs.empty() && outs.size() % ns.size() == 0) {
          // A call run for its effect (`s.set_timesteps(...)`): its outputs are the object's
          // state afterwards, named by their last component (`set_timesteps_flux.N4.sigmas`).
          finals.clear();
          const std::size_t per = outs.size() / ns.size();
          const std::size_t first = per * static_cast<std::size_t>(&n - ns.data());
          for (std::size_t j = first; j < first + per; ++j) {
            const auto dot = outs[j].rfind('.');
            finals.push_back(lookup(last_object_ + "." + (dot == std::string::npos ? outs[j] : outs[j].substr(dot + 1))));
          }
        }
        finals_only.insert(finals_only.end(), finals.begin(), finals.end());
        with_assigned.insert(with_assigned.end(), assigned.begin(), assigned.end());
        with_assigned.insert(with_assigned.end(), finals.begin(), finals.end());
      }
      std::vector<std::string> unbound;
      for (const auto& o : outs)
        if (!recorded.count(o)) unbound.push_back(o);
      const std::vector<Value>* pool = nullptr;
      if (unbound.size() == finals_only.size()) pool = &finals_only;
      else if (unbound.size() == with_assigned.size()) pool = &with_assigned;
      else if (!unbound.empty())
        throw Error("the call produced " + std::to_string(finals_only.size()) + " values for " +
                        std::to_string(unbound.size()) + " outputs (" + join(unbound, ", ") + ")",
                    ExitCode::bad_input);
      for (std::size_t i = 0; i < unbound.size(); ++i) recorded[unbound[i]] = (*pool)[i];
      for (const auto& o : all_outs) {
        auto it = recorded.find(o);
        if (it == recorded.end()) {
          Comparison c;
          c.name = o;
          c.note = "the recorded call did not produce it";
          result.comparisons.push_back(c);
          continue;
        }
        produced_[o] = it->second;
        ctx_.compare(o, it->second.to_tensor(), result);
      }
    } catch (const Unsupported& e) {
      mark_unsupported(result, std::string(e.what()) + " (needed by `" + py + "`; outputs " + join(all_outs, ", ") +
                                   " not checked)");
    } catch (const Error& e) {
      const std::string msg = "calls[" + std::to_string(k) + "] `" + py + "`: " + e.what();
      for (const auto& o : all_outs) {
        Comparison c;
        c.name = o;
        c.note = msg;
        result.comparisons.push_back(c);
      }
      if (result.error.empty()) result.error = msg;
    } catch (const c10::Error& e) {
      const std::string msg = "calls[" + std::to_string(k) + "] `" + py + "`: " + e.what_without_backtrace();
      for (const auto& o : all_outs) {
        Comparison c;
        c.name = o;
        c.note = msg;
        result.comparisons.push_back(c);
      }
      if (result.error.empty()) result.error = msg;
    }
  }
  for (const auto& key : ctx_.compare_keys()) {
    if (seen.count(key)) continue;
    Comparison c;
    c.name = key;
    c.note = "listed in `compare` but produced by no recorded call";
    result.comparisons.push_back(c);
  }
}

}  // namespace yeto::parity::py
