// The commands of yeto-host, collected into the program's registry.
#pragma once

#include "app/command.hpp"

namespace yeto::io {
class ComponentRegistry;
}

namespace yeto::app {

// The full command set of yeto-host, in the order `--help` lists it.
Registry build_registry();

// Registers the host's own component classes (schedulers, tokenizers, VAE, text encoders)
// into `registry`; main() does this for the global registry before dispatching.
void register_builtin_components(io::ComponentRegistry& registry);

// Registration functions, one per command file of host/app (<name>_command.cpp;
// builtin_commands.cpp holds version and config).
void register_builtin_commands(Registry& r);
void register_data_command(Registry& r);
void register_cache_command(Registry& r);
void register_init_model_command(Registry& r);
void register_inspect_command(Registry& r);
void register_check_parity_command(Registry& r);
void register_syncer_command(Registry& r);
void register_report_command(Registry& r);
void register_launch_command(Registry& r);
void register_learner_command(Registry& r);
void register_plugins_command(Registry& r);
void register_train_command(Registry& r);
void register_sample_command(Registry& r);
void register_export_command(Registry& r);
void register_merge_command(Registry& r);

}  // namespace yeto::app
