// tinyden: the tests' own LibTorch plugin, the smallest one that trains.
//
// It registers one component class, "YetoTinyDenoiser" (a per-pixel channel mixer with a
// timestep embedding and an optional prompt embedding), and implements every hook of the
// training path: pipeline planning, trainable parameters under canonical names, media and
// prompt encoders (stand-ins for a VAE and a text encoder, so the generic learner trains it
// from raw images and captions), denoiser keyword contributions and forward, prediction/target
// alignment, artifact save/load (its trained tensors in its own file, which `export` writes
// and `sample` reads) and a few-step generate. The learner, island, sync, cache, pipeline,
// trust and artifact suites train it with exact, small numbers; plugin authors start from
// sdk/examples/template instead (a real DiT family on the installed kit).
#include <torch/torch.h>

#include <yeto/plugin.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using yeto::sdk::NamedTensors;

// Reads an integer field from a flat JSON object ("channels": 4); the plugin keeps clear of
// a JSON dependency (and of the family kit: it tests the bare SDK).
int json_int(const std::string& json, const std::string& key, int fallback) {
  const auto k = json.find("\"" + key + "\"");
  if (k == std::string::npos) return fallback;
  const auto colon = json.find(':', k);
  if (colon == std::string::npos) return fallback;
  return std::stoi(json.substr(colon + 1));
}

// The prompts of a JSON array of strings (["a", "b\"c"]); without a JSON dependency this
// reads just that shape (escapes other than \" and \\ are kept as written).
std::vector<std::string> json_strings(const std::string& json) {
  std::vector<std::string> out;
  bool in = false;
  std::string cur;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (!in) {
      if (c == '"') {
        in = true;
        cur.clear();
      }
    } else if (c == '\\' && i + 1 < json.size()) {
      cur += json[++i];
    } else if (c == '"') {
      in = false;
      out.push_back(cur);
    } else {
      cur += c;
    }
  }
  return out;
}

// x: [B, C, H, W], t: [B] in [0, 1], optional prompt embedding e: [B, C]  ->  [B, C, H, W]
struct TinyDenoiserImpl : torch::nn::Module {
  explicit TinyDenoiserImpl(int channels) {
    proj = register_module("proj", torch::nn::Linear(channels, channels));
    time_embed = register_parameter("time_embed", torch::zeros({channels}));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& e = {}) {
    auto h = proj->forward(x.permute({0, 2, 3, 1}));                  // mix channels per pixel
    h = h + t.view({-1, 1, 1, 1}) * time_embed;                       // timestep conditioning
    if (e.defined()) h = h + e.view({e.size(0), 1, 1, e.size(1)});    // prompt conditioning
    return torch::tanh(h).permute({0, 3, 1, 2}).contiguous();
  }
  torch::nn::Linear proj{nullptr};
  torch::Tensor time_embed;
};
TORCH_MODULE(TinyDenoiser);

class TinyDenoiserComponent : public yeto::sdk::Component {
 public:
  TinyDenoiserComponent(const std::string& config_json, const std::string& /*dir*/)
      : model_(json_int(config_json, "in_channels", 4)) {
    torch::manual_seed(static_cast<std::uint64_t>(json_int(config_json, "seed", 0)));
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) p.normal_(0.0, 0.2);
  }
  NamedTensors forward(const NamedTensors& in, const std::string& /*options*/) override {
    return {{"sample", model_->forward(yeto::sdk::get(in, "hidden_states"), yeto::sdk::get(in, "timestep"))}};
  }
  NamedTensors parameters() override {
    NamedTensors out;
    for (const auto& p : model_->named_parameters()) out.emplace_back(p.key(), p.value());
    return out;
  }
  void load_weights(const NamedTensors& weights, bool strict) override {
    torch::NoGradGuard no_grad;
    auto params = model_->named_parameters();
    for (const auto& [name, t] : weights) {
      auto* p = params.find(name);
      if (!p) {
        if (strict) yeto::sdk::fail(YETO_ERR_NOT_FOUND, "YetoTinyDenoiser has no parameter '" + name + "'");
        continue;
      }
      p->copy_(t);
    }
  }
  TinyDenoiser& model() { return model_; }
  int channels() const { return static_cast<int>(model_->proj->options.in_features()); }

 private:
  TinyDenoiser model_;
};

class TinyDenPlugin : public yeto::sdk::Plugin {
 public:
  std::string load_pipeline(const std::string& model_dir, const std::string& /*model_index_json*/) override {
    return "{\"components\": {\"transformer\": {\"class\": \"YetoTinyDenoiser\", \"dir\": \"" + model_dir +
           "/transformer\"}}}";
  }

  void prepare(const std::string& options_json) override {
    denoiser_ = std::make_unique<TinyDenoiserComponent>(options_json, "");
    yeto::sdk::Host::info("tinyden: prepared a tiny denoiser");
  }

  void register_components(yeto::sdk::ComponentRegistry& registry) override {
    registry.add<TinyDenoiserComponent>("YetoTinyDenoiser");
  }

  // Canonical names: "<component>.<Diffusers parameter name>", in module order.
  NamedTensors trainable_parameters() override {
    NamedTensors out;
    for (auto& [name, t] : denoiser().parameters()) {
      t.set_requires_grad(true);
      out.emplace_back("transformer." + name, t);
    }
    return out;
  }

