// Parity checking: runs a recorded reference case (a fixture directory in the parity format)
// against this build and compares every output with the tolerances the case declares.
//
// A case directory holds case.json (what was called and how to compare), inputs.safetensors,
// expected.safetensors and the component's config/weights. Nothing here knows a particular
// case: a handler is chosen by case.json `kind`, and each handler interprets the case's
// `class_name` and `calls`. Areas add handlers with register_kind(), typically from a
// `register_<area>_parity_kinds()` function (see all_kinds.hpp for the full set the
// check-parity command uses).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace yeto::parity {

// One compared output.
struct Comparison {
  std::string name;      // the expected key ("loop.prev_sample.3")
  double max_abs = 0.0;  // max |actual - expected|
  double max_rel = 0.0;  // max |actual - expected| / |expected| over entries with expected != 0
  double atol = 0.0;
  double rtol = 0.0;
  bool pass = false;
  std::string note;      // why it failed (shape, dtype, non-finite...) or extra detail
};

struct CaseResult {
  std::string case_name;
  std::string kind;
  std::vector<Comparison> comparisons;
  bool supported = true;  // false: no handler for this kind/class (error says which)
  std::string error;      // unsupported reason or the error that stopped the case
  // True when the case ran, produced at least one comparison, and every one passed.
  bool pass() const;
};

// Tolerance of one expected key, from case.json `compare`.
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

// What a kind handler sees: the case directory, its parsed case.json and its tensors
// (loaded on first use).
class CaseContext {
 public:
  explicit CaseContext(std::filesystem::path dir);
  ~CaseContext();
  CaseContext(const CaseContext&) = delete;
  CaseContext& operator=(const CaseContext&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& case_json() const { return case_; }
  std::string case_name() const;
  std::string kind() const;
  std::string class_name() const;

  // inputs.safetensors / expected.safetensors of the case ({} when the file is absent).
  const std::map<std::string, at::Tensor>& inputs() const;
  const std::map<std::string, at::Tensor>& expected() const;
  bool has_input(const std::string& name) const;
  bool has_expected(const std::string& name) const;
  // Throws yeto::Error (bad_input) naming the case and the missing tensor.
  const at::Tensor& input(const std::string& name) const;
  const at::Tensor& expected(const std::string& name) const;

  // The `compare` entry for `name`; throws when the case declares none.
  Tolerance tolerance(const std::string& name) const;
  // Keys of case.json `compare`, in file order.
  std::vector<std::string> compare_keys() const;

  // Compares `actual` against expected[name] with the case's tolerance for `name`
  // (allclose: |a - e| <= atol + rtol * |e| elementwise; integer and bool tensors must match
  // exactly whatever the tolerance says), appends the Comparison to `result`, and returns
  // whether it passed. A missing expected tensor or tolerance is a failed comparison.
  bool compare(const std::string& name, const at::Tensor& actual, CaseResult& result) const;

 private:
  std::filesystem::path dir_;
  nlohmann::json case_;
  mutable std::unique_ptr<std::map<std::string, at::Tensor>> inputs_;
  mutable std::unique_ptr<std::map<std::string, at::Tensor>> expected_;
};

// Compares two tensors under a tolerance without a case (used by compare() and tests).
Comparison compare_tensors(const std::string& name, const at::Tensor& actual, const at::Tensor& expected,
                           const Tolerance& tol);

// A handler runs every call of the case it understands and records comparisons. It marks
// the result unsupported (result.supported = false, result.error = reason) when it does not
// know the case's class; throwing yeto::Error records the message as a failure.
using KindHandler = std::function<void(const CaseContext&, CaseResult&)>;

// Registers (or replaces) the handler for a case.json `kind`.
void register_kind(const std::string& kind, KindHandler handler);
bool has_kind(const std::string& kind);
std::vector<std::string> registered_kinds();

// Class-level dispatch for handlers that serve many classes of one kind (e.g. "scheduler"):
// register_class(kind, class_name, handler) and a kind handler made by class_dispatcher(kind)
// picks the handler by case.json `class_name`; a class without a handler of its own goes to the
// kind's kAnyClass handler when there is one, else it is reported as "no implementation
// registered for class X".
inline constexpr const char* kAnyClass = "*";
void register_class(const std::string& kind, const std::string& class_name, KindHandler handler);
KindHandler class_dispatcher(const std::string& kind);

// Runs one case directory. Never throws for problems of the case itself: a missing or
// malformed case.json, an unknown kind, or an error inside the handler end up in the
// result (`supported` / `error`).
CaseResult run_case(const std::filesystem::path& dir);

// Message helpers so every handler words unsupported cases the same way.
std::string unsupported_class_message(const std::string& class_name);
std::string unsupported_kind_message(const std::string& kind);
void mark_unsupported(CaseResult& result, const std::string& why);

}  // namespace yeto::parity
