// learner::run(): the pipeline the config names, then the training loop over it.
#include <ATen/ATen.h>

#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/error.hpp"
#include "data/cache_contract.hpp"
#include "data/options.hpp"
#include "data/source.hpp"
#include "io/repository.hpp"
#include "island/collectives.hpp"
#include "learner/learner.hpp"
#include "learner/settings.hpp"
#include "learner/trainer.hpp"
#include "pipeline/cache_encoder.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/host_api.hpp"
#include "runtime/torch_runtime.hpp"
#include "schedulers/scheduler.hpp"
#include "yeto/tensor.hpp"

namespace yeto::learner {
namespace {

namespace fs = std::filesystem;

// A dataset directory made by `yeto-host cache` (it holds yeto_diffusion_cache.json) must
// have been encoded by this pipeline -- same model, component weights and data.*
// preprocessing -- or its latents and embeddings mean something else: refuse it before the
// first step. Both data.path and validation.data are checked against the run's data.*.
void check_cache_datasets(const config::Config& cfg, const pipeline::Pipeline& pipeline) {
  const auto options = data::data_options(cfg);
  std::vector<data::DataOptions> sources;
  if (!options.source.empty()) sources.push_back(options);
  if (auto v = data::validation_data_options(cfg)) sources.push_back(*v);
  for (const auto& s : sources) {
    const fs::path dir = data::resolve_source(s).root();
    std::error_code ec;
    if (!fs::is_regular_file(dir / data::kCacheContractFile, ec)) continue;
    try {
      pipeline::validate_cache(dir, pipeline, options);
    } catch (const Error& e) {
      throw Error(s.source_key + " = \"" + s.source + "\": " + e.what(), e.code());
    }
    spdlog::info("{}: cache dataset {} matches the model, its components and data.* preprocessing", s.source_key,
                 dir.string());
  }
}

// train.shard = "fsdp": the island's collectives as the plugin's shard group (one rank: a
// SingleRank of its own, so a one-rank island takes the same sharded code path).
class IslandShards final : public plugin::ShardGroup {
 public:
  explicit IslandShards(island::Collectives* ranks) : ranks_(ranks ? ranks : &single_) {}
  int rank() const override { return ranks_->rank(); }
  int world_size() const override { return ranks_->world_size(); }
  void all_gather(yeto_tensor shard, yeto_tensor out) override {
    const at::Tensor s = sdk::borrow(shard);
    at::Tensor o = sdk::borrow(out);
    ranks_->all_gather(s, o);
  }

 private:
  island::SingleRank single_;
  island::Collectives* ranks_;
};

}  // namespace

RunResult run(const config::Config& cfg, const RunOptions& options, OuterSync* sync) {
  (void)read_settings(cfg);  // a bad setting fails before the model is loaded
  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  pipeline::OpenOptions open;
  open.logical_rank = options.logical_rank;
  if (cfg.get_string("train.shard") == "fsdp") open.shard_group = std::make_shared<IslandShards>(options.ranks);
  auto pipeline = pipeline::Pipeline::open(cfg, open);
  check_cache_datasets(cfg, *pipeline);
  if (open.shard_group && open.shard_group->world_size() > 1 && pipeline->denoisers().size() > 1)
    throw UsageError("train.shard = \"fsdp\" over " + std::to_string(open.shard_group->world_size()) +
                     " ranks: this pipeline has " + std::to_string(pipeline->denoisers().size()) +
                     " denoisers, whose rows each rank routes by its own timesteps, so the ranks would not run "
                     "(and gather) the same denoiser blocks in lock-step; sharding a multi-denoiser pipeline is "
                     "not built: use train.shard = \"ddp\"");
  auto model = make_plugin_model(pipeline->plugin(), pipeline->scheduler(), pipeline->denoisers(),
                                 boundary_ratio_of(pipeline->plan(), pipeline->repo().model_index()));
  RunOptions with_inputs = options;
  with_inputs.inputs = pipeline::declared_row_inputs(*pipeline, &with_inputs.inputs_from);
  return train(*model, cfg, with_inputs, sync, [&](io::Provenance& p) { pipeline->record_provenance(p); });
}

}  // namespace yeto::learner
