// Every area's command registration, collected into the program's registry.
#pragma once

#include "cli/command.hpp"

namespace yeto::io {
class ComponentRegistry;
}

namespace yeto::cli {

// The full command set of yeto-host, in the order `--help` lists it.
Registry build_registry();

// Registers the host's own component classes (schedulers, tokenizers, VAE, text encoders)
// into `registry`; main() does this for the global registry before dispatching.
void register_builtin_components(io::ComponentRegistry& registry);

// Registration functions, one per area (each defined next to the code it drives).
void register_builtin_commands(Registry& r);  // version, config
void register_sync_commands(Registry& r);     // syncer (host/sync)
void register_sync_learner_commands(Registry& r);  // learner (host/sync)
void register_parity_commands(Registry& r);   // check-parity (host/parity)
void register_io_commands(Registry& r);       // inspect (host/io)
void register_data_commands(Registry& r);     // data check (host/data)
void register_cache_commands(Registry& r);    // cache (host/data/torch)
void register_initmodel_commands(Registry& r);  // init-model (host/initmodel)
void register_plugin_commands(Registry& r);   // plugins (host/plugin)
void register_learner_commands(Registry& r);  // train (host/learner)
void register_sample_commands(Registry& r);   // sample (host/sample)
void register_artifacts_commands(Registry& r);  // merge, export (host/artifacts)

}  // namespace yeto::cli
