// The component classes the host itself implements, registered before any command runs into
// the host's catalogue of factories and from there into the one component registry
// (plugin::ComponentRegistry; plugins add their own classes when they are loaded).
//
// The registration functions are declared here rather than through their areas' headers,
// which pull in LibTorch: this file then compiles in a second instead of fifteen, and the
// linker still checks every signature.
#include "app/commands.hpp"
#include "io/component_registry.hpp"
#include "pipeline/host_components.hpp"

namespace yeto::schedulers {
void register_scheduler_components(io::ComponentRegistry& registry);
}
namespace yeto::text {
void register_tokenizer_components(io::ComponentRegistry& registry);
}
namespace yeto::models {
void register_model_components(io::ComponentRegistry& registry);
}

namespace yeto::app {

void register_builtin_components(io::ComponentRegistry& registry) {
  schedulers::register_scheduler_components(registry);
  text::register_tokenizer_components(registry);
  models::register_model_components(registry);
  pipeline::ensure_builtin_components();  // and offered in the one component registry
}

}  // namespace yeto::app
