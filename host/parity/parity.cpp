#include "parity/parity.hpp"

#include <fstream>
#include <mutex>
#include <sstream>

#include <ATen/ATen.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/tensors.hpp"
#include "core/python_json.hpp"

namespace yeto::parity {
namespace {

struct KindTable {
  std::mutex mu;
  std::map<std::string, KindHandler> kinds;
  std::map<std::string, std::map<std::string, KindHandler>> classes;  // kind -> class -> handler
};

KindTable& table() {
  static KindTable t;
  return t;
}

std::map<std::string, at::Tensor> load_optional(const std::filesystem::path& p) {
  if (!std::filesystem::exists(p)) return {};
  return io::load_safetensors(p);
}

}  // namespace

bool CaseResult::pass() const {
  if (!supported || !error.empty() || comparisons.empty()) return false;
  for (const auto& c : comparisons)
    if (!c.pass) return false;
  return true;
}

CaseContext::CaseContext(std::filesystem::path dir) : dir_(std::move(dir)) {
  const auto path = dir_ / "case.json";
  if (!std::filesystem::exists(path))
    throw Error(path.string() + ": no case.json (is this a parity case directory?)", ExitCode::not_found);
  case_ = parse_python_json(read_file(path), path.string());
  if (!case_.is_object()) throw Error(path.string() + ": expected a JSON object", ExitCode::bad_input);
}

CaseContext::~CaseContext() = default;

std::string CaseContext::case_name() const {
  if (case_.contains("case") && case_["case"].is_string()) return case_["case"].get<std::string>();
  return dir_.filename().string();
}

std::string CaseContext::kind() const {
  return case_.contains("kind") && case_["kind"].is_string() ? case_["kind"].get<std::string>() : "";
}

std::string CaseContext::class_name() const {
  return case_.contains("class_name") && case_["class_name"].is_string() ? case_["class_name"].get<std::string>()
                                                                         : "";
}

const std::map<std::string, at::Tensor>& CaseContext::inputs() const {
  if (!inputs_) inputs_ = std::make_unique<std::map<std::string, at::Tensor>>(load_optional(dir_ / "inputs.safetensors"));
  return *inputs_;
}

const std::map<std::string, at::Tensor>& CaseContext::expected() const {
  if (!expected_)
    expected_ = std::make_unique<std::map<std::string, at::Tensor>>(load_optional(dir_ / "expected.safetensors"));
  return *expected_;
}

bool CaseContext::has_input(const std::string& name) const { return inputs().count(name) > 0; }
bool CaseContext::has_expected(const std::string& name) const { return expected().count(name) > 0; }

const at::Tensor& CaseContext::input(const std::string& name) const {
  auto it = inputs().find(name);
  if (it == inputs().end())
    throw Error(case_name() + ": inputs.safetensors has no tensor '" + name + "'", ExitCode::bad_input);
  return it->second;
}

const at::Tensor& CaseContext::expected(const std::string& name) const {
  auto it = expected().find(name);
  if (it == expected().end())
    throw Error(case_name() + ": expected.safetensors has no tensor '" + name + "'", ExitCode::bad_input);
  return it->second;
}

Tolerance CaseContext::tolerance(const std::string& name) const {
  if (!case_.contains("compare") || !case_["compare"].contains(name))
    throw Error(case_name() + ": case.json `compare` has no tolerance for '" + name + "'", ExitCode::bad_input);
  const auto& c = case_["compare"][name];
  Tolerance t;
  if (!c.is_object() || !c.contains("rtol") || !c.contains("atol") || !c["rtol"].is_number() ||
      !c["atol"].is_number())
    throw Error(case_name() + ": case.json compare['" + name + "'] must be {\"rtol\": number, \"atol\": number}",
                ExitCode::bad_input);
  t.rtol = c["rtol"].get<double>();
  t.atol = c["atol"].get<double>();
  return t;
}

std::vector<std::string> CaseContext::compare_keys() const {
  std::vector<std::string> keys;
  if (case_.contains("compare") && case_["compare"].is_object())
    for (auto it = case_["compare"].begin(); it != case_["compare"].end(); ++it) keys.push_back(it.key());
  return keys;
}

Comparison compare_tensors(const std::string& name, const at::Tensor& actual_in, const at::Tensor& expected_in,
                           const Tolerance& tol) {
  Comparison c;
  c.name = name;
  c.atol = tol.atol;
  c.rtol = tol.rtol;
  auto shape_of = [](const at::Tensor& t) {
    std::ostringstream o;
    o << t.sizes();
    return o.str();
  };
  if (!actual_in.defined()) {
    c.note = "no value produced";
    return c;
  }
  if (actual_in.sizes() != expected_in.sizes()) {
    // A 0-d value compared against a one-element tensor (or back) is the same value.
    if (!(actual_in.numel() == 1 && expected_in.numel() == 1)) {
      c.note = "shape " + shape_of(actual_in) + " != expected " + shape_of(expected_in);
      return c;
    }
  }
  const bool exp_int = !at::isFloatingType(expected_in.scalar_type()) && !at::isComplexType(expected_in.scalar_type());
  const bool act_int = !at::isFloatingType(actual_in.scalar_type()) && !at::isComplexType(actual_in.scalar_type());
  if (exp_int != act_int) {
    c.note = std::string("dtype ") + c10::toString(actual_in.scalar_type()) + " != expected " +
             c10::toString(expected_in.scalar_type()) + " (integer results must be integers)";
    return c;
  }
  const at::Tensor a = actual_in.detach().to(at::kCPU).to(at::kDouble).reshape(expected_in.sizes());
  const at::Tensor e = expected_in.detach().to(at::kCPU).to(at::kDouble);
  if (a.numel() == 0) {
    c.pass = true;
    return c;
  }
  const at::Tensor diff = (a - e).abs();
  const at::Tensor finite_a = at::isfinite(a), finite_e = at::isfinite(e);
  // Non-finite entries must agree exactly (NaN where NaN is expected, infinities of the same sign).
  const bool nonfinite_ok = at::equal(at::isnan(a), at::isnan(e)) && at::equal(at::isposinf(a), at::isposinf(e)) &&
                            at::equal(at::isneginf(a), at::isneginf(e));
  const at::Tensor d = at::where(finite_e & finite_a, diff, at::zeros_like(diff));
  c.max_abs = d.max().item<double>();
  const at::Tensor nz = (e != 0) & finite_e & finite_a;
  c.max_rel = nz.any().item<bool>() ? (d / e.abs()).masked_select(nz).max().item<double>() : 0.0;
  if (exp_int) {
    c.atol = 0.0;
    c.rtol = 0.0;
  }
  const at::Tensor bound = c.atol + c.rtol * e.abs();
  // Non-finite entries are judged by nonfinite_ok alone.
  const bool within = ((d <= bound) | ~(finite_e & finite_a)).all().item<bool>();
  c.pass = within && nonfinite_ok;
  if (!nonfinite_ok) c.note = "non-finite entries differ";
  else if (!within) {
    const auto worst = at::where(finite_e & finite_a, d - bound, at::full_like(d, -INFINITY)).argmax().item<std::int64_t>();
    std::ostringstream o;
    o << "worst entry (flat index " << worst << "): actual " << a.reshape({-1})[worst].item<double>() << ", expected "
      << e.reshape({-1})[worst].item<double>();
    c.note = o.str();
  }
  return c;
}

bool CaseContext::compare(const std::string& name, const at::Tensor& actual, CaseResult& result) const {
  Comparison c;
  try {
    const Tolerance tol = tolerance(name);
    c = compare_tensors(name, actual, expected(name), tol);
  } catch (const Error& e) {
    c = Comparison{};
    c.name = name;
    c.note = e.what();
  }
  result.comparisons.push_back(c);
  return c.pass;
}

void register_kind(const std::string& kind, KindHandler handler) {
  std::lock_guard<std::mutex> lock(table().mu);
  table().kinds[kind] = std::move(handler);
}

bool has_kind(const std::string& kind) {
  std::lock_guard<std::mutex> lock(table().mu);
  return table().kinds.count(kind) > 0;
}

std::vector<std::string> registered_kinds() {
  std::lock_guard<std::mutex> lock(table().mu);
  std::vector<std::string> out;
  for (const auto& [k, _] : table().kinds) out.push_back(k);
  return out;
}

void register_class(const std::string& kind, const std::string& class_name, KindHandler handler) {
  std::lock_guard<std::mutex> lock(table().mu);
  table().classes[kind][class_name] = std::move(handler);
}

KindHandler class_dispatcher(const std::string& kind) {
  return [kind](const CaseContext& ctx, CaseResult& result) {
    KindHandler h;
    std::vector<std::string> known;
    {
      std::lock_guard<std::mutex> lock(table().mu);
      auto& m = table().classes[kind];
      auto it = m.find(ctx.class_name());
      if (it == m.end()) it = m.find(kAnyClass);
      if (it != m.end()) h = it->second;
      for (const auto& [c, _] : m)
        if (c != kAnyClass) known.push_back(c);
    }
    if (!h) {
      mark_unsupported(result, unsupported_class_message(ctx.class_name()) + " (kind '" + kind + "'" +
                                   (known.empty() ? std::string() : "; registered: " + join(known, ", ")) + ")");
      return;
    }
    h(ctx, result);
  };
}

std::string unsupported_class_message(const std::string& class_name) {
  return "no implementation registered for class " + (class_name.empty() ? std::string("(none given)") : class_name);
}

std::string unsupported_kind_message(const std::string& kind) {
  return "unsupported case kind " + (kind.empty() ? std::string("(none given)") : kind);
}

void mark_unsupported(CaseResult& result, const std::string& why) {
  result.supported = false;
  if (result.error.empty()) result.error = why;
  else result.error += "; " + why;
}

CaseResult run_case(const std::filesystem::path& dir) {
  CaseResult result;
  result.case_name = dir.filename().string();
  if (result.case_name.empty()) result.case_name = dir.parent_path().filename().string();
  try {
    CaseContext ctx(dir);
    result.case_name = ctx.case_name();
    result.kind = ctx.kind();
    KindHandler h;
    std::vector<std::string> kinds;
    {
      std::lock_guard<std::mutex> lock(table().mu);
      auto it = table().kinds.find(result.kind);
      if (it != table().kinds.end()) h = it->second;
      for (const auto& [k, _] : table().kinds) kinds.push_back(k);
    }
    if (!h) {
      mark_unsupported(result, unsupported_kind_message(result.kind) +
                                   (kinds.empty() ? std::string() : " (registered kinds: " + join(kinds, ", ") + ")"));
      return result;
    }
    h(ctx, result);
  } catch (const Error& e) {
    if (result.error.empty()) result.error = e.what();
  } catch (const c10::Error& e) {
    if (result.error.empty()) result.error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    if (result.error.empty()) result.error = e.what();
  }
  return result;
}

}  // namespace yeto::parity
