// The `pipeline_helpers` parity kind: cases that record calls of pipeline-level functions
// (`calculate_shift(...)`, `FluxPipeline._pack_latents(...)`, ...). Each function is looked up
// by the name the case's Python snippet calls it by; an area or family plugin that implements
// one registers it here. Calls of functions nobody registered leave their outputs unchecked
// and the case unsupported, with the function named.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "parity/pyeval.hpp"

namespace yeto::parity {

// `name` as the snippet spells it: "calculate_shift", "FluxPipeline._pack_latents".
void register_pipeline_helper(const std::string& name, py::Function fn);
std::vector<std::string> registered_pipeline_helpers();

// Helpers a case's own class contributes when it runs (a family plugin's static pipeline
// helpers, e.g. `LTXPipeline._pack_latents`): the provider gets the case and returns functions by
// the names its snippets call; they are defined after the registered helpers.
using CaseHelperProvider = std::function<std::map<std::string, py::Function>(const CaseContext&)>;
void set_pipeline_helper_provider(CaseHelperProvider provider);

// Registers the `pipeline_helpers` kind (idempotent).
void register_pipeline_helpers_kind();

}  // namespace yeto::parity
