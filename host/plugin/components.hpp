// The one registry of component classes keyed by Diffusers `_class_name`: the host's built-ins
// (offered through the same C constructor table, origin "host") and the classes plugins
// register (origin "plugin NAME"), each with its kind ("denoiser", "vae", "text_encoder",
// "tokenizer", "scheduler", ...). One per process. Torch-free: components cross as C tables.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "yeto/plugin.h"

namespace yeto::plugin {

class ComponentRegistry {
 public:
  static ComponentRegistry& global();

  // Throws yeto::Error when `class_name` is already registered by another origin (naming
  // both); the same origin registering it again replaces its constructor.
  // `kind` may be empty (a plugin's class until a plan names its kind).
  void add(const std::string& class_name, yeto_component_ctor ctor, void* ctor_context, const std::string& origin,
           const std::string& kind = "");
  bool has(const std::string& class_name) const;
  std::string origin(const std::string& class_name) const;  // "host" or "plugin NAME"; "" when unknown
  std::string kind(const std::string& class_name) const;    // "" when unknown or not yet known
  // The kind a pipeline plan gives a class (plugins register classes without one); ignored for
  // an unknown class.
  void set_kind(const std::string& class_name, const std::string& kind);
  std::vector<std::string> names() const;

  // Constructs a component; the caller owns it (destroy()). Throws yeto::Error: not_found
  // with a suggestion for an unknown class, failure with the constructor's message.
  const yeto_component_v1* create(const std::string& class_name, const std::string& config_json,
                                  const std::string& component_dir) const;

  // The C view handed to a plugin's register_components; registrations are tagged with
  // `origin`. Lives for the process.
  const yeto_component_registry* c_registry(const std::string& origin);

 private:
  struct Entry {
    yeto_component_ctor ctor = nullptr;
    void* context = nullptr;
    std::string origin;
    std::string kind;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

// Destroys a component when it goes out of scope.
struct ComponentDeleter {
  void operator()(const yeto_component_v1* c) const {
    if (c && c->destroy) c->destroy(c->self);
  }
};
using ComponentPtr = std::unique_ptr<const yeto_component_v1, ComponentDeleter>;

}  // namespace yeto::plugin
