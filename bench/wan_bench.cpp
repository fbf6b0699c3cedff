// Wan's causal VAE on CPU: encode+decode seconds per clip next to decode alone (training encodes
// its clips once into the latent cache, sampling decodes) for the wan plugin's presets, float32.
// The transformer's training step (forward, backward, optimizer, GEMM roofline, bf16) is
// step_bench --family wan's.
//
//   wan_bench [--iters N] [--threads T] [--presets tiny,mid]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "wan_family.hpp"
#include "yeto/family/wan_vae.hpp"

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  fn();  // warm-up: allocator, oneDNN primitive caches
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

struct Clip {
  std::int64_t frames, height, width;
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
  std::printf("Wan VAE on CPU, float32, %d thread(s), batch 1, %d iteration(s)\n", threads, iters);
  std::printf("%-6s %14s %12s %12s %12s\n", "preset", "clip", "latent", "vae enc+dec", "vae dec");
  std::stringstream list(presets);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (!all.contains(name)) {
      std::fprintf(stderr, "wan_bench: no preset '%s' (tiny, tiny-a14b, mid)\n", name.c_str());
      return 2;
    }
    const auto& comps = all.at(name).at("components");
    yeto::wan::AutoencoderKLWan vae(yeto::wan::WanVaeConfig::from_json(comps.at("vae").at("config")));
    vae->eval();
    const Clip clip = name == "mid" ? Clip{17, 128, 128} : Clip{5, 48, 64};
    torch::NoGradGuard ng;
    const auto pixels = torch::rand({1, 3, clip.frames, clip.height, clip.width}) * 2 - 1;
    const auto latents = vae->encode(pixels).mean;
    const double encdec = seconds_per_call([&] { (void)vae->decode(vae->encode(pixels).mean); }, iters);
    const double dec = seconds_per_call([&] { (void)vae->decode(latents); }, iters);
    std::ostringstream shape;
    shape << latents.size(1) << "x" << latents.size(2) << "x" << latents.size(3) << "x" << latents.size(4);
    std::printf("%-6s %4lldx%lldx%-5lld %12s %12.4f %12.4f\n", name.c_str(), static_cast<long long>(clip.frames),
                static_cast<long long>(clip.height), static_cast<long long>(clip.width), shape.str().c_str(), encdec,
                dec);
  }
  return 0;
}
