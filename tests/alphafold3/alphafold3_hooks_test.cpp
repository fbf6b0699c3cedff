// Every training hook of the alphafold3 plugin, called directly through the host's plugin
// loader, refuses with the reason (the model parameters' terms), not with a generic "unsupported".
#include <gtest/gtest.h>

#include <filesystem>

#include <ATen/ATen.h>

#include "config/config.hpp"
#include "core/error.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"

namespace {

yeto::plugin::Instance& alphafold3() {
  static const yeto_host_api* api = [] {
    yeto::plugin::HostApiOptions h;
    h.plugin_name = "alphafold3";
    return yeto::plugin::make_host_api(h);
  }();
  const auto options =
      yeto::plugin::LoaderOptions::from_config(yeto::config::Config(), {std::filesystem::path(YETO_STAGE_DIR)});
  static yeto::plugin::Instance instance(yeto::plugin::load("alphafold3", options, api),
                                         R"({"alphafold3.accept_model_parameter_terms": true})");
  return instance;
}

void expect_refused(const std::function<void()>& hook, const std::string& name) {
  try {
    hook();
    ADD_FAILURE() << name << " did not refuse";
  } catch (const yeto::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(unsupported): alphafold3: " + name + ": AlphaFold 3 is not trained here, by design"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("non-commercial use only"), std::string::npos) << m;
  }
}

}  // namespace

TEST(AlphaFold3Hooks, EveryTrainingHookRefusesWithTheReason) {
  auto& p = alphafold3();
  EXPECT_TRUE(p.has(YETO_CAP_TRAINABLE) && p.has(YETO_CAP_LOSS_STEP) && p.has(YETO_CAP_PIPELINE) && p.has(YETO_CAP_GENERATE));
  EXPECT_FALSE(p.has(YETO_CAP_ARTIFACTS) || p.has(YETO_CAP_DENOISER) || p.has(YETO_CAP_ENCODE_MEDIA));
  expect_refused([&] { p.prepare(R"({"tuning": "lora"})"); }, "training or export (prepare)");
  expect_refused([&] { p.trainable_parameters(); }, "trainable_parameters");
  std::string metrics;
  expect_refused([&] { p.loss_step(R"([{"row": 0, "prompt": "", "seed": 1, "training": true}])", {}, metrics); },
                 "loss_step");
  // Loading the (weightless) pipeline is what sampling does: it is not refused.
  EXPECT_EQ(p.load_pipeline("/nowhere", R"({"_class_name": "AlphaFold3"})"), R"({"components": {}})");
}
