// Activation checkpointing: peak memory and step time of a LoRA training step with the blocks'
// activations kept (the baseline), recomputed every other block, and recomputed for every block,
// measured side by side in one run. Each configuration runs in its own child process (this
// binary re-run with --child) so that each peak RSS (VmHWM) is its own; the parent prints the
// ratios against the baseline.
//
// Setups (random weights, LoRA r 16 on the family's default targets, AdamW, flow-matching loss):
//   flux  the plugin's "mid" preset (4 double + 8 single blocks, 6 heads x 64), 512 px
//         (1024 image + 128 text tokens), batch 1
//   wan   the plugin's "mid" preset (8 blocks, 6 heads x 64, ffn 1536), 17 frames at 256 x 256
//         (5 x 32 x 32 latents: 1280 tokens), 64 text tokens, batch 1
//
//   checkpointing_bench [--iters N] [--rounds R] [--threads T] [--families flux,wan] [--precision fp32|bf16]
//
// Each child runs one warm-up step and then N timed ones (best of N); the R rounds run every
// configuration once each, in turn, and the table keeps each configuration's best step over the
// rounds (on a shared machine the minimum is the step's own cost) and its largest peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "flux_family.hpp"
#include "flux_latents.hpp"
#include "flux_transformer.hpp"
#include "runtime/torch_runtime.hpp"
#include "wan_family.hpp"
#include "wan_transformer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtod(line.c_str() + key.size(), nullptr) / 1024.0;  // kB
  return 0.0;
}

struct Measured {
  double ready_mb = 0, peak_mb = 0, step_s = 0, loss = 0;
};

