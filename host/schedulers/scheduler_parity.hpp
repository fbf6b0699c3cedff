// The `scheduler` parity kind (cases whose case.json `kind` is "scheduler") and the
// scheduler-related pipeline helpers (calculate_shift) of the `pipeline_helpers` kind.
#pragma once

namespace yeto::schedulers {

void register_scheduler_parity_kinds();

}  // namespace yeto::schedulers
