// The tinyden and fullstep test plugins (in-tree build, stage/plugins) as learner TrainModels, for
// the loop tests and the test driver. Each call makes a fresh instance with the same initial weights.
#pragma once

#include <filesystem>
#include <memory>

#include "config/config.hpp"
#include "learner/model.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "schedulers/scheduler.hpp"

namespace yeto::learner::test {

struct TinyDenModel {
  std::unique_ptr<plugin::Instance> instance;
  std::unique_ptr<TrainModel> model;
};

inline TinyDenModel open_tinyden_model(std::uint64_t seed = 0) {
  static const yeto_host_api* api = [seed] {
    plugin::HostApiOptions h;
    h.plugin_name = "tinyden";
    h.seed = seed;
    return plugin::make_host_api(h);
  }();
  const auto options = plugin::LoaderOptions::from_config(config::Config(), {std::filesystem::path(YETO_STAGE_DIR)});
  const auto& loaded = plugin::load("tinyden", options, api);
  TinyDenModel m;
  m.instance = std::make_unique<plugin::Instance>(loaded, "{}");
  m.instance->prepare(R"({"in_channels": 4, "seed": 3})");
  auto scheduler = schedulers::make_scheduler("FlowMatchEulerDiscreteScheduler",
                                              {{"num_train_timesteps", 1000}, {"shift", 1.0}});
  m.model = make_plugin_model(*m.instance, scheduler, {"transformer"}, std::nullopt);
  return m;
}

// The fullstep test plugin (stage/plugins): a model that computes its whole loss in loss_step,
// made without a scheduler or a denoiser.
inline TinyDenModel open_fullstep_model() {
  static const yeto_host_api* api = [] {
    plugin::HostApiOptions h;
    h.plugin_name = "fullstep";
    return plugin::make_host_api(h);
  }();
  const auto options = plugin::LoaderOptions::from_config(config::Config(), {std::filesystem::path(YETO_STAGE_DIR)});
  const auto& loaded = plugin::load("fullstep", options, api);
  TinyDenModel m;
  m.instance = std::make_unique<plugin::Instance>(loaded, "{}");
  m.model = make_plugin_model(*m.instance, nullptr, {}, std::nullopt);
  return m;
}

}  // namespace yeto::learner::test
