// Replays scheduler parity cases: each case.json call is a Python snippet over a scheduler
// (`s = <fresh>; s.set_timesteps(4); s.step(...)`), evaluated by the parity interpreter with
// the scheduler wrapped as an object.
#include "schedulers/scheduler_parity.hpp"

#include <ATen/ATen.h>

#include "core/error.hpp"
#include "parity/parity.hpp"
#include "parity/pipeline_helpers.hpp"
#include "parity/pyeval.hpp"
#include "schedulers/ddpm.hpp"
#include "schedulers/flow_match_euler.hpp"
#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_config.hpp"

namespace yeto::schedulers {
namespace {

namespace py = parity::py;

// The snippets' name for the case directory's scheduler_config.json.
const char* const kConfigToken = "<scheduler_config.json>";

class SchedulerObject : public py::Object {
 public:
  explicit SchedulerObject(std::shared_ptr<Scheduler> s) : s_(std::move(s)) {}
  std::string type_name() const override { return s_->class_name(); }

  py::Value attr(const std::string& name) override {
    if (name == "timesteps") return s_->timesteps();
    if (name == "init_noise_sigma") return s_->init_noise_sigma();
    if (name == "sigmas" && s_->sigmas().defined()) return s_->sigmas();
    if (name == "num_train_timesteps") return s_->num_train_timesteps();
    at::Tensor t = s_->attribute(name);
    if (!t.defined()) throw py::Unsupported(s_->class_name() + " has no attribute `" + name + "` in this build");
    if (name == "this_order" || name == "step_index" || name == "lower_order_nums") return t.item<std::int64_t>();
    return t;
  }

  py::Value call(const std::string& method, const py::ValueList& args, const py::Kwargs& kw) override {
    if (method == "set_timesteps") {
      SetTimestepsArgs a;
      if (const py::Value* n = py::opt_arg(args, kw, 0, "num_inference_steps"); n && !n->is_none())
        a.num_inference_steps = n->to_int();
      if (auto it = kw.find("sigmas"); it != kw.end() && !it->second.is_none()) a.sigmas = it->second.to_doubles();
      if (auto it = kw.find("mu"); it != kw.end() && !it->second.is_none()) a.mu = it->second.to_double();
      s_->set_timesteps(a);
      return py::None{};
    }
    if (method == "step") {
      const at::Tensor out = s_->step(py::arg(args, kw, 0, "model_output").to_tensor(),
                                      py::arg(args, kw, 1, "timestep").to_tensor(),
                                      py::arg(args, kw, 2, "sample").to_tensor());
      if (auto it = kw.find("return_dict"); it != kw.end() && it->second.to_bool())
        throw Error("step(..., return_dict=True) is not replayable; the cases use return_dict=False", ExitCode::bad_input);
      return py::Value(py::ValueList{py::Value(out)});
    }
    if (method == "add_noise") {
      return s_->add_noise(py::arg(args, kw, 0, "original_samples").to_tensor(),
                           py::arg(args, kw, 1, "noise").to_tensor(), py::arg(args, kw, 2, "timesteps").to_tensor());
    }
    if (method == "scale_noise") {
      auto fm = std::dynamic_pointer_cast<FlowMatchEulerDiscreteScheduler>(s_);
      if (!fm) throw py::Unsupported(s_->class_name() + ".scale_noise is not implemented");
      return fm->scale_noise(py::arg(args, kw, 0, "sample").to_tensor(), py::arg(args, kw, 1, "timestep").to_tensor(),
                             py::arg(args, kw, 2, "noise").to_tensor());
    }
    if (method == "get_velocity") {
      auto ddpm = std::dynamic_pointer_cast<DDPMScheduler>(s_);
      if (!ddpm) throw py::Unsupported(s_->class_name() + ".get_velocity is not implemented");
      return ddpm->get_velocity(py::arg(args, kw, 0, "sample").to_tensor(), py::arg(args, kw, 1, "noise").to_tensor(),
                                py::arg(args, kw, 2, "timesteps").to_tensor());
    }
    throw py::Unsupported(s_->class_name() + "." + method + "() is not implemented in this build");
  }

 private:
  std::shared_ptr<Scheduler> s_;
};

py::Value calculate_shift_fn(const py::ValueList& args, const py::Kwargs& kw) {
  auto num = [&](std::size_t pos, const char* name, double fallback) {
    const py::Value* v = py::opt_arg(args, kw, pos, name);
    return v ? v->to_double() : fallback;
  };
  return calculate_shift(py::arg(args, kw, 0, "image_seq_len").to_double(), num(1, "base_seq_len", 256),
                         num(2, "max_seq_len", 4096), num(3, "base_shift", 0.5), num(4, "max_shift", 1.15));
}

void run_scheduler_case(const parity::CaseContext& ctx, parity::CaseResult& result) {
  const auto config_path = ctx.dir() / "scheduler_config.json";
  const nlohmann::json config = read_scheduler_config(config_path);
  const std::string cls = ctx.class_name();
  const std::string label = config_path.string();
  py::Interpreter interp(ctx);
  interp.define("scheduler_config", py::Value(std::string(kConfigToken)));
  for (const auto& name : scheduler_classes()) {
    interp.define_function(name + ".from_config", [name, config, label](const py::ValueList& a, const py::Kwargs& k) {
      const py::Value& c = py::arg(a, k, 0, "config");
      if (!std::holds_alternative<std::string>(c.v) || c.to_string() != kConfigToken)
        throw Error("from_config: only the case's scheduler_config is supported", ExitCode::bad_input);
      return py::Value(std::static_pointer_cast<py::Object>(
          std::make_shared<SchedulerObject>(make_scheduler(name, config, label))));
    });
  }
  interp.set_fresh([cls, config, label] {
    return py::Value(
        std::static_pointer_cast<py::Object>(std::make_shared<SchedulerObject>(make_scheduler(cls, config, label))));
  });
  interp.define_function("calculate_shift", calculate_shift_fn);
  interp.run_calls(result);
}

}  // namespace

void register_scheduler_parity_kinds() {
  parity::register_kind("scheduler", parity::class_dispatcher("scheduler"));
  for (const auto& name : scheduler_classes()) parity::register_class("scheduler", name, run_scheduler_case);
  parity::register_pipeline_helper("calculate_shift", calculate_shift_fn);
}

}  // namespace yeto::schedulers