std::vector<at::Tensor> trainable(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

void add_adapter(torch::nn::Module& m, const std::vector<std::string>& targets) {
  for (auto& p : m.parameters()) p.set_requires_grad(false);
  yeto::nn::LoraConfig lc;
  lc.r = 16;
  lc.alpha = 16;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  yeto::nn::add_lora(m, targets, lc, "default", gen);
}

// Best of `iters` steps after one warm-up step; the peak covers all of them (not the model's
// construction: the peak is reset first).
template <class Step>
Measured measure(Step step, int iters) {
  Measured r;
  {
    std::ofstream reset("/proc/self/clear_refs");  // VmHWM back to the current RSS (Linux)
    reset << "5";
  }
  r.ready_mb = status_mb("VmRSS");
  r.loss = step();
  r.step_s = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    (void)step();
    r.step_s = std::min(r.step_s, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  r.peak_mb = status_mb("VmHWM");
  return r;
}

Measured run_flux(const yeto::nn::BlockCheckpointing& policy, at::ScalarType dtype, int iters) {
  const auto cfg = yeto::flux::FluxTransformerConfig::from_json(
      yeto::flux::description().presets().at("mid").at("components").at("transformer").at("config"));
  torch::manual_seed(0);
  yeto::flux::FluxTransformer2DModel model(cfg);
  model->to(dtype);
  add_adapter(*model, yeto::flux::description().lora_targets("auto").patterns);
  model->activation_checkpointing = policy;
  torch::optim::AdamW adam(trainable(*model), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  const std::int64_t batch = 1, h = 512 / 8, text_len = 128;
  const auto latents = torch::randn({batch, cfg.in_channels / 4, h, h});
  const auto text = torch::randn({batch, text_len, cfg.joint_attention_dim}).to(dtype);
  const auto pooled = torch::randn({batch, cfg.pooled_projection_dim}).to(dtype);
  const auto guidance = torch::full({batch}, 3.5);
  const auto img_ids = yeto::flux::latent_image_ids(h / 2, h / 2);
  const auto txt_ids = yeto::flux::text_ids(text_len);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  return measure(
      [&] {
        const auto t = at::rand({batch}, gen);
        const auto noise = at::randn(latents.sizes(), gen);
        const auto sig = t.view({-1, 1, 1, 1});
        const auto noisy = yeto::flux::pack_latents((1 - sig) * latents + sig * noise).to(dtype);
        const auto target = yeto::flux::pack_latents(noise - latents);
        const auto pred = model->forward(noisy, text, pooled, t, img_ids, txt_ids, guidance);
        const auto loss = (pred.to(at::kFloat) - target).pow(2).mean();
        loss.backward();
        adam.step();
        adam.zero_grad();
        return loss.item<double>();
      },
      iters);
}

Measured run_wan(const yeto::nn::BlockCheckpointing& policy, at::ScalarType dtype, int iters) {
  const auto cfg = yeto::wan::WanTransformerConfig::from_json(
      yeto::wan::description().presets().at("mid").at("components").at("transformer").at("config"));
  torch::manual_seed(0);
  yeto::wan::WanTransformer3DModel model(cfg);
  model->to(dtype);
  add_adapter(*model, yeto::wan::description().lora_targets("auto").patterns);
  model->activation_checkpointing = policy;
  torch::optim::AdamW adam(trainable(*model), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  const std::int64_t frames = 17, side = 256, text_len = 64;
  const auto latents = torch::randn({1, cfg.in_channels, (frames - 1) / 4 + 1, side / 8, side / 8});
  const auto text = torch::randn({1, text_len, cfg.text_dim}).to(dtype);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  return measure(
      [&] {
        const auto t = at::rand({1}, gen);
        const auto noise = at::randn(latents.sizes(), gen);
        const auto sig = t.view({-1, 1, 1, 1, 1});
        const auto noisy = ((1 - sig) * latents + sig * noise).to(dtype);
        const auto pred = model->forward(noisy, t * 1000, text);
        const auto loss = (pred.to(at::kFloat) - (noise - latents)).pow(2).mean();
        loss.backward();
        adam.step();
        adam.zero_grad();
        return loss.item<double>();
      },
      iters);
}

int child(const std::string& family, std::int64_t every, at::ScalarType dtype, int iters) {
  yeto::nn::BlockCheckpointing policy;
  policy.enabled = every > 0;
  policy.every = std::max<std::int64_t>(every, 1);
  const auto r = family == "flux" ? run_flux(policy, dtype, iters) : run_wan(policy, dtype, iters);
  std::printf("%.1f %.1f %.5f %.6f\n", r.ready_mb, r.peak_mb, r.step_s, r.loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2, threads = 1, rounds = 1;
  std::string families = "flux,wan", precision = "bf16", child_family;
  std::int64_t child_every = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--iters" && has_value) iters = std::atoi(argv[++i]);
    else if (a == "--threads" && has_value) threads = std::atoi(argv[++i]);
    else if (a == "--rounds" && has_value) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--families" && has_value) families = argv[++i];
    else if (a == "--precision" && has_value) precision = argv[++i];
    else if (a == "--child" && i + 2 < argc) {
      child_family = argv[++i];
      child_every = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: checkpointing_bench [--iters N] [--rounds R] [--threads T] [--families flux,wan] "
                   "[--precision fp32|bf16]\n");
      return 2;
    }
  }
  if (precision != "fp32" && precision != "bf16") {
    std::fprintf(stderr, "checkpointing_bench: precision '%s' (fp32, bf16)\n", precision.c_str());
    return 2;
  }
  (void)yeto::runtime::select_blas_kernels();
  yeto::runtime::configure_threads(threads);
  const auto dtype = precision == "bf16" ? at::kBFloat16 : at::kFloat;
  if (!child_family.empty()) return child(child_family, child_every, dtype, iters);

  std::printf("Activation checkpointing, LoRA step on CPU: %d thread(s), best of %d step(s) after a warm-up x %d "
              "round(s), %s base;\neach run a fresh process. peak: VmHWM; ready: RSS before the first step; above: "
              "peak - ready.\n",
              threads, iters, rounds, precision.c_str());
  std::printf("%-5s %-12s %9s %9s %9s %8s %8s %8s %10s\n", "model", "recompute", "ready MB", "peak MB", "above MB",
              "above x", "step s", "step x", "loss");
  std::stringstream list(families);
  std::string family;
  while (std::getline(list, family, ',')) {
    if (family != "flux" && family != "wan") {
      std::fprintf(stderr, "checkpointing_bench: no family '%s' (flux, wan)\n", family.c_str());
      return 2;
    }
    // Rounds of (none, every 2nd, every block): on a shared machine the best step of each
    // configuration over the rounds is its own cost; the peak is the largest seen.
    const std::vector<std::int64_t> modes = {0, 2, 1};
    std::vector<Measured> best(modes.size());
    for (int round = 0; round < rounds; ++round) {
      for (std::size_t k = 0; k < modes.size(); ++k) {
        const std::string cmd = std::string(argv[0]) + " --child " + family + " " + std::to_string(modes[k]) +
                                " --iters " + std::to_string(iters) + " --threads " + std::to_string(threads) +
                                " --precision " + precision;
        FILE* p = popen(cmd.c_str(), "r");
        Measured m;
        if (!p || std::fscanf(p, "%lf %lf %lf %lf", &m.ready_mb, &m.peak_mb, &m.step_s, &m.loss) != 4) {
          std::fprintf(stderr, "checkpointing_bench: '%s' failed\n", cmd.c_str());
          if (p) pclose(p);
          return 1;
        }
        pclose(p);
        auto& b = best[k];
        if (round == 0) b = m;
        b.step_s = std::min(b.step_s, m.step_s);
        b.peak_mb = std::max(b.peak_mb, m.peak_mb);
      }
    }
    const auto& base = best[0];
    for (std::size_t k = 0; k < modes.size(); ++k) {
      const auto& m = best[k];
      const std::string mode = modes[k] == 0 ? "none" : modes[k] == 1 ? "every block" : "every 2nd";
      std::printf("%-5s %-12s %9.0f %9.0f %9.0f %7.2fx %8.3f %7.2fx %10.5f\n", family.c_str(), mode.c_str(), m.ready_mb,
                  m.peak_mb, m.peak_mb - m.ready_mb, (m.peak_mb - m.ready_mb) / (base.peak_mb - base.ready_mb), m.step_s,
                  m.step_s / base.step_s, m.loss);
    }
  }
  std::printf("above x, step x: against the same model without recomputation in this run; the first-step loss is the\n"
              "same in every row (same seed, same data).\n");
  return 0;
}
