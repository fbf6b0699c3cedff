// The commands of yeto-host, collected into the program's registry.
#pragma once

#include <functional>
#include <string>

#include "app/command.hpp"
#include "data/options.hpp"

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
// `data check` applies what the run's model declares of its rows (its plugin's plan) through
// `declared_inputs`, given by the program (the reader opens the plugin, a LibTorch part).
using DeclaredInputsReader = std::function<data::RowInputs(const config::Config& cfg, std::string* from)>;
void register_data_command(Registry& r, DeclaredInputsReader declared_inputs = {});
// The reader `yeto-host` gives `data check`: the plugin's plan only, no component built.
data::RowInputs read_declared_inputs(const config::Config& cfg, std::string* from);
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
