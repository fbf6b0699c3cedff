// A call of a pipeline's static helper (`FluxPipeline._pack_latents(latents, 2, 16, 8, 12)`) as
// check-parity hands it to a family's pipeline-helpers component: forward options
// {"method": NAME, "args": [...], "kwargs": {...}}, a tensor argument {"tensor": INPUT} naming
// one of the forward inputs, a dtype argument its name ("float32"). A family registers such a
// component under its pipeline class and returns the helper's value as the output "result".
// Every accessor throws std::invalid_argument "argument '<name>' must be ..." (PipelineHelpers
// prefixes "<Class>.<method>: ").
// PipelineHelpers below is the component around it. Header-only; plugins only (it reads
// tensors through yeto/plugin.hpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

namespace yeto::family {

class HelperCall {
 public:
  HelperCall(std::string pipeline_class, const yeto::sdk::NamedTensors& inputs, const std::string& options_json)
      : cls_(std::move(pipeline_class)), in_(inputs) {
    const auto o = nlohmann::json::parse(options_json, nullptr, false);
    if (!o.is_object()) throw std::invalid_argument("the helper call's options are not a JSON object");
    method_ = o.value("method", std::string());
    args_ = o.value("args", nlohmann::json::array());
    kwargs_ = o.value("kwargs", nlohmann::json::object());
  }

  const std::string& method() const { return method_; }

  at::Tensor tensor(std::size_t pos, const char* name) const {
    const nlohmann::json* v = value(pos, name);
    if (!v || !v->is_object() || !v->contains("tensor") || !(*v)["tensor"].is_string()) bad(name, "a tensor");
    return yeto::sdk::get(in_, (*v)["tensor"].get<std::string>());
  }
  std::int64_t integer(std::size_t pos, const char* name, std::int64_t fallback) const {
    const nlohmann::json* v = value(pos, name);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number_integer()) bad(name, "an integer");
    return v->get<std::int64_t>();
  }
  double number(std::size_t pos, const char* name, double fallback) const {
    const nlohmann::json* v = value(pos, name);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number()) bad(name, "a number");
    return v->get<double>();
  }
  at::ScalarType dtype(std::size_t pos, const char* name, at::ScalarType fallback) const {
    const nlohmann::json* v = value(pos, name);
    if (!v || v->is_null()) return fallback;
    const std::string s = v->is_string() ? v->get<std::string>() : "";
    if (s == "float32") return at::kFloat;
    if (s == "float64") return at::kDouble;
    if (s == "float16") return at::kHalf;
    if (s == "bfloat16") return at::kBFloat16;
    bad(name, "a floating dtype (float32, float64, float16, bfloat16)");
  }

  // "<Class> has no helper '<method>' here (<known>)": the message of a YETO_ERR_UNSUPPORTED.
  std::string unknown(const std::string& known) const {
    return cls_ + " has no helper '" + method_ + "' here (" + known + ")";
  }

 private:
  const nlohmann::json* value(std::size_t pos, const char* name) const {
    if (pos < args_.size()) return &args_[pos];
    const auto it = kwargs_.find(name);
    return it == kwargs_.end() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const char* name, const char* what) const {
    throw std::invalid_argument(std::string("argument '") + name + "' must be " + what);
  }

  std::string cls_;
  const yeto::sdk::NamedTensors& in_;
  std::string method_;
  nlohmann::json args_, kwargs_;
};

// A family's pipeline class as a component whose forward runs its static helpers. Derive,
// implement run(), and register it under the pipeline class (registry.add<...>("LTXPipeline")).
// A std::invalid_argument (a bad argument, from HelperCall or the family's own code) becomes
// YETO_ERR_INVALID_ARGUMENT "<Class>.<method>: ...", a method run() does not serve
// YETO_ERR_UNSUPPORTED listing `known`; it has no parameters and accepts no weights.
class PipelineHelpers : public yeto::sdk::Component {
 public:
  PipelineHelpers(std::string pipeline_class, std::string known)
      : cls_(std::move(pipeline_class)), known_(std::move(known)) {}

  yeto::sdk::NamedTensors forward(const yeto::sdk::NamedTensors& inputs, const std::string& options) final {
    std::string where = cls_;
    try {
      const HelperCall call(cls_, inputs, options);
      where += "." + call.method();
      const at::Tensor result = run(call);
      if (!result.defined()) yeto::sdk::fail(YETO_ERR_UNSUPPORTED, call.unknown(known_));
      return {{"result", result}};
    } catch (const std::invalid_argument& e) {
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": " + e.what());
    }
  }
  yeto::sdk::NamedTensors parameters() final { return {}; }
  void load_weights(const yeto::sdk::NamedTensors& weights, bool) final {
    if (!weights.empty()) yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, cls_ + " helpers have no weights");
  }

 protected:
  // The helper's value; an undefined tensor for a method this family does not serve. Throws
  // std::invalid_argument for bad arguments (HelperCall's accessors do).
  virtual at::Tensor run(const HelperCall& call) = 0;

 private:
  std::string cls_, known_;
};

}  // namespace yeto::family
