#include "io/component_registry.hpp"

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::io {

ComponentRegistry& ComponentRegistry::global() {
  static ComponentRegistry registry;
  return registry;
}

void ComponentRegistry::add(const std::string& class_name, const std::string& kind, ComponentFactory factory) {
  if (class_name.empty()) throw Error("cannot register a component with an empty class name");
  if (!factory) throw Error("cannot register component class '" + class_name + "' without a factory");
  std::lock_guard lock(mu_);
  auto it = entries_.find(class_name);
  if (it != entries_.end()) {
    spdlog::debug("component class '{}' registered again (kind {}); the new factory replaces the old one",
                  class_name, kind);
    it->second = Entry{kind, std::move(factory)};
    return;
  }
  entries_.emplace(class_name, Entry{kind, std::move(factory)});
}

bool ComponentRegistry::has(const std::string& class_name) const {
  std::lock_guard lock(mu_);
  return entries_.count(class_name) > 0;
}

std::string ComponentRegistry::kind(const std::string& class_name) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(class_name);
  return it == entries_.end() ? std::string() : it->second.kind;
}

std::shared_ptr<Component> ComponentRegistry::create(const ComponentSource& source) const {
  ComponentFactory factory;
  {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(source.class_name);
    if (it != entries_.end()) factory = it->second.factory;
  }
  if (!factory) {
    std::string msg = "no implementation registered for class " + source.class_name;
    if (!source.dir.empty()) msg += " (component folder " + source.dir.string() + ")";
    const std::string hint = did_you_mean(source.class_name, classes());
    msg += hint.empty() ? std::string(": this build and its loaded plugins do not provide it")
                        : hint;
    throw Error(msg, ExitCode::bad_input);
  }
  auto component = factory(source);
  if (!component)
    throw Error("the factory for class " + source.class_name + " returned nothing (component folder " +
                    source.dir.string() + ")",
                ExitCode::failure);
  return component;
}

std::vector<std::string> ComponentRegistry::classes() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

}  // namespace yeto::io
