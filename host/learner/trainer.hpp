// The inner training loop over a TrainModel: what learner::run() drives after opening the
// pipeline, and what tests drive directly with a plugin instance. Include only where LibTorch
// is already in use.
#pragma once

#include <functional>

#include "learner/learner.hpp"
#include "learner/model.hpp"

namespace yeto::io {
class Provenance;
}

namespace yeto::learner {

// Trains `model` as `cfg` says, writing RUN_DIR (see run()). `record_provenance` adds the
// model's and plugin's records to RUN_DIR/provenance.json (may be empty).
RunResult train(TrainModel& model, const config::Config& cfg, const RunOptions& options, OuterSync* sync,
                const std::function<void(io::Provenance&)>& record_provenance = {});

}  // namespace yeto::learner
