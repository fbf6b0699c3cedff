// fullstep, the tests' full-step plugin: it computes its whole training loss in loss_step, so the
// learner needs neither a scheduler nor a denoiser for it and calls no other training hook. Its
// model is one float32 vector `model.scale` [3] (starting at 0.5) that learns to give back the
// batch's pixels through seeded per-row noise:
//   x = "pixel_values" (or the cached "latents"), e_i ~ N(0, 1) from rows[i].seed,
//   loss = mean((scale * (x + 0.1 e) - x)^2), scale broadcast over the channels.
// Metrics: "mse" (the loss), "rows" (the batch's row count), "training" (1 or 0), "row_sum"
// (the sum of the rows' dataset indices) and "prompted" (rows with a prompt); with an "audio"
// batch tensor also "audio_channels", "audio_samples" and "audio_peak".
// Opened as a pipeline (model_index.json, no components), its plan declares the row inputs the
// repository's model_index.json lists under "yeto_test_inputs" (e.g. audio), and refuses a batch
// without the declared audio. Its generate writes a clip with sound: black frames with a white
// square on frames [F/4, F/2) and a 440 Hz tone over the same time span at 16 kHz, 10 ms longer
// than the frames last.
#include <torch/torch.h>

#include <cmath>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

namespace {

using nlohmann::json;
using yeto::sdk::NamedTensors;

class FullStepPlugin : public yeto::sdk::Plugin {
 public:
  std::string load_pipeline(const std::string& /*model_dir*/, const std::string& model_index_json) override {
    const json index = json::parse(model_index_json);
    json plan = {{"components", json::object()}};
    if (index.contains("yeto_test_inputs")) {
      plan["inputs"] = index["yeto_test_inputs"];
      declared_audio_ = plan["inputs"].contains("audio");
    }
    return plan.dump();
  }

  void prepare(const std::string& /*options_json*/) override {}

  NamedTensors trainable_parameters() override { return {{"model.scale", scale_}}; }

  NamedTensors generate(const std::string& request_json, const NamedTensors& /*inputs*/) override {
    const json r = json::parse(request_json);
    const std::int64_t f = r.value("num_frames", 1), h = r.value("height", 16), w = r.value("width", 16);
    const double fps = r.value("fps", 16.0);
    auto video = torch::zeros({1, 3, f, h, w});
    video.narrow(2, f / 4, f / 2 - f / 4).narrow(3, h / 4, h / 2).narrow(4, w / 4, w / 2).fill_(1.0);
    const int rate = 16000;
    const auto samples = static_cast<std::int64_t>(std::llround(static_cast<double>(f) / fps * rate)) + rate / 100;
    const auto t = torch::arange(samples, torch::kDouble) / rate;
    const double on = static_cast<double>(f / 4) / fps, off = static_cast<double>(f / 2) / fps;
    const auto tone = 0.5 * torch::sin(2 * M_PI * 440 * t) * ((t >= on) & (t < off)).to(torch::kDouble);
    return {{"video", video}, {"audio", tone.to(torch::kFloat).view({1, 1, samples})},
            {"audio_sample_rate", torch::tensor(static_cast<double>(rate))}};
  }

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
    json m = {{"mse", loss.item<double>()},
              {"rows", static_cast<double>(rows.size())},
              {"training", training ? 1.0 : 0.0},
              {"row_sum", row_sum},
              {"prompted", prompted}};
    if (yeto::sdk::has(batch, "audio")) {
      const auto& a = yeto::sdk::get(batch, "audio");
      if (a.dim() != 3 || a.size(0) != x.size(0) || a.scalar_type() != torch::kFloat)
        yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "loss_step: 'audio' is not float32 [B, channels, samples]");
      m["audio_channels"] = static_cast<double>(a.size(1));
      m["audio_samples"] = static_cast<double>(a.size(2));
      m["audio_peak"] = a.abs().max().item<double>();
    } else if (declared_audio_) {
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "loss_step: the plan declares audio but the batch has no 'audio'");
    }
    metrics = m.dump();
    return loss;
  }

 private:
  torch::Tensor scale_ = torch::full({3}, 0.5, torch::kFloat).requires_grad_(true);
  bool declared_audio_ = false;
};

}  // namespace

YETO_PLUGIN(FullStepPlugin)
