#include "app/parity_kinds.hpp"

#include <mutex>

#include "app/plugin_parity_kinds.hpp"
#include "models/model_parity.hpp"
#include "parity/pipeline_helpers.hpp"
#include "schedulers/scheduler_parity.hpp"
#include "text/text_parity.hpp"

namespace yeto::app {

void register_all_parity_kinds() {
  static std::once_flag once;
  std::call_once(once, [] {
    parity::register_pipeline_helpers_kind();
    schedulers::register_scheduler_parity_kinds();
    models::register_model_parity_kinds();
    text::register_text_parity_kinds();
    register_plugin_parity_kinds();
  });
}

}  // namespace yeto::app
