// AutoencoderKL encode+decode throughput on CPU (images/s) at 256x256 and 512x512 for a small
// SD-like config (4 blocks, 4 latent channels, quant convs, mid-block attention), printed next
// to two baselines measured in the same run: the same model's decode alone, and the raw
// throughput of the 3x3 convolution that dominates the full-resolution blocks.
//
//   vae_bench [--iters N] [--threads T] [--batch B]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <torch/torch.h>

#include "models/autoencoder_kl.hpp"

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  fn();  // warm-up: allocator, oneDNN primitive caches
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 3;
  int threads = 2;
  int batch = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: vae_bench [--iters N] [--threads T] [--batch B]\n");
      return 2;
    }
  }
  if (iters < 1 || threads < 1 || batch < 1) {
    std::fprintf(stderr, "vae_bench: --iters, --threads and --batch must be positive\n");
    return 2;
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);

  yeto::models::AutoencoderKLConfig cfg;
  cfg.block_out_channels = {32, 64, 128, 128};
  cfg.down_block_types.assign(4, "DownEncoderBlock2D");
  cfg.up_block_types.assign(4, "UpDecoderBlock2D");
  cfg.layers_per_block = 1;
  cfg.norm_num_groups = 32;
  cfg.latent_channels = 4;
  cfg.sample_size = 512;
  yeto::models::AutoencoderKL vae(cfg);
  vae->eval();
  torch::NoGradGuard no_grad;

  std::printf("AutoencoderKL CPU throughput: block_out_channels [32, 64, 128, 128], layers_per_block 1, "
              "4 latent channels, %d thread(s), batch %d, %d iteration(s)\n",
              threads, batch, iters);
  std::printf("%-10s %16s %16s %10s %22s\n", "size", "enc+dec img/s", "decode img/s", "enc+dec/dec",
              "conv3x3 32ch GFLOP/s");
  for (const int size : {256, 512}) {
    auto x = torch::rand({batch, 3, size, size}) * 2 - 1;
    const auto f = size / cfg.downscale_factor();
    auto z = torch::randn({batch, cfg.latent_channels, f, f});
    const int n = size >= 512 ? std::max(1, iters - 1) : iters;
    const double t_full = seconds_per_call(
        [&] {
          auto d = vae->encode(x);
          auto out = vae->decode(d.mode());
          (void)out;
        },
        n);
    const double t_dec = seconds_per_call([&] { (void)vae->decode(z); }, n);
    // Baseline: the full-resolution 3x3 conv of the first block, alone.
    auto conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1));
    auto h = torch::randn({batch, 32, size, size});
    const double t_conv = seconds_per_call([&] { (void)conv(h); }, n);
    const double flops = 2.0 * 32 * 32 * 9 * static_cast<double>(size) * size * batch;
    std::printf("%4dx%-5d %16.3f %16.3f %10.2f %22.1f\n", size, size, batch / t_full, batch / t_dec, t_dec / t_full,
                flops / t_conv / 1e9);
  }
  return 0;
}
