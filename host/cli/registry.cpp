#include "cli/commands.hpp"

namespace yeto::cli {

Registry build_registry() {
  Registry r;
  register_builtin_commands(r);
  register_data_commands(r);
  register_cache_commands(r);
  register_initmodel_commands(r);
  register_io_commands(r);
  register_parity_commands(r);
  register_sync_commands(r);
  register_sync_learner_commands(r);
  register_plugin_commands(r);
  register_learner_commands(r);
  register_sample_commands(r);
  register_artifacts_commands(r);
  return r;
}

}  // namespace yeto::cli
