// A hook for commands that look at a model without loading it (`inspect`): the family plugin
// the run names registers its component classes first, so they show as served by that plugin
// (plugin::ComponentRegistry::origin). yeto_pipeline installs the loader
// (pipeline::install_plugin_class_loader); without one load_model_classes does nothing.
// Torch-free.
#pragma once

#include <functional>
#include <string>

namespace yeto::config {
class Config;
}
namespace yeto::io {
class DiffusersRepo;
}

namespace yeto::plugin {

// model_spec: the model as the user named it (alias, org/name id or directory).
using ModelClassLoader =
    std::function<void(const config::Config& cfg, const std::string& model_spec, const io::DiffusersRepo& repo)>;

void set_model_class_loader(ModelClassLoader loader);
void load_model_classes(const config::Config& cfg, const std::string& model_spec, const io::DiffusersRepo& repo);

}  // namespace yeto::plugin
