// Wan training cost on CPU: WanTransformer3DModel forward+backward seconds per clip for the wan
// plugin's "tiny" and "mid" presets (LoRA r 16 on the default attention targets, as training
// uses it) next to the forward-only time of the same model and input, and the causal VAE's
// encode+decode seconds per clip next to decode alone (training encodes, sampling decodes).
//
//   wan_bench [--iters N] [--threads T] [--presets tiny,mid]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "wan_family.hpp"
#include "wan_transformer.hpp"
#include "wan_vae.hpp"

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  fn();  // warm-up: allocator, oneDNN primitive caches
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

struct Clip {
  std::int64_t frames, height, width, text_len;
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 3, threads = 2;
  std::string presets = "tiny,mid";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--presets") presets = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: wan_bench [--iters N] [--threads T] [--presets tiny,mid]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);
  const auto all = yeto::wan::description().presets();
  std::printf("Wan on CPU, float32, %d thread(s), batch 1, %d iteration(s), LoRA r=16 on 'auto'\n", threads, iters);
  std::printf("%-6s %9s %14s %7s %12s %14s %7s %12s %12s\n", "preset", "params", "clip", "tokens", "fwd s/clip",
              "fwd+bwd s/clip", "ratio", "vae enc+dec", "vae dec");
  std::stringstream list(presets);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (!all.contains(name)) {
      std::fprintf(stderr, "wan_bench: no preset '%s' (tiny, tiny-a14b, mid)\n", name.c_str());
      return 2;
    }
    const auto& comps = all.at(name).at("components");
    const auto cfg = yeto::wan::WanTransformerConfig::from_json(comps.at("transformer").at("config"));
    yeto::wan::WanTransformer3DModel model(cfg);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    yeto::nn::LoraConfig lc;
    lc.r = 16;
    lc.alpha = 16;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    yeto::nn::add_lora(*model, yeto::wan::description().lora_targets("auto").patterns, lc, "default", gen);
    std::int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    yeto::wan::AutoencoderKLWan vae(yeto::wan::WanVaeConfig::from_json(comps.at("vae").at("config")));
    vae->eval();

    const Clip clip = name == "mid" ? Clip{17, 128, 128, 64} : Clip{5, 48, 64, 32};
    const auto latents = torch::randn({1, cfg.in_channels, (clip.frames - 1) / 4 + 1, clip.height / 8, clip.width / 8});
    const auto text = torch::randn({1, clip.text_len, cfg.text_dim});
    const auto t = torch::full({1}, 500.0);
    const auto target = torch::randn_like(latents);
    const auto tokens = latents.size(2) * (latents.size(3) / 2) * (latents.size(4) / 2);

    const double fwd = seconds_per_call(
        [&] {
          torch::NoGradGuard ng;
          (void)model->forward(latents, t, text);
        },
        iters);
    const double train = seconds_per_call(
        [&] { (model->forward(latents, t, text) - target).pow(2).mean().backward(); }, iters);
    const auto pixels = torch::rand({1, 3, clip.frames, clip.height, clip.width}) * 2 - 1;
    torch::NoGradGuard ng;
    const double encdec = seconds_per_call([&] { (void)vae->decode(vae->encode(pixels).mean); }, iters);
    const double dec = seconds_per_call([&] { (void)vae->decode(latents); }, iters);
    std::printf("%-6s %8.1fM %4lldx%lldx%-5lld %7lld %12.4f %14.4f %6.2fx %12.4f %12.4f\n", name.c_str(),
                static_cast<double>(params) / 1e6, static_cast<long long>(clip.frames),
                static_cast<long long>(clip.height), static_cast<long long>(clip.width),
                static_cast<long long>(tokens), fwd, train, train / fwd, encdec, dec);
  }
  return 0;
}
