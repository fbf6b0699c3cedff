#include "app/commands.hpp"

namespace yeto::app {

Registry build_registry() {
  Registry r;
  register_builtin_commands(r);
  register_data_command(r, read_declared_inputs);
  register_cache_command(r);
  register_init_model_command(r);
  register_inspect_command(r);
  register_check_parity_command(r);
  register_syncer_command(r);
  register_learner_command(r);
  register_plugins_command(r);
  register_train_command(r);
  register_sample_command(r);
  register_export_command(r);
  register_merge_command(r);
  register_report_command(r);
  register_launch_command(r);
  return r;
}

}  // namespace yeto::app
