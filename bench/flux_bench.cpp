// FluxTransformer2DModel training cost on CPU: forward+backward seconds per sample for the
// flux plugin's "tiny" and "mid" presets, with a LoRA adapter on the preset's default ("auto")
// targets as training uses it, printed next to the forward-only time of the same model and
// input measured in the same run (the ratio is what to compare across machines).
//
//   flux_bench [--iters N] [--threads T] [--batch B] [--presets tiny,mid]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "flux_family.hpp"
#include "flux_latents.hpp"
#include "flux_transformer.hpp"

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  fn();  // warm-up: allocator, oneDNN primitive caches
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

struct Shape {
  std::int64_t pixels;    // square image side
  std::int64_t text_len;  // T5 tokens
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 3, threads = 2, batch = 1;
  std::string presets = "tiny,mid";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--presets") presets = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: flux_bench [--iters N] [--threads T] [--batch B] [--presets tiny,mid]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);
  const auto all = yeto::flux::description().presets();
  std::printf("FluxTransformer2DModel on CPU, float32, %d thread(s), batch %d, %d iteration(s), LoRA r=16 on 'auto'\n",
              threads, batch, iters);
  std::printf("%-6s %10s %8s %8s %14s %14s %10s\n", "preset", "params", "image", "tokens", "fwd s/sample",
              "fwd+bwd s/smp", "ratio");
  std::stringstream list(presets);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (!all.contains(name)) {
      std::fprintf(stderr, "flux_bench: no preset '%s' (tiny, mid)\n", name.c_str());
      return 2;
    }
    const auto cfg_json = all.at(name).at("components").at("transformer").at("config");
    const auto cfg = yeto::flux::FluxTransformerConfig::from_json(cfg_json);
    yeto::flux::FluxTransformer2DModel model(cfg);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    yeto::nn::LoraConfig lc;
    lc.r = 16;
    lc.alpha = 16;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    yeto::nn::add_lora(*model, yeto::flux::description().lora_targets("auto").patterns, lc, "default", gen);
    std::int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();

    const Shape shape = name == "tiny" ? Shape{64, 32} : Shape{256, 64};
    const auto h = shape.pixels / 8;  // VAE scale factor 8: unpacked latent side
    const auto latents = torch::randn({batch, cfg.in_channels / 4, h, h});
    const auto packed = yeto::flux::pack_latents(latents);
    const auto text = torch::randn({batch, shape.text_len, cfg.joint_attention_dim});
    const auto pooled = torch::randn({batch, cfg.pooled_projection_dim});
    const auto t = torch::rand({batch});
    const auto guidance = torch::full({batch}, 3.5);
    const auto img_ids = yeto::flux::latent_image_ids(h / 2, h / 2);
    const auto txt_ids = yeto::flux::text_ids(shape.text_len);
    const auto target = torch::randn_like(packed);

    const double fwd = seconds_per_call(
        [&] {
          torch::NoGradGuard ng;
          (void)model->forward(packed, text, pooled, t, img_ids, txt_ids, guidance);
        },
        iters);
    const double train = seconds_per_call(
        [&] {
          const auto pred = model->forward(packed, text, pooled, t, img_ids, txt_ids, guidance);
          const auto loss = (pred.to(torch::kFloat) - target).pow(2).mean();
          loss.backward();
        },
        iters);
    std::printf("%-6s %9.1fM %5lldpx %8lld %14.4f %14.4f %9.2fx\n", name.c_str(), static_cast<double>(params) / 1e6,
                static_cast<long long>(shape.pixels), static_cast<long long>(packed.size(1) + shape.text_len),
                fwd / batch, train / batch, train / fwd);
  }
  return 0;
}