  // Stand-in for a VAE: 2x2 average pooling of the RGB pixels in [-1, 1]; latent channel c
  // is colour c for c < 3 and the mean brightness beyond. Deterministic, so "sample" and
  // "seed" do not matter here (a real VAE samples its latent distribution with that seed).
  NamedTensors encode_media(const NamedTensors& media, const std::string& /*options*/) override {
    const auto& pixels = yeto::sdk::get(media, "pixel_values");
    if (pixels.dim() != 4 || pixels.size(1) != 3)
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tinyden encodes images [B, 3, H, W] only");
    const auto rgb = torch::avg_pool2d(pixels.to(torch::kFloat), 2);
    const auto grey = rgb.mean(1, true);
    std::vector<torch::Tensor> channels;
    for (int c = 0; c < denoiser().channels(); ++c) channels.push_back(c < 3 ? rgb.narrow(1, c, 1) : grey);
    return {{"latents", torch::cat(channels, 1)}};
  }

  // Stand-in for a text encoder: a fixed embedding per prompt from its bytes (a centred
  // histogram of byte values modulo the channel count), "prompt_embeds" [B, C].
  NamedTensors encode_conditioning(const std::string& prompts_json, const NamedTensors& /*extra*/) override {
    const auto prompts = json_strings(prompts_json);
    const int c = denoiser().channels();
    std::vector<float> values;
    for (const auto& prompt : prompts) {
      std::vector<float> h(static_cast<std::size_t>(c), 0.0f);
      for (unsigned char ch : prompt) h[ch % c] += 1.0f;
      const float n = std::max<float>(1.0f, static_cast<float>(prompt.size()));
      for (float v : h) values.push_back(v / n - 1.0f / static_cast<float>(c));
    }
    return {{"prompt_embeds", torch::tensor(values).view({static_cast<std::int64_t>(prompts.size()), c})}};
  }

  NamedTensors denoiser_kwargs(const NamedTensors& batch, const std::string& /*step*/) override {
    // The family's contribution: timesteps in [0, 1000] become the model's [0, 1].
    return {{"timestep", yeto::sdk::get(batch, "timesteps").to(torch::kFloat) / 1000.0}};
  }

  torch::Tensor denoise(const NamedTensors& inputs, const std::string& /*step*/) override {
    torch::Tensor embeds;
    for (const auto& [name, t] : inputs)
      if (name == "prompt_embeds") embeds = t;
    return denoiser().model()->forward(yeto::sdk::get(inputs, "hidden_states"), yeto::sdk::get(inputs, "timestep"),
                                       embeds);
  }

  std::pair<torch::Tensor, torch::Tensor> align(const torch::Tensor& prediction, const torch::Tensor& target,
                                                const std::string& /*step*/) override {
    if (prediction.sizes() != target.sizes())
      yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "prediction and target shapes differ");
    return {prediction.flatten(1), target.flatten(1)};
  }

  void save_artifact(const std::string& dir, const std::string& metadata_json) override {
    torch::serialize::OutputArchive archive;
    for (auto& [name, t] : denoiser().parameters()) archive.write(name, t.detach());
    archive.save_to(dir + "/tinyden_weights.pt");
    std::ofstream(dir + "/tinyden_meta.json") << metadata_json;
  }

  // A few Euler steps of the flow the denoiser learned (x_t = (1 - t) x0 + t noise, prediction
  // noise - x0), from seeded noise at half the requested size; the colour channels, upsampled 2x,
  // are the image in [0, 1]. Request: "prompts" (one string), "seed", "steps", "height", "width".
  NamedTensors generate(const std::string& request_json, const NamedTensors& /*inputs*/) override {
    if (!denoiser_) prepare("{}");
    const int steps = std::max(1, json_int(request_json, "steps", 4));
    const int h = std::max(1, json_int(request_json, "height", 16) / 2);
    const int w = std::max(1, json_int(request_json, "width", 16) / 2);
    const auto key = request_json.find("\"prompts\"");
    const auto open = key == std::string::npos ? key : request_json.find('[', key);
    const auto close = open == std::string::npos ? open : request_json.find(']', open);
    if (close == std::string::npos) yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "tinyden generate: no \"prompts\" array");
    const auto embeds = yeto::sdk::get(encode_conditioning(request_json.substr(open, close - open + 1), {}), "prompt_embeds");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(json_int(request_json, "seed", 0)));
    torch::NoGradGuard no_grad;
    auto x = at::randn({embeds.size(0), denoiser().channels(), h, w}, gen, torch::kFloat);
    for (int i = 0; i < steps; ++i) {
      const auto t = torch::full({x.size(0)}, 1.0 - static_cast<double>(i) / steps);
      x = x - denoiser().model()->forward(x, t, embeds) / static_cast<double>(steps);
    }
    const auto rgb = torch::upsample_nearest2d(x.narrow(1, 0, 3).clamp(-1, 1), {2 * h, 2 * w});
    return {{"images", rgb / 2 + 0.5}};
  }

  std::string load_artifact(const std::string& dir) override {
    if (!denoiser_) prepare("{}");  // at sample the pipeline is not prepared
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/tinyden_weights.pt");
    NamedTensors weights;
    for (auto& [name, t] : denoiser().parameters()) {
      torch::Tensor v;
      archive.read(name, v);
      weights.emplace_back(name, v);
    }
    denoiser().load_weights(weights, true);
    std::ifstream in(dir + "/tinyden_meta.json");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  TinyDenoiserComponent& denoiser() {
    if (!denoiser_) yeto::sdk::fail(YETO_ERR_INVALID_ARGUMENT, "call prepare() before using the denoiser");
    return *denoiser_;
  }
  std::unique_ptr<TinyDenoiserComponent> denoiser_;
};

}  // namespace

YETO_PLUGIN(TinyDenPlugin)
