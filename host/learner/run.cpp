// learner::run(): the pipeline the config names, then the training loop over it.
#include <ATen/ATen.h>

#include "config/config.hpp"
#include "io/repository.hpp"
#include "learner/learner.hpp"
#include "learner/settings.hpp"
#include "learner/trainer.hpp"
#include "pipeline/pipeline.hpp"
#include "runtime/torch_runtime.hpp"
#include "schedulers/scheduler.hpp"

namespace yeto::learner {

RunResult run(const config::Config& cfg, const RunOptions& options, OuterSync* sync) {
  (void)read_settings(cfg);  // a bad setting fails before the model is loaded
  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  pipeline::OpenOptions open;
  open.logical_rank = options.logical_rank;
  auto pipeline = pipeline::Pipeline::open(cfg, open);
  auto model = make_plugin_model(pipeline->plugin(), pipeline->scheduler(), pipeline->denoisers(),
                                 boundary_ratio_of(pipeline->plan(), pipeline->repo().model_index()));
  return train(*model, cfg, options, sync, [&](io::Provenance& p) { pipeline->record_provenance(p); });
}

}  // namespace yeto::learner
