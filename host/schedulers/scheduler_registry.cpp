// The scheduler factory: Diffusers class name -> implementation, and its registration in the
// component registry.
#include <functional>
#include <map>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "schedulers/ddpm.hpp"
#include "schedulers/flow_match_euler.hpp"
#include "schedulers/multistep.hpp"
#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_config.hpp"

namespace yeto::schedulers {
namespace {

using Maker = std::function<std::shared_ptr<Scheduler>(const nlohmann::json&, const std::string&)>;

const std::map<std::string, Maker>& makers() {
  static const std::map<std::string, Maker> m = {
      {"FlowMatchEulerDiscreteScheduler",
       [](const nlohmann::json& c, const std::string& l) { return std::make_shared<FlowMatchEulerDiscreteScheduler>(c, l); }},
      {"DDPMScheduler", [](const nlohmann::json& c, const std::string& l) { return std::make_shared<DDPMScheduler>(c, l); }},
      {"DPMSolverMultistepScheduler",
       [](const nlohmann::json& c, const std::string& l) { return std::make_shared<DPMSolverMultistepScheduler>(c, l); }},
      {"UniPCMultistepScheduler",
       [](const nlohmann::json& c, const std::string& l) { return std::make_shared<UniPCMultistepScheduler>(c, l); }},
  };
  return m;
}

}  // namespace

std::vector<std::string> scheduler_classes() {
  std::vector<std::string> out;
  for (const auto& [name, _] : makers()) out.push_back(name);
  return out;
}

std::shared_ptr<Scheduler> make_scheduler(const std::string& class_name, const nlohmann::json& config,
                                          const std::string& label) {
  auto it = makers().find(class_name);
  if (it == makers().end())
    throw Error(label + ": no implementation registered for class " + class_name + " (schedulers in this build: " +
                    join(scheduler_classes(), ", ") + ")" + did_you_mean(class_name, scheduler_classes()),
                ExitCode::bad_input);
  return it->second(config, label);
}

std::shared_ptr<Scheduler> load_scheduler(const std::filesystem::path& dir, const std::string& class_name) {
  const auto path = dir / "scheduler_config.json";
  const nlohmann::json config = read_scheduler_config(path);
  std::string cls = class_name;
  if (cls.empty()) {
    if (!config.contains("_class_name") || !config["_class_name"].is_string())
      throw Error(path.string() + ": no `_class_name`; say which scheduler class to build", ExitCode::bad_input);
    cls = config["_class_name"].get<std::string>();
  }
  return make_scheduler(cls, config, path.string());
}

void register_scheduler_components(io::ComponentRegistry& registry) {
  for (const auto& name : scheduler_classes()) {
    registry.add(name, "scheduler", [name](const io::ComponentSource& src) -> std::shared_ptr<io::Component> {
      const auto path = src.dir / "scheduler_config.json";
      // The component source's config may have been parsed already; re-read the file when it
      // exists so Python's -Infinity / NaN spellings are understood.
      nlohmann::json config = src.config;
      if (std::filesystem::exists(path)) config = read_scheduler_config(path);
      return make_scheduler(name, config, path.string());
    });
  }
}

}  // namespace yeto::schedulers
