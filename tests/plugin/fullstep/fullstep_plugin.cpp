// fullstep, the tests' full-step plugin: it computes its whole training loss in loss_step, so the
// learner needs neither a scheduler nor a denoiser for it and calls no other training hook. Its
// model is one float32 vector `model.scale` [3] (starting at 0.5) that learns to give back the
// batch's pixels through seeded per-row noise:
//   x = "pixel_values" (or the cached "latents"), e_i ~ N(0, 1) from rows[i].seed,
//   loss = mean((scale * (x + 0.1 e) - x)^2), scale broadcast over the channels.
// Metrics: "mse" (the loss), "rows" (the batch's row count), "training" (1 or 0), "row_sum"
// (the sum of the rows' dataset indices) and "prompted" (rows with a prompt).
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

namespace {

using nlohmann::json;
using yeto::sdk::NamedTensors;

class FullStepPlugin : public yeto::sdk::Plugin {
 public:
  NamedTensors trainable_parameters() override { return {{"model.scale", scale_}}; }

  torch::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics) override {
    const json rows = json::parse(rows_json);
    if (!rows.is_array() || rows.empty()) yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "loss_step: no rows");
    const auto& x = yeto::sdk::has(batch, "pixel_values") ? yeto::sdk::get(batch, "pixel_values")
                                                           : yeto::sdk::get(batch, "latents");
    if (x.size(0) != static_cast<std::int64_t>(rows.size()))
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "loss_step: " + std::to_string(rows.size()) + " rows for a batch of " +
                                                     std::to_string(x.size(0)));
    std::vector<torch::Tensor> noise;
    double row_sum = 0, prompted = 0;
    bool training = false;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      auto gen = at::make_generator<at::CPUGeneratorImpl>(r.at("seed").get<std::uint64_t>());
      noise.push_back(at::randn(x[static_cast<std::int64_t>(i)].sizes(), gen, torch::kFloat));
      row_sum += r.at("row").get<double>();
      prompted += r.at("prompt").get<std::string>().empty() ? 0 : 1;
      training = training || r.at("training").get<bool>();
    }
    const auto e = torch::stack(noise);
    std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
    shape[1] = scale_.size(0);
    const auto pred = scale_.view(shape) * (x.to(torch::kFloat) + 0.1 * e);
    const auto loss = torch::mse_loss(pred, x.to(torch::kFloat));
    metrics = json{{"mse", loss.item<double>()},
                   {"rows", static_cast<double>(rows.size())},
                   {"training", training ? 1.0 : 0.0},
                   {"row_sum", row_sum},
                   {"prompted", prompted}}
                  .dump();
    return loss;
  }

 private:
  torch::Tensor scale_ = torch::full({3}, 0.5, torch::kFloat).requires_grad_(true);
};

}  // namespace

YETO_PLUGIN(FullStepPlugin)
