// The Hunyuan3D-2.1 shape family plugin, written against the SDK only: the HunYuanDiTPlain
// component class (registered under its class name and its upstream module path, the name
// recorded reference cases use).
//
// The component's forward takes the upstream argument names: `x` [B, N, C] latent tokens, `t`
// [B] flow time in [0, 1] and the image tokens as `contexts.main` (or `contexts`) [B, M, D]. Its
// options may say {"train": true}: the call then runs in training mode (the MoE gates' auxiliary
// losses attach their gradient and are returned as `moe_aux_loss.<gate path>`).
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "hunyuan3d_dit.hpp"
#include "yeto/family/family.hpp"

namespace yeto::hunyuan3d {
namespace {

using nlohmann::json;
using sdk::NamedTensors;

constexpr const char* kDiT = "HunYuanDiTPlain";
constexpr const char* kDiTModule = "hy3dshape.models.denoisers.hunyuandit.HunYuanDiTPlain";

const at::Tensor* find(const NamedTensors& in, const std::string& name) {
  for (const auto& [n, t] : in)
    if (n == name && t.defined()) return &t;
  return nullptr;
}

class DiTComponent : public family::ModelComponent<HunYuanDiTPlain, DiTConfig> {
 public:
  DiTComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kDiT, "is this the `model` state dict of a Hunyuan3D-2.1 shape checkpoint of this configuration?",
                        /*with_buffers=*/false}) {}

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    bool train = false;
    if (!options.empty()) {
      const json o = family::parse_json(options, "HunYuanDiTPlain forward options");
      if (o.is_object() && o.contains("train")) {
        if (!o["train"].is_boolean())
          sdk::fail(YETO_ERR_INVALID_ARGUMENT, "HunYuanDiTPlain forward options: 'train' must be true or false");
        train = o["train"].get<bool>();
      }
    }
    const auto* context = find(in, "contexts.main");
    if (!context) context = find(in, "contexts");
    if (!context)
      sdk::fail(YETO_ERR_NOT_FOUND, "HunYuanDiTPlain forward: no image conditioning ('contexts.main' [B, M, " +
                                        std::to_string(model_->config().context_dim) + "])");
    const bool was_training = model_->is_training();
    model_->train(train);
    NamedTensors out;
    try {
      out.emplace_back("sample", model_->forward(sdk::get(in, "x"), sdk::get(in, "t"), *context));
    } catch (const std::invalid_argument& e) {
      model_->train(was_training);
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    for (const auto& [gate, loss] : model_->moe_aux_losses()) out.emplace_back("moe_aux_loss." + gate, loss);
    model_->train(was_training);
    return out;
  }
};

class Hunyuan3DPlugin : public sdk::Plugin {
 public:
  void register_components(sdk::ComponentRegistry& registry) override {
    registry.add<DiTComponent>(kDiT);
    registry.add<DiTComponent>(kDiTModule);
  }
};

}  // namespace
}  // namespace yeto::hunyuan3d

YETO_PLUGIN(yeto::hunyuan3d::Hunyuan3DPlugin)
