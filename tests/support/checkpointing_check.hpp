// The activation-checkpointing check every family's denoiser test shares: the gradients of a
// loss with the blocks recomputed in backward (every block, every other block) against those of
// the plain forward. With LoRA on the family's targets every gradient is equal bit for bit. With
// full tuning the timestep embedding (and the text stream) need gradients too, and the autograd
// engine sums the contributions of a tensor read in several places (temb by every block) in an
// order that depends on the graph, which recomputation changes: there a gradient may differ by
// float rounding, and must stay within 1e-6 of its largest magnitude.
// Header-only (LibTorch and yeto_nn of the test target).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::test {

// The checkpointed blocks in the autograd graph behind `out`: its nodes named
// yeto::nn::CheckpointBackward.
inline std::size_t checkpoint_nodes(const at::Tensor& out) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  if (out.grad_fn()) stack.push_back(out.grad_fn().get());
  std::size_t n = 0;
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->name() == "yeto::nn::CheckpointBackward") ++n;
    for (const auto& e : node->next_edges())
      if (e.function) stack.push_back(e.function.get());
  }
  return n;
}

// `make` builds a fresh denoiser (the same weights each call), `forward` runs it on fixed inputs.
// For LoRA (lora_targets non-empty) every base parameter is frozen and the adapter added with
// random A and B (so both receive gradients); for full tuning (lora_targets empty) every
// parameter trains. Returns the named gradients of mean((forward - target)^2); *recomputed gets
// the number of checkpointed blocks in its graph.
template <class Model>
std::map<std::string, at::Tensor> checkpointed_gradients(const std::function<Model()>& make,
                                                         const std::function<at::Tensor(Model&)>& forward,
                                                         const at::Tensor& target,
                                                         const std::vector<std::string>& lora_targets,
                                                         const nn::BlockCheckpointing& policy,
                                                         std::size_t* recomputed) {
  auto m = make();
  if (!lora_targets.empty()) {
    for (auto& p : m->parameters()) p.set_requires_grad(false);
    nn::LoraConfig cfg;
    cfg.init = "gaussian";
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    nn::add_lora(*m, lora_targets, cfg, "default", gen);
    torch::NoGradGuard ng;
    for (auto& p : m->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.05, gen);
  }
  m->activation_checkpointing = policy;
  const auto out = forward(m);
  *recomputed = checkpoint_nodes(out);
  (out.to(at::kFloat) - target.to(at::kFloat)).pow(2).mean().backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : m->named_parameters())
    if (p.value().requires_grad() && p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

// Checks that checkpointing every block and every other block of the model's `blocks` puts that
// many checkpointed blocks in the graph (all of them; every other one from the first) and gives
// the plain path's gradients (as the header says), for LoRA on `lora_targets` and for full
// tuning; `label` prefixes the printed counts.
template <class Model>
void expect_checkpointing_keeps_gradients(const std::string& label, const std::function<Model()>& make,
                                          const std::function<at::Tensor(Model&)>& forward, const at::Tensor& target,
                                          const std::vector<std::string>& lora_targets, std::size_t blocks) {
  for (const bool lora : {true, false}) {
    const auto targets = lora ? lora_targets : std::vector<std::string>{};
    using Grads = std::map<std::string, at::Tensor>;
    std::size_t none = 0, recomputed_blocks = 0;
    const Grads plain = checkpointed_gradients<Model>(make, forward, target, targets, {}, &none);
    ASSERT_FALSE(plain.empty()) << label;
    EXPECT_EQ(none, 0u) << label;
    std::size_t nonzero = 0;
    for (const auto& [name, g] : plain) nonzero += g.abs().max().item().toDouble() > 0 ? 1 : 0;
    for (const std::int64_t every : {1, 2}) {
      const Grads recomputed =
          checkpointed_gradients<Model>(make, forward, target, targets, {true, every}, &recomputed_blocks);
      EXPECT_EQ(recomputed_blocks, every == 1 ? blocks : (blocks + 1) / 2) << label << " every " << every;
      ASSERT_EQ(recomputed.size(), plain.size()) << label << " every " << every;
      std::size_t equal = 0;
      double worst = 0;  // largest difference relative to the gradient's largest magnitude
      for (const auto& [name, g] : plain) {
        ASSERT_TRUE(recomputed.count(name)) << label << ": no gradient for " << name;
        const at::Tensor& r = recomputed.at(name);
        if (torch::equal(r, g)) {
          ++equal;
          continue;
        }
        const double scale = std::max(g.abs().max().item().toDouble(), 1e-30);
        const double rel = (r - g).abs().max().item().toDouble() / scale;
        worst = std::max(worst, rel);
        if (lora || rel > 1e-6)
          ADD_FAILURE() << label << (lora ? " LoRA" : " full") << " every " << every << ": " << name
                        << " differs by " << rel << " of its largest magnitude";
      }
      std::printf("  %s %s, every %lld: %zu of %zu blocks recomputed, %zu/%zu gradients bit-equal (%zu non-zero), "
                  "the others within %.2g of their largest magnitude\n",
                  label.c_str(), lora ? "LoRA" : "full", static_cast<long long>(every), recomputed_blocks, blocks,
                  equal, plain.size(), nonzero, worst);
    }
    EXPECT_GT(nonzero, plain.size() / 2) << label << (lora ? " LoRA" : " full");
  }
}

}  // namespace yeto::test
