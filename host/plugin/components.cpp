#include "plugin/components.hpp"


#include "core/error.hpp"
#include "core/strings.hpp"
#include "yeto/status.hpp"

namespace yeto::plugin {
namespace {

struct COrigin {
  ComponentRegistry* registry;
  std::string origin;
  yeto_component_registry table{};
};

}  // namespace

ComponentRegistry& ComponentRegistry::global() {
  static auto* r = new ComponentRegistry();  // never destroyed: plugins may hold pointers into it
  return *r;
}

void ComponentRegistry::add(const std::string& class_name, yeto_component_ctor ctor, void* ctor_context,
                            const std::string& origin, const std::string& kind) {
  if (class_name.empty() || !ctor) throw Error(origin + ": a component class needs a name and a constructor");
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(class_name);
  if (it != entries_.end() && it->second.origin == origin) {
    // The same plugin registering again (a later pipeline): its kind stays unless given anew.
    it->second = {ctor, ctor_context, origin, kind.empty() ? it->second.kind : kind};
    return;
  }
  if (it != entries_.end())
    throw Error("component class '" + class_name + "' from " + origin + " is already registered by " +
                it->second.origin + "; two plugins cannot both serve one Diffusers class");
  entries_[class_name] = {ctor, ctor_context, origin, kind};
}

std::string ComponentRegistry::kind(const std::string& class_name) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(class_name);
  return it == entries_.end() ? "" : it->second.kind;
}

void ComponentRegistry::set_kind(const std::string& class_name, const std::string& kind) {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(class_name);
  if (it != entries_.end() && !kind.empty()) it->second.kind = kind;
}

bool ComponentRegistry::has(const std::string& class_name) const {
  std::lock_guard lock(mutex_);
  return entries_.count(class_name) != 0;
}

std::string ComponentRegistry::origin(const std::string& class_name) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(class_name);
  return it == entries_.end() ? "" : it->second.origin;
}

std::vector<std::string> ComponentRegistry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [n, e] : entries_) out.push_back(n);
  return out;
}

const yeto_component_v1* ComponentRegistry::create(const std::string& class_name, const std::string& config_json,
                                                   const std::string& component_dir) const {
  Entry e;
  {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(class_name);
    if (it == entries_.end()) {
      std::vector<std::string> known;
      for (const auto& [n, x] : entries_) known.push_back(n);
      throw Error("no component class '" + class_name + "'" + did_you_mean(class_name, known) +
                      " is registered (known: " + join(known, ", ") +
                      "); the model's family plugin registers its own classes",
                  ExitCode::not_found);
    }
    e = it->second;
  }
  sdk::ErrorBuffer err;
  const yeto_component_v1* out = nullptr;
  const yeto_status s = e.ctor(e.context, class_name.c_str(), config_json.c_str(),
                               component_dir.empty() ? nullptr : component_dir.c_str(), &out, err.get());
  if (s != YETO_OK || !out)
    throw Error("constructing component '" + class_name + "' (" + e.origin + ") failed: " +
                (s != YETO_OK ? err.message() : std::string("the constructor returned nothing")));
  if (YETO_ABI_MAJOR(out->abi_version) != YETO_ABI_VERSION_MAJOR ||
      !YETO_HAS_FIELD(yeto_component_v1, out, destroy))
    throw Error("component '" + class_name + "' (" + e.origin + ") has an incompatible table (ABI " +
                    std::to_string(YETO_ABI_MAJOR(out->abi_version)) + ", " + std::to_string(out->struct_size) +
                    " bytes)",
                ExitCode::plugin_abi_mismatch);
  return out;
}

const yeto_component_registry* ComponentRegistry::c_registry(const std::string& origin) {
  auto* o = new COrigin{this, origin, {}};  // lives for the process
  o->table.struct_size = sizeof(yeto_component_registry);
  o->table.abi_version = YETO_ABI_VERSION;
  o->table.context = o;
  o->table.add = [](void* ctx, const char* class_name, yeto_component_ctor ctor, void* ctor_ctx,
                    yeto_error* error) -> yeto_status {
    auto* self = static_cast<COrigin*>(ctx);
    return sdk::guard_basic(error, [&] {
      try {
        self->registry->add(class_name ? class_name : "", ctor, ctor_ctx, self->origin);
      } catch (const Error& e) {
        throw sdk::Failure(YETO_ERR_INVALID_ARGUMENT, e.what());
      }
    });
  };
  return &o->table;
}

}  // namespace yeto::plugin
