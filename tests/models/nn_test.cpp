// Unit tests of the sdk/nn building blocks: LoRA Linear, attention fallback, rotary and
// timestep embeddings, norms, checkpointing, loading by name.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include "yeto/nn/activations.hpp"
#include "yeto/nn/attention.hpp"
#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"
#include "yeto/nn/state_dict.hpp"
#include "yeto/torch_compat.hpp"

namespace {

using yeto::nn::Linear;
using yeto::nn::LoraConfig;

// A two-layer block with Diffusers-like names, for the tree-level LoRA helpers.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    attn = register_module("attn", torch::nn::ModuleList());
    attn->push_back(Linear(8, 8, true));
    to_q = register_module("to_q", Linear(8, 6, false));
    ff = register_module("ff", Linear(6, 4, true));
  }
  torch::Tensor forward(const torch::Tensor& x) { return ff(to_q(attn->ptr<yeto::nn::LinearImpl>(0)->forward(x))); }
  torch::nn::ModuleList attn{nullptr};
  Linear to_q{nullptr}, ff{nullptr};
};
TORCH_MODULE(Block);

TEST(LoraLinear, ZeroInitBGivesTheBaseOutput) {
  torch::manual_seed(0);
  Linear lin(16, 12, true);
  auto x = torch::randn({3, 5, 16});
  auto base = lin(x);
  lin->add_adapter("default", LoraConfig{4, 8.0}, yeto::compat::make_cpu_generator(1));
  EXPECT_TRUE(lin(x).equal(base));
  EXPECT_TRUE(lin->lora_B("default").eq(0).all().item<bool>());
  EXPECT_FALSE(lin->lora_A("default").eq(0).all().item<bool>());
  // PEFT's kaiming-uniform bound 1/sqrt(in).
  EXPECT_LE(lin->lora_A("default").abs().max().item<double>(), 1.0 / std::sqrt(16.0));
}

TEST(LoraLinear, PeftNamesAndFrozenBase) {
  Linear lin(8, 4, true);
  EXPECT_TRUE(lin->weight.requires_grad());
  lin->add_adapter("default", LoraConfig{2, 2.0});
  lin->add_adapter("style", LoraConfig{3, 3.0});
  auto params = lin->named_parameters();
  EXPECT_TRUE(params.contains("weight"));
  EXPECT_TRUE(params.contains("bias"));
  EXPECT_TRUE(params.contains("lora_A.default.weight"));
  EXPECT_TRUE(params.contains("lora_B.default.weight"));
  EXPECT_TRUE(params.contains("lora_A.style.weight"));
  EXPECT_EQ(params["lora_A.style.weight"].sizes(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(params["lora_B.style.weight"].sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_FALSE(lin->weight.requires_grad());
  EXPECT_FALSE(lin->bias.requires_grad());
  EXPECT_TRUE(params["lora_A.default.weight"].requires_grad());
  EXPECT_THROW(lin->add_adapter("default", LoraConfig{}), std::invalid_argument);
  EXPECT_THROW(lin->add_adapter("a.b", LoraConfig{}), std::invalid_argument);
  EXPECT_THROW(lin->add_adapter("zero", LoraConfig{0, 1.0}), std::invalid_argument);
}

TEST(LoraLinear, ScaleIsAlphaOverRank) {
  torch::manual_seed(0);
  Linear lin(6, 5, false);
  lin->add_adapter("default", LoraConfig{4, 8.0});
  EXPECT_DOUBLE_EQ(lin->scale("default"), 2.0);
  {
    torch::NoGradGuard g;
    lin->lora_B("default").normal_();
  }
  auto x = torch::randn({2, 6});
  auto expected = torch::matmul(x, lin->weight.t()) +
                  2.0 * torch::matmul(torch::matmul(x, lin->lora_A("default").t()), lin->lora_B("default").t());
  EXPECT_TRUE(torch::allclose(lin(x), expected, 1e-5, 1e-6));
  lin->set_scale_multiplier("default", 0.5);
  EXPECT_DOUBLE_EQ(lin->scale("default"), 1.0);
  LoraConfig rs{4, 8.0};
  rs.use_rslora = true;
  EXPECT_DOUBLE_EQ(rs.scale(), 4.0);
  lin->set_active_adapters({});
  EXPECT_TRUE(torch::allclose(lin(x), torch::matmul(x, lin->weight.t())));
}

TEST(LoraLinear, MergeEqualsUnmergedForwardAndUnmergeRestores) {
  torch::manual_seed(3);
  Linear lin(10, 7, true);
  lin->add_adapter("default", LoraConfig{3, 6.0});
  {
    torch::NoGradGuard g;
    lin->lora_B("default").normal_();
  }
  auto x = torch::randn({4, 10});
  auto w0 = lin->weight.clone();
  auto unmerged = lin(x);
  lin->merge();
  EXPECT_TRUE(lin->merged("default"));
  EXPECT_FALSE(lin->weight.equal(w0));
  EXPECT_TRUE(torch::allclose(lin(x), unmerged, 1e-5, 1e-5));
  lin->merge();  // no-op when merged
  EXPECT_TRUE(torch::allclose(lin(x), unmerged, 1e-5, 1e-5));
  lin->unmerge();
  EXPECT_FALSE(lin->merged("default"));
  EXPECT_TRUE(torch::allclose(lin->weight, w0, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(lin(x), unmerged, 1e-5, 1e-5));
}

TEST(LoraLinear, GradientsReachOnlyTheAdapter) {
  torch::manual_seed(5);
  Linear lin(4, 3, true);
  lin->add_adapter("default", LoraConfig{2, 2.0});
  auto loss = lin(torch::randn({5, 4})).pow(2).mean();
  loss.backward();
  EXPECT_FALSE(lin->weight.grad().defined());
  EXPECT_TRUE(lin->lora_B("default").grad().defined());  // B gets a gradient even at zero
  lin->remove_adapter("default");
  EXPECT_FALSE(lin->has_adapter("default"));
  EXPECT_FALSE(lin->named_parameters().contains("lora_A.default.weight"));
}

TEST(LoraTree, TargetsStateDictAndReload) {
  torch::manual_seed(7);
  Block block;
  auto done = yeto::nn::add_lora(*block, {"to_q", "attn.0"}, LoraConfig{2, 4.0}, "default",
                                 yeto::compat::make_cpu_generator(11));
  EXPECT_EQ(done, (std::vector<std::string>{"attn.0", "to_q"}));
  EXPECT_TRUE(yeto::nn::matches_target("transformer_blocks.0.attn.to_q", {"to_q"}));
  EXPECT_FALSE(yeto::nn::matches_target("transformer_blocks.0.attn.add_to_q", {"to_q"}));
  EXPECT_THROW(yeto::nn::add_lora(*block, {"nothing"}, LoraConfig{}), std::invalid_argument);
  {
    torch::NoGradGuard g;
    for (auto& [path, layer] : yeto::nn::lora_capable_layers(*block)) {
      if (layer->has_adapter("default")) layer->lora_B("default").normal_();
    }
  }
  auto sd = yeto::nn::lora_state_dict(*block, "default", "transformer.");
  EXPECT_EQ(sd.size(), 4u);
  EXPECT_TRUE(sd.count("transformer.to_q.lora_A.weight"));
  EXPECT_TRUE(sd.count("transformer.attn.0.lora_B.weight"));
  auto x = torch::randn({2, 8});
  auto y = block(x);

  Block fresh;
  // Same base weights, then the adapter from the PEFT-named tensors.
  auto base = yeto::nn::named_tensors(*block);
  for (auto it = base.begin(); it != base.end();) {
    it = it->first.find(".lora_") == std::string::npos ? std::next(it) : base.erase(it);
  }
  yeto::nn::load_named_tensors(*fresh, base);
  auto loaded = yeto::nn::load_lora_state_dict(*fresh, sd, LoraConfig{0, 4.0}, "default", "transformer.");
  EXPECT_EQ(loaded.size(), 2u);
  EXPECT_EQ(fresh->to_q->adapter_config("default").r, 2);
  EXPECT_TRUE(torch::allclose(fresh(x), y, 1e-6, 1e-6));
}

TEST(Attention, FallbackEqualsTheReferenceFormula) {
  torch::manual_seed(1);
  auto q = torch::randn({2, 3, 5, 8});
  auto k = torch::randn({2, 3, 7, 8});
  auto v = torch::randn({2, 3, 7, 4});
  auto mask = torch::randn({2, 1, 5, 7});
  const double scale = 0.3;
  auto ref = torch::matmul(torch::softmax(torch::matmul(q.to(torch::kDouble), k.to(torch::kDouble).transpose(-2, -1)) * scale +
                                              mask.to(torch::kDouble),
                                          -1),
                           v.to(torch::kDouble));
  auto math = yeto::compat::sdpa_math(q, k, v, mask, false, scale);
  EXPECT_LT((math.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-6);
  auto dispatched = yeto::compat::scaled_dot_product_attention(q, k, v, mask, false, scale);
  EXPECT_LT((dispatched.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-5);
  // Default scale is 1/sqrt(D).
  auto d = yeto::compat::sdpa_math(q, k, v, {}, false, std::nullopt);
  auto d_ref = torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1), v);
  EXPECT_TRUE(torch::allclose(d, d_ref, 1e-5, 1e-6));
}

TEST(Attention, BoolMaskAndCausal) {
  torch::manual_seed(2);
  auto q = torch::randn({1, 2, 4, 8});
  auto k = torch::randn({1, 2, 4, 8});
  auto v = torch::randn({1, 2, 4, 8});
  auto keep = torch::ones({4, 4}, torch::kBool).tril();
  auto causal = yeto::compat::sdpa_math(q, k, v, {}, true, std::nullopt);
  auto masked = yeto::compat::sdpa_math(q, k, v, keep, false, std::nullopt);
  EXPECT_TRUE(torch::allclose(causal, masked, 1e-6, 1e-6));
  // The first query sees only the first key.
  EXPECT_TRUE(torch::allclose(causal.select(2, 0), v.select(2, 0), 1e-6, 1e-6));
  // Half precision accumulates in float32 and returns half.
  auto h = yeto::compat::sdpa_math(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16), {}, true,
                                   std::nullopt);
  EXPECT_EQ(h.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(h.to(torch::kFloat), causal, 3e-2, 3e-2));
}

TEST(Attention, ModuleNamesAndSpatialResidual) {
  yeto::nn::AttentionOptions o;
  o.query_dim = 8;
  o.heads = 1;
  o.dim_head = 8;
  o.bias = true;
  o.norm_num_groups = 2;
  o.residual_connection = true;
  o.eps = 1e-6;
  yeto::nn::Attention attn(o);
  auto names = attn->named_parameters();
  for (const char* n : {"group_norm.weight", "to_q.weight", "to_k.bias", "to_v.weight", "to_out.0.weight",
                        "to_out.0.bias"}) {
    EXPECT_TRUE(names.contains(n)) << n;
  }
  torch::manual_seed(4);
  auto x = torch::randn({2, 8, 3, 3});
  auto y = attn(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  // Zero output projection: the block is the identity (residual only).
  {
    torch::NoGradGuard g;
    attn->to_out->ptr<yeto::nn::LinearImpl>(0)->weight.zero_();
    attn->to_out->ptr<yeto::nn::LinearImpl>(0)->bias.zero_();
  }
  EXPECT_TRUE(torch::allclose(attn(x), x));

  yeto::nn::AttentionOptions j;
  j.query_dim = 16;
  j.heads = 2;
  j.dim_head = 8;
  j.qk_norm = "rms_norm";
  j.eps = 1e-6;
  j.added_kv_proj_dim = 16;
  yeto::nn::Attention joint(j);
  auto jn = joint->named_parameters();
  for (const char* n : {"norm_q.weight", "norm_added_k.weight", "add_q_proj.weight", "to_add_out.weight"}) {
    EXPECT_TRUE(jn.contains(n)) << n;
  }
  auto [xo, co] = joint->forward_joint(torch::randn({1, 5, 16}), torch::randn({1, 3, 16}));
  EXPECT_EQ(xo.sizes(), (std::vector<int64_t>{1, 5, 16}));
  EXPECT_EQ(co.sizes(), (std::vector<int64_t>{1, 3, 16}));
}

TEST(Rope, TablesAndRotation) {
  auto pos = torch::arange(6, torch::kFloat);
  auto t = yeto::nn::rope_1d(8, pos, 10000.0, true);
  EXPECT_EQ(t.cos.sizes(), (std::vector<int64_t>{6, 8}));
  // Position 0 is the identity rotation; frequency 0 of position p is angle p.
  EXPECT_TRUE(torch::allclose(t.cos[0], torch::ones({8})));
  EXPECT_NEAR(t.cos[3][0].item<double>(), std::cos(3.0), 1e-6);
  EXPECT_NEAR(t.cos[3][1].item<double>(), std::cos(3.0), 1e-6);  // repeat-interleaved
  EXPECT_NEAR(t.sin[2][2].item<double>(), std::sin(2.0 / std::pow(10000.0, 2.0 / 8.0)), 1e-6);
  auto x = torch::randn({1, 2, 6, 8});
  auto r = yeto::nn::apply_rotary_emb(x, t.cos, t.sin);
  // Rotations keep the norm of every pair.
  EXPECT_TRUE(torch::allclose(r.pow(2).sum(-1), x.pow(2).sum(-1), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(r.select(2, 0), x.select(2, 0)));
  // First pair at position 1 rotated by angle 1.
  const double a = 1.0;
  auto x0 = x[0][0][1][0].item<double>(), x1 = x[0][0][1][1].item<double>();
  EXPECT_NEAR(r[0][0][1][0].item<double>(), x0 * std::cos(a) - x1 * std::sin(a), 1e-5);
  EXPECT_NEAR(r[0][0][1][1].item<double>(), x1 * std::cos(a) + x0 * std::sin(a), 1e-5);
  // N-D: axes concatenated.
  auto ids = torch::stack({torch::zeros({6}), torch::arange(6, torch::kFloat), torch::arange(6, torch::kFloat) * 2}, 1);
  auto nd = yeto::nn::rope_nd(ids, {2, 4, 2});
  EXPECT_EQ(nd.cos.sizes(), (std::vector<int64_t>{6, 8}));
  EXPECT_TRUE(torch::allclose(nd.cos.narrow(1, 2, 4), yeto::nn::rope_1d(4, torch::arange(6, torch::kFloat)).cos));
}

TEST(Embeddings, TimestepEmbeddingMatchesTheFormula) {
  auto t = torch::tensor({0.0, 10.0, 999.0});
  auto e = yeto::nn::timestep_embedding(t, 8, /*flip_sin_to_cos=*/true, /*downscale_freq_shift=*/0.0);
  ASSERT_EQ(e.sizes(), (std::vector<int64_t>{3, 8}));
  for (int i = 0; i < 4; ++i) {
    const double f = std::exp(-std::log(10000.0) * i / 4.0);
    EXPECT_NEAR(e[1][i].item<double>(), std::cos(10.0 * f), 1e-5);
    EXPECT_NEAR(e[1][4 + i].item<double>(), std::sin(10.0 * f), 1e-5);
  }
  auto odd = yeto::nn::timestep_embedding(t, 7);
  EXPECT_EQ(odd.size(1), 7);
  EXPECT_EQ(odd[2][6].item<double>(), 0.0);
  yeto::nn::CombinedTimestepEmbeddings emb(32, 12, /*with_guidance=*/true);
  auto names = emb->named_parameters();
  for (const char* n : {"timestep_embedder.linear_1.weight", "guidance_embedder.linear_2.bias",
                        "text_embedder.linear_1.weight"}) {
    EXPECT_TRUE(names.contains(n)) << n;
  }
  EXPECT_EQ(emb(torch::tensor({1.0, 2.0}), torch::randn({2, 12}), torch::tensor({3.5, 3.5})).sizes(),
            (std::vector<int64_t>{2, 32}));
  EXPECT_THROW(emb(torch::tensor({1.0}), torch::randn({1, 12})), std::invalid_argument);
}

TEST(Norms, RmsAndAdaLayerNorm) {
  torch::manual_seed(6);
  auto x = torch::randn({2, 3, 16});
  yeto::nn::RMSNorm rms(16, 1e-6);
  {
    torch::NoGradGuard g;
    rms->weight.normal_();
  }
  auto ref = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * rms->weight;
  EXPECT_TRUE(torch::allclose(rms(x), ref, 1e-5, 1e-6));
  yeto::nn::AdaLayerNormZero ada(16);
  auto emb = torch::randn({2, 16});
  auto out = ada(x, emb);
  auto parts = ada->linear(torch::silu(emb)).chunk(6, 1);
  auto normed = torch::layer_norm(x, {16}, {}, {}, 1e-6);
  EXPECT_TRUE(torch::allclose(out.x, normed * (1 + parts[1].unsqueeze(1)) + parts[0].unsqueeze(1), 1e-5, 1e-5));
  EXPECT_TRUE(out.gate_mlp.equal(parts[5]));
  yeto::nn::AdaLayerNormContinuous cont(16, 8);
  auto cond = torch::randn({2, 8});
  auto cp = cont->linear(torch::silu(cond)).chunk(2, 1);
  EXPECT_TRUE(torch::allclose(cont(x, cond), normed * (1 + cp[0].unsqueeze(1)) + cp[1].unsqueeze(1), 1e-5, 1e-5));
}

TEST(Activations, NamesAndValues) {
  using yeto::nn::Activation;
  EXPECT_EQ(yeto::nn::parse_activation("gelu_new"), Activation::gelu_tanh);
  EXPECT_EQ(yeto::nn::parse_activation("gelu_pytorch_tanh"), Activation::gelu_tanh);
  EXPECT_EQ(yeto::nn::parse_activation("swish"), Activation::silu);
  EXPECT_THROW(yeto::nn::parse_activation("gleu"), std::invalid_argument);
  auto x = torch::linspace(-4, 4, 33);
  EXPECT_TRUE(torch::allclose(yeto::nn::quick_gelu(x), x * torch::sigmoid(1.702 * x)));
  EXPECT_TRUE(torch::allclose(yeto::nn::gelu_tanh(x), torch::gelu(x, "tanh"), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(yeto::nn::gelu_tanh(x), torch::gelu(x), 1e-6, 1e-6));
}

TEST(Checkpoint, SameGradientsAsThePlainForward) {
  torch::manual_seed(8);
  Linear a(6, 6, true), b(6, 3, true);
  b->add_adapter("default", LoraConfig{2, 2.0});
  {
    torch::NoGradGuard g;
    b->lora_B("default").normal_();
  }
  auto block = [&](const torch::Tensor& x) { return b(torch::gelu(a(x))); };
  auto x = torch::randn({4, 6}, torch::requires_grad());
  block(x).pow(2).sum().backward();
  auto ga = a->weight.grad().clone();
  auto gB = b->lora_B("default").grad().clone();
  auto gx = x.grad().clone();
  a->weight.mutable_grad().reset();
  b->lora_B("default").mutable_grad().reset();
  x.mutable_grad().reset();
  auto y = yeto::nn::checkpoint(std::function<torch::Tensor(const torch::Tensor&)>(block), x);
  y.pow(2).sum().backward();
  EXPECT_TRUE(torch::allclose(a->weight.grad(), ga, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(b->lora_B("default").grad(), gB, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(x.grad(), gx, 1e-6, 1e-6));
  // Inputs that need no gradient: parameters inside still get theirs.
  b->lora_B("default").mutable_grad().reset();
  auto x2 = x.detach();
  yeto::nn::checkpoint(std::function<torch::Tensor(const torch::Tensor&)>(block), x2).pow(2).sum().backward();
  EXPECT_TRUE(b->lora_B("default").grad().defined());
  // Without grad mode it is a plain call.
  torch::NoGradGuard g;
  auto z = yeto::nn::checkpoint(std::function<torch::Tensor(const torch::Tensor&)>(block), x2);
  EXPECT_FALSE(z.requires_grad());
}

TEST(Checkpoint, RecomputationDrawsTheSameDropoutMask) {
  Linear a(8, 8, true);
  auto block = [&](const torch::Tensor& x) { return torch::dropout(a(x), 0.5, /*train=*/true); };
  auto x = torch::randn({16, 8});
  torch::manual_seed(42);
  block(x).sum().backward();
  auto plain = a->weight.grad().clone();
  a->weight.mutable_grad().reset();
  torch::manual_seed(42);
  auto y = yeto::nn::checkpoint(std::function<torch::Tensor(const torch::Tensor&)>(block), x);
  torch::randn({100});  // the RNG moves on before backward; the recomputation must not see it
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(a->weight.grad(), plain, 1e-6, 1e-6));
}

TEST(Checkpoint, AnUndefinedOutputDoesNotShiftTheOthersGradients) {
  // As SD3's last joint block returns no text stream: (undefined, image).
  torch::manual_seed(9);
  Linear a(5, 5, true);
  auto fn = [&](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{torch::Tensor(), a(in[0])}; };
  auto x = torch::randn({3, 5});
  fn({x})[1].pow(2).sum().backward();
  const auto plain = a->weight.grad().clone();
  a->weight.mutable_grad().reset();
  const auto out = yeto::nn::checkpoint(fn, {x});
  ASSERT_FALSE(out[0].defined());
  out[1].pow(2).sum().backward();
  ASSERT_TRUE(a->weight.grad().defined());
  EXPECT_TRUE(torch::equal(a->weight.grad(), plain));
}

namespace {
// A stack of four blocks run through CheckpointedBlocks::run_block, counting the forwards.
struct FourBlocks : yeto::nn::CheckpointedBlocks {
  std::vector<Linear> blocks;
  int calls = 0;
  FourBlocks() {
    torch::manual_seed(10);
    for (int i = 0; i < 4; ++i) blocks.emplace_back(4, 4, true);
  }
  torch::Tensor forward(torch::Tensor x) {
    for (std::int64_t i = 0; i < 4; ++i) {
      auto* block = blocks[static_cast<std::size_t>(i)].get();
      x = run_block(
          i,
          [this, block](const std::vector<torch::Tensor>& in) {
            ++calls;
            return std::vector<torch::Tensor>{torch::tanh(block->forward(in[0]))};
          },
          {x})[0];
    }
    return x;
  }
};
}  // namespace

TEST(Checkpoint, EveryKthBlockRecomputesAndGradientsStayTheSame) {
  yeto::nn::BlockCheckpointing off, all{true, 1}, half{true, 2}, third{true, 3};
  EXPECT_FALSE(off.recomputes(0));
  EXPECT_TRUE(all.recomputes(3));
  EXPECT_TRUE(half.recomputes(0) && half.recomputes(2) && !half.recomputes(1) && !half.recomputes(3));
  EXPECT_TRUE(third.recomputes(0) && third.recomputes(3) && !third.recomputes(2));
  const auto x = torch::randn({2, 4});
  std::vector<torch::Tensor> reference;
  for (const auto& [policy, forwards] : {std::pair{off, 4}, std::pair{all, 8}, std::pair{half, 6}, std::pair{third, 6}}) {
    FourBlocks m;
    m.activation_checkpointing = policy;
    m.forward(x).pow(2).sum().backward();
    EXPECT_EQ(m.calls, forwards) << "every " << policy.every;  // one recomputation per checkpointed block
    std::vector<torch::Tensor> grads;
    for (auto& b : m.blocks) grads.push_back(b->weight.grad());
    if (reference.empty()) reference = grads;
    for (std::size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], reference[i])) << i;
  }
  // Without grad mode no block is checkpointed.
  FourBlocks m;
  m.activation_checkpointing = all;
  torch::NoGradGuard g;
  m.forward(x);
  EXPECT_EQ(m.calls, 4);
}

namespace {
// A denoiser-like module: a projection outside the blocks, then a ModuleList of three blocks
// (two Linears each) run through run_block: what nn::block_modules and BlockShards see in a
// family's denoiser.
struct StackImpl : torch::nn::Module, yeto::nn::CheckpointedBlocks {
  Linear proj{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  StackImpl() {
    torch::manual_seed(21);
    proj = register_module("proj", Linear(6, 8, true));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) {
      auto b = std::make_shared<torch::nn::Module>();
      b->register_module("a", Linear(8, 8, true));
      b->register_module("b", Linear(8, 8, i != 1));
      blocks->push_back(b);
    }
  }
  // fp8 storage of the blocks' Linear weights (what the kit does while loading under model.storage = fp8).
  void to_fp8() {
    for (auto& [path, layer] : yeto::nn::lora_capable_layers(*this))
      if (path.rfind("blocks.", 0) == 0) layer->store_fp8(layer->weight.detach().clone());
  }
  Linear layer(std::size_t block, const char* name) {
    return Linear(std::dynamic_pointer_cast<yeto::nn::LinearImpl>(blocks->ptr(block)->named_children()[name]));
  }
  void add_lora() {
    LoraConfig c;
    c.r = 2;
    c.init = "gaussian";
    torch::manual_seed(22);
    for (auto& [path, layer] : yeto::nn::lora_capable_layers(*this)) layer->add_adapter("default", c);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = proj->forward(x);
    for (std::size_t i = 0; i < 3; ++i) {
      auto a = layer(i, "a"), b = layer(i, "b");
      x = run_block(
          static_cast<std::int64_t>(i),
          [a, b](const std::vector<torch::Tensor>& in) mutable {
            return std::vector<torch::Tensor>{in[0] + b->forward(torch::tanh(a->forward(in[0])))};
          },
          {x})[0];
    }
    return x;
  }
  std::vector<torch::Tensor> lora_grads() {
    std::vector<torch::Tensor> g;
    for (const auto& p : named_parameters())
      if (p.key().find("lora_") != std::string::npos) g.push_back(p.value().grad().clone());
    return g;
  }
};
TORCH_MODULE(Stack);

// Shards `m`'s blocks over `world` ranks with `gather`, as the family kit does while loading.
void shard_stack(Stack& m, int rank, int world, yeto::nn::AllGatherFn gather) {
  m->sharding = std::make_shared<yeto::nn::BlockShards>(rank, world, std::move(gather), yeto::nn::block_modules(*m));
  std::vector<std::string> names;
  for (const auto& p : m->named_parameters()) names.push_back(p.key());
  m->sharding->loaded(names);
}

// Two ranks as threads: each writes its shard into a slot, then both read both slots.
struct Exchange {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<torch::Tensor> slots{2};
  int arrived = 0, generation = 0, calls = 0;
  void wait_all() {
    std::unique_lock lock(mutex);
    const int gen = generation;
    if (++arrived == 2) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
  yeto::nn::AllGatherFn gather(int rank) {
    return [this, rank](const torch::Tensor& shard, const torch::Tensor& out) {
      {
        std::lock_guard lock(mutex);
        slots[static_cast<std::size_t>(rank)] = shard.clone();
        if (rank == 0) ++calls;
      }
      wait_all();
      const auto n = shard.numel();
      for (int r = 0; r < 2; ++r) out.narrow(0, r * n, n).copy_(slots[static_cast<std::size_t>(r)]);
      wait_all();
    };
  }
};
}  // namespace

TEST(BlockShards, ShardedBlocksGiveTheSameOutputsAndLoraGradientsOnOneAndTwoRanks) {
  for (const bool fp8 : {false, true}) {
    const auto x = torch::randn({5, 6}, torch::TensorOptions().dtype(torch::kFloat));
    Stack whole;
    if (fp8) whole->to_fp8();
    whole->add_lora();
    const auto ref_out = whole->forward(x);
    ref_out.pow(2).sum().backward();
    const auto ref_grads = whole->lora_grads();
    ASSERT_EQ(ref_grads.size(), 14u);  // A and B of seven layers

    // One rank: the blocks' parameters are empty between uses. Each block gathers its block
    // unit (the biases) once forward and once for its recomputation in backward; each Linear
    // gathers its weight around its forward GEMM, its recomputed one and its input gradient:
    // per block 2 + 2 x 3 = 8 gathers. No Linear weight is whole when another one is gathered.
    {
      Stack m;
      if (fp8) m->to_fp8();
      // (A prefetch calls the gather on a thread of its own; the first step prefetches nothing,
      // so the module is looked at only then.)
      std::atomic<int> calls{0};
      int most_whole = 0;
      bool look = true;
      shard_stack(m, 0, 1, [&](const torch::Tensor& s, const torch::Tensor& o) {
        ++calls;
        int resident = 0;
        for (std::size_t b = 0; b < 3 && look; ++b)
          for (const char* n : {"a", "b"}) resident += m->layer(b, n)->weight.numel() > 0 ? 1 : 0;
        most_whole = std::max(most_whole, resident);
        o.copy_(s);
      });
      m->add_lora();  // after sharding, as prepare does: replicated, never sharded
      EXPECT_EQ(yeto::nn::block_modules(*m).size(), 3u);
      EXPECT_EQ(m->sharding->units(0), 3);
      // One 8 x 8 float32 weight; under fp8 (64 bytes of codes) block 0's unit of two float32
      // biases, the second at the 64-byte aligned offset.
      EXPECT_EQ(m->sharding->largest_unit_bytes(), fp8 ? 64 + 32 : 256);
      EXPECT_EQ(m->layer(0, "a")->weight.numel(), 0);
      EXPECT_EQ(m->layer(0, "a")->bias.numel(), 0);
      EXPECT_EQ(m->proj->weight.numel(), 48);  // outside the blocks: whole
      const auto out = m->forward(x);
      EXPECT_TRUE(torch::equal(out, ref_out)) << "fp8 " << fp8;
      EXPECT_EQ(calls, 9);
      out.pow(2).sum().backward();
      EXPECT_EQ(calls, 24);
      EXPECT_EQ(most_whole, 0);
      look = false;
      const auto grads = m->lora_grads();
      ASSERT_EQ(grads.size(), ref_grads.size());
      for (std::size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], ref_grads[i])) << i;
      EXPECT_EQ(m->layer(2, "b")->weight.numel(), 0);
      EXPECT_EQ(m->layer(2, "b")->weight.scalar_type(), fp8 ? torch::kByte : torch::kFloat);
      // The first step had seen no gather twice: nothing prefetched.
      EXPECT_EQ(m->sharding->prefetched(), 0);
      // Inference gathers every unit once and keeps nothing; each block's second Linear comes
      // prefetched (the first step's forward showed that it follows the first one).
      {
        torch::NoGradGuard no_grad;
        EXPECT_TRUE(torch::equal(m->forward(x), ref_out));
      }
      EXPECT_EQ(calls, 33);
      EXPECT_EQ(m->sharding->prefetched(), 3);
      EXPECT_EQ(m->layer(1, "a")->weight.numel(), 0);
      // A second step: every gather of a block's run after its first is prefetched (forward:
      // both Linears; recomputation and backward: a and b forward, b and a backward), the same
      // number of collectives and the same bytes.
      for (auto& p : m->parameters())
        if (p.grad().defined()) p.mutable_grad().zero_();
      const auto out2 = m->forward(x);
      EXPECT_TRUE(torch::equal(out2, ref_out));
      out2.pow(2).sum().backward();
      EXPECT_EQ(calls, 33 + 24);
      EXPECT_EQ(m->sharding->prefetched(), 3 + 3 * 6);
      const auto grads2 = m->lora_grads();
      for (std::size_t i = 0; i < grads2.size(); ++i) EXPECT_TRUE(torch::equal(grads2[i], ref_grads[i])) << i;
      // Without prefetching, the same step gathers the same units, none prefetched.
      m->sharding->set_prefetch(false);
      m->forward(x).pow(2).sum().backward();
      EXPECT_EQ(calls, 33 + 48);
      EXPECT_EQ(m->sharding->prefetched(), 21);
    }

    // Two ranks: each keeps about half of every block; both compute the unsharded numbers.
    Exchange ex;
    std::vector<std::vector<torch::Tensor>> grads(2), grads2(2);
    std::vector<std::int64_t> prefetched(2);
    std::vector<torch::Tensor> outs(2);
    std::vector<std::int64_t> shard_bytes(2), full_bytes(2);
    // Built and sharded one after the other: construction and LoRA initialisation draw from the
    // global generator, which the two rank threads must not share.
    std::vector<Stack> models;
    for (int r = 0; r < 2; ++r) {
      Stack m;
      if (fp8) m->to_fp8();
      shard_stack(m, r, 2, ex.gather(r));
      m->add_lora();
      models.push_back(m);
    }
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        Stack& m = models[static_cast<std::size_t>(r)];
        outs[static_cast<std::size_t>(r)] = m->forward(x);
        outs[static_cast<std::size_t>(r)].pow(2).sum().backward();
        grads[static_cast<std::size_t>(r)] = m->lora_grads();
        // A second step, its gathers prefetched on each rank's own threads.
        for (auto& p : m->parameters())
          if (p.grad().defined()) p.mutable_grad().zero_();
        m->forward(x).pow(2).sum().backward();
        grads2[static_cast<std::size_t>(r)] = m->lora_grads();
        prefetched[static_cast<std::size_t>(r)] = m->sharding->prefetched();
        shard_bytes[static_cast<std::size_t>(r)] = m->sharding->shard_bytes();
        full_bytes[static_cast<std::size_t>(r)] = m->sharding->full_bytes();
      });
    for (auto& t : ranks) t.join();
    EXPECT_EQ(ex.calls, 48);
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_TRUE(torch::equal(outs[r], ref_out)) << r;
      ASSERT_EQ(grads[r].size(), ref_grads.size());
      ASSERT_EQ(grads2[r].size(), ref_grads.size());
      for (std::size_t i = 0; i < grads[r].size(); ++i) {
        EXPECT_TRUE(torch::equal(grads[r][i], ref_grads[i])) << r << " " << i;
        EXPECT_TRUE(torch::equal(grads2[r][i], ref_grads[i])) << r << " " << i;
      }
      EXPECT_EQ(prefetched[r], 18) << r;
      // Half of each unit (three per block), each padded to 64-byte pieces and entries.
      EXPECT_LE(shard_bytes[r], full_bytes[r] / 2 + 3 * 3 * 64 + 3 * 64) << r;
      EXPECT_GE(shard_bytes[r], full_bytes[r] / 2) << r;
    }
  }
}

// Block swap (model.block_swap) is BlockShards on one rank with the whole Linear weights kept
// elsewhere (host memory; here another CPU tensor) and copied in for each GEMM: blocks 1 and 2
// swapped, block 0 resident, with and without activation checkpointing.
TEST(BlockSwap, SwappedLinearsComeInOneAtATimeAndGiveThePlainNumbers) {
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "plain");
    const auto x = torch::randn({5, 6}, torch::TensorOptions().dtype(torch::kFloat));
    Stack whole;
    whole->add_lora();
    whole->activation_checkpointing = {checkpointing, 1};
    const auto ref_out = whole->forward(x);
    ref_out.pow(2).sum().backward();
    const auto ref_grads = whole->lora_grads();

    Stack m;
    auto swapped = yeto::nn::block_modules(*m);
    swapped.erase(swapped.begin());  // the last two blocks
    yeto::nn::BlockShards::Options o;
    o.block_unit = false;
    o.device = torch::Device(torch::kCPU);
    std::atomic<int> calls{0};
    int most_whole = 0;
    bool look = true;
    m->block_swap = std::make_shared<yeto::nn::BlockShards>(
        0, 1,
        [&](const torch::Tensor& host, const torch::Tensor& out) {
          ++calls;
          int resident = 0;
          for (std::size_t b = 1; b < 3 && look; ++b)
            for (const char* n : {"a", "b"}) resident += m->layer(b, n)->weight.numel() > 0 ? 1 : 0;
          most_whole = std::max(most_whole, resident);
          out.copy_(host);
        },
        swapped, o);
    std::vector<std::string> names;
    for (const auto& [path, module] : swapped)
      for (const auto& p : module->named_parameters()) names.push_back(path + "." + p.key());
    m->block_swap->loaded(names);
    m->add_lora();
    m->activation_checkpointing = {checkpointing, 1};
    // Block 0 whole; blocks 1 and 2 keep their biases but not their Linear weights.
    EXPECT_EQ(m->layer(0, "a")->weight.numel(), 64);
    EXPECT_EQ(m->layer(1, "a")->weight.numel(), 0);
    EXPECT_EQ(m->layer(2, "b")->weight.numel(), 0);
    EXPECT_EQ(m->layer(1, "a")->bias.numel(), 8);
    EXPECT_EQ(m->block_swap->shard_bytes(), 4 * 256);  // four 8 x 8 float32 weights, nothing else
    EXPECT_EQ(m->block_swap->full_bytes(), 4 * 256);

    const auto out = m->forward(x);
    EXPECT_TRUE(torch::equal(out, ref_out));
    out.pow(2).sum().backward();
    // Each swapped Linear: forward and input gradient; with checkpointing also the forward
    // without grad that the recomputation repeats.
    const int per_step = 4 * (checkpointing ? 3 : 2);
    EXPECT_EQ(calls, per_step);
    EXPECT_EQ(most_whole, 0);  // never two swapped weights on the device at once
    EXPECT_EQ(m->layer(1, "a")->weight.numel(), 0);
    auto grads = m->lora_grads();
    ASSERT_EQ(grads.size(), ref_grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], ref_grads[i])) << i;

    // The second step: every copy but its first was prefetched (the order learned in the first
    // step; that the next step's first copy follows the last one is learned now), the same numbers.
    look = false;
    for (auto& p : m->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
    m->forward(x).pow(2).sum().backward();
    // (+1: the copy that begins the next step is prefetched as this one ends, and may have
    // started already.)
    EXPECT_GE(calls, 2 * per_step);
    EXPECT_LE(calls, 2 * per_step + 1);
    EXPECT_EQ(m->block_swap->prefetched(), per_step - 1);
    grads = m->lora_grads();
    for (std::size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(torch::equal(grads[i], ref_grads[i])) << i;
  }
}

TEST(BlockShards, ABlockWhoseWeightsDidNotAllLoadIsNamed) {
  Stack m;
  m->sharding = std::make_shared<yeto::nn::BlockShards>(
      0, 1, [](const torch::Tensor& s, const torch::Tensor& o) { o.copy_(s); }, yeto::nn::block_modules(*m));
  m->sharding->loaded({"proj.weight", "blocks.0.a.weight", "blocks.0.a.bias", "blocks.0.b.weight", "blocks.0.b.bias",
                       "blocks.1.a.weight"});
  EXPECT_TRUE(m->sharding->sharded(0));
  EXPECT_FALSE(m->sharding->sharded(1));
  EXPECT_EQ(m->sharding->first_unsharded(), "blocks.1 (waits for blocks.1.a.bias)");
  try {
    m->sharding->gather(1);
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("block blocks.1 was never sharded"), std::string::npos) << e.what();
  }
}

TEST(StateDict, StrictLoadingNamesProblems) {
  Linear lin(3, 2, true);
  std::map<std::string, torch::Tensor> good{{"weight", torch::ones({2, 3})}, {"bias", torch::zeros({2})}};
  auto report = yeto::nn::load_named_tensors(*lin, good);
  EXPECT_EQ(report.loaded.size(), 2u);
  EXPECT_TRUE(lin->weight.eq(1).all().item<bool>());
  auto extra = good;
  extra["position_ids"] = torch::zeros({3});
  try {
    yeto::nn::load_named_tensors(*lin, extra);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected position_ids"), std::string::npos) << e.what();
  }
  yeto::nn::LoadOptions opt;
  opt.ignore_unexpected = {"position_*"};
  EXPECT_NO_THROW(yeto::nn::load_named_tensors(*lin, extra, opt));
  std::map<std::string, torch::Tensor> bad{{"weight", torch::ones({3, 2})}, {"bias", torch::zeros({2})}};
  try {
    yeto::nn::load_named_tensors(*lin, bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'weight' has shape [3, 2] but the model expects [2, 3]"), std::string::npos)
        << e.what();
  }
  std::map<std::string, torch::Tensor> missing{{"weight", torch::ones({2, 3})}};
  EXPECT_THROW(yeto::nn::load_named_tensors(*lin, missing), std::invalid_argument);
  opt.strict = false;
  EXPECT_EQ(yeto::nn::load_named_tensors(*lin, missing, opt).missing, (std::vector<std::string>{"bias"}));
}

}  // namespace

// ---- fp8 (e4m3fn) weight storage ----------------------------------------------------------------

TEST(Fp8, EncodesHandComputedValuesExactly) {
  using yeto::nn::encode_e4m3;
  struct Case {
    float x;
    std::uint8_t code;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {0.0f, 0x00}, {-0.0f, 0x80},              // zero keeps its sign
      {1.0f, 0x38}, {-2.0f, 0xC0},              // exponent 7 (bias 7), 8
      {1.125f, 0x39}, {1.875f, 0x3F},           // mantissa steps of 1/8
      {448.0f, 0x7E}, {-448.0f, 0xFE},          // the largest finite value
      {240.0f, 0x77},                           // 1.875 * 2^7
      {500.0f, 0x7E}, {1e30f, 0x7E}, {inf, 0x7E}, {-inf, 0xFE},  // saturation
      {464.0f, 0x7E},                           // halfway to 480 (the NaN slot): saturates
      {0.015625f, 0x08},                        // 2^-6, the smallest normal
      {std::ldexp(1.0f, -9), 0x01},             // the smallest subnormal
      {std::ldexp(7.0f, -9), 0x07},             // the largest subnormal
      {std::ldexp(1.0f, -10), 0x00},            // half the smallest subnormal: ties to even (0)
      {std::ldexp(3.0f, -10), 0x02},            // 1.5 x 2^-9: ties to even (2)
      {std::ldexp(5.0f, -10), 0x02},            // 2.5 x 2^-9: ties to even (2)
      {std::ldexp(15.0f, -10), 0x08},           // 7.5 x 2^-9 rounds up into the smallest normal
      {1.0625f, 0x38},                          // halfway between 1 and 1.125: even mantissa (0)
      {1.1875f, 0x3A},                          // halfway between 1.125 and 1.25: even mantissa (2)
      {1.07f, 0x39},                            // nearer 1.125
      {1.05f, 0x38},                            // nearer 1
      {1.97f, 0x40},                            // nearer 2: mantissa overflow into the exponent
      {-0.3f, 0xAA},                            // 0.3 = 1.2 * 2^-2 -> 1.25 * 2^-2 = 0.3125
  };
  for (const auto& c : cases) EXPECT_EQ(encode_e4m3(c.x), c.code) << c.x;
  EXPECT_EQ(encode_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(encode_e4m3(-std::nanf("")), 0xFF);
}

TEST(Fp8, EncodingIsTheNearestCodeTiesToEvenForEveryBf16Value) {
  // An independent reference: the nearest of the finite codes by exhaustive search, ties to the
  // even code, saturating at 448. Checked for every bfloat16 bit pattern (every magnitude and
  // sign, the halfway points between neighbouring codes included).
  std::vector<float> pos;
  for (int c = 0; c < 0x7F; ++c) pos.push_back(yeto::nn::decode_e4m3(static_cast<std::uint8_t>(c)));
  auto reference = [&](float x) -> int {
    if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
    const int sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(x));
    int best = 0;
    for (int c = 1; c < 0x7F; ++c) {
      const double d = std::fabs(a - pos[c]), db = std::fabs(a - pos[best]);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return sign | best;
  };
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const std::uint32_t u = bits << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    ASSERT_EQ(yeto::nn::encode_e4m3(x), reference(x)) << x << " (bf16 bits " << bits << ")";
  }
}

TEST(Fp8, EveryCodeDecodesAndEncodesBack) {
  using yeto::nn::decode_e4m3;
  using yeto::nn::encode_e4m3;
  EXPECT_EQ(decode_e4m3(0x38), 1.0f);
  EXPECT_EQ(decode_e4m3(0x7E), 448.0f);
  EXPECT_EQ(decode_e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(decode_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(decode_e4m3(0xFF)));
  const auto table = yeto::nn::e4m3_table();
  for (int c = 0; c < 256; ++c) {
    const float v = decode_e4m3(static_cast<std::uint8_t>(c));
    if (std::isnan(v)) continue;
    EXPECT_EQ(encode_e4m3(v), c) << c;
    EXPECT_EQ(table[c].item<float>(), v) << c;
  }
}

TEST(Fp8, RowScalesBoundTheError) {
  torch::manual_seed(0);
  auto w = torch::randn({16, 64});
  w[3].zero_();  // an all-zero row gets scale 1
  w[5] *= 1000;  // rows are scaled independently
  const auto [codes, scale] = yeto::nn::quantize_e4m3_rows(w);
  EXPECT_EQ(codes.scalar_type(), torch::kByte);
  EXPECT_EQ(scale.sizes(), (std::vector<int64_t>{16}));
  EXPECT_EQ(scale[3].item<float>(), 1.0f);
  const auto back = yeto::nn::dequantize_e4m3_rows(codes, scale, torch::kFloat);
  // 3 mantissa bits: relative error at most 2^-4 for normal values; the row's maximum is exact.
  const auto amax = std::get<0>(w.abs().max(1, true));
  EXPECT_LE(((back - w).abs() / amax.clamp_min(1e-30)).max().item<float>(), 1.0f / 16);
  EXPECT_TRUE(torch::allclose(std::get<0>(back.abs().max(1)), std::get<0>(w.abs().max(1))));
  // The table lookup (the non-CPU path's formula) gives the same values as the CPU loop.
  const auto lut = yeto::nn::e4m3_table().index_select(0, codes.flatten().to(torch::kInt)).view(codes.sizes());
  EXPECT_TRUE(torch::equal(lut * scale.unsqueeze(1), back));
  EXPECT_TRUE(torch::equal(yeto::nn::dequantize_e4m3_rows(codes, scale, torch::kBFloat16),
                           back.to(torch::kBFloat16)));
}

TEST(Fp8, LinearStoresCodesAndMatchesTheDequantisedWeight) {
  torch::manual_seed(1);
  Linear lin(32, 24);
  lin->to(torch::kBFloat16);
  const auto w = lin->weight.detach().clone();
  lin->store_fp8(w);
  EXPECT_TRUE(lin->fp8());
  EXPECT_EQ(lin->weight.scalar_type(), torch::kByte);
  EXPECT_EQ(lin->named_buffers()["weight_scale"].scalar_type(), torch::kFloat);
  const auto deq = lin->base_weight();
  EXPECT_EQ(deq.scalar_type(), torch::kBFloat16);
  EXPECT_LE((deq.to(torch::kFloat) - w.to(torch::kFloat)).abs().max().item<float>(),
            w.abs().max().item<float>() / 16);
  // Module::to moves the codes without converting them; the compute dtype follows.
  lin->to(torch::kCPU, torch::kFloat);
  EXPECT_EQ(lin->weight.scalar_type(), torch::kByte);
  EXPECT_EQ(lin->base_weight().scalar_type(), torch::kFloat);
  EXPECT_EQ(lin->bias.scalar_type(), torch::kFloat);
  // Forward and input gradients equal the plain layer with the dequantised weight.
  lin->add_adapter("default", LoraConfig{4, 4.0, 0.0, false, "gaussian"});
  auto x = torch::randn({3, 5, 32}, torch::requires_grad());
  auto y = lin(x);
  auto x2 = x.detach().clone().requires_grad_(true);
  const auto Wd = lin->base_weight();
  auto y2 = torch::linear(x2, Wd, lin->bias) +
            torch::linear(torch::linear(x2, lin->lora_A("default")), lin->lora_B("default")) * lin->scale("default");
  EXPECT_TRUE(torch::allclose(y, y2, 1e-5, 1e-5));
  y.pow(2).sum().backward();
  y2.pow(2).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(lin->lora_A("default").grad().defined());
  EXPECT_FALSE(lin->weight.requires_grad());
  EXPECT_THROW(lin->merge(), std::invalid_argument);
  EXPECT_THROW(lin->set_base_trainable(true), std::invalid_argument);
}

// Codes made elsewhere (a scaled fp8 checkpoint's) are kept as they are, without a copy, and
// compute as store_fp8 of the float weight does; a 4-D tensor dequantises one scale per row.
TEST(Fp8, LinearKeepsGivenCodesAsTheyAre) {
  torch::manual_seed(2);
  Linear a(16, 8), b(16, 8);
  b->bias.detach().copy_(a->bias.detach());
  const auto w = a->weight.detach().clone();
  a->store_fp8(w);
  const auto [codes, scale] = yeto::nn::quantize_e4m3_rows(w);
  b->store_fp8_codes(codes, scale, torch::kFloat);
  EXPECT_EQ(b->weight.data_ptr(), codes.data_ptr());
  const auto x = torch::randn({3, 16});
  EXPECT_TRUE(torch::equal(a(x), b(x)));
  EXPECT_THROW(b->store_fp8_codes(codes.t().contiguous(), scale, torch::kFloat), std::invalid_argument);
  EXPECT_THROW(b->store_fp8_codes(codes, scale.narrow(0, 0, 4), torch::kFloat), std::invalid_argument);
  EXPECT_THROW(b->store_fp8_codes(codes.to(torch::kFloat), scale, torch::kFloat), std::invalid_argument);
  const auto c4 = codes.reshape({8, 2, 2, 4});
  EXPECT_TRUE(torch::equal(yeto::nn::dequantize_e4m3(c4, scale, torch::kFloat),
                           yeto::nn::dequantize_e4m3_rows(codes, scale, torch::kFloat).reshape({8, 2, 2, 4})));
}

TEST(Fp8, BlockedGemmsMatchTheWholeWeight) {
  torch::manual_seed(2);
  const auto w = torch::randn({150, 130}).to(torch::kBFloat16);
  const auto [codes, scale] = yeto::nn::quantize_e4m3_rows(w);
  const auto whole = yeto::nn::dequantize_e4m3_rows(codes, scale, torch::kBFloat16);
  // A block is the same values as the whole weight's slice.
  EXPECT_TRUE(torch::equal(yeto::nn::dequantize_e4m3_block(codes, scale, torch::kBFloat16, 5, 11, 7, 13),
                           whole.narrow(0, 5, 11).narrow(1, 7, 13)));
  EXPECT_THROW(yeto::nn::dequantize_e4m3_block(codes, scale, torch::kBFloat16, 140, 11, 0, 130),
               std::invalid_argument);
  const auto x = torch::randn({2, 6, 130}).to(torch::kBFloat16);
  const auto b = torch::randn({150}).to(torch::kBFloat16);
  const auto g = torch::randn({2, 6, 150}).to(torch::kBFloat16);
  // The float32 results of the same bf16 operands: what both the whole and the blocked GEMMs round.
  const auto wf = whole.to(torch::kFloat);
  const auto y32 = torch::linear(x.to(torch::kFloat), wf, b.to(torch::kFloat));
  const auto gx32 = torch::matmul(g.to(torch::kFloat), wf);
  auto err = [](const at::Tensor& a, const at::Tensor& ref) { return (a.to(torch::kFloat) - ref).abs().max().item<float>(); };
  const float y_whole = err(torch::linear(x, whole, b), y32), gx_whole = err(torch::matmul(g, whole), gx32);
  // 130 * 50 elements: 3 blocks of 50 output rows forward; 3 blocks of 44 / 44 / 42 input columns
  // backward (150 * 50 / 150 = 50 wanted, balanced); then one block (the default size).
  for (const std::int64_t block : {std::int64_t{130 * 50}, yeto::nn::kFp8BlockElements}) {
    const auto y = yeto::nn::fp8_linear(x, codes, scale, b, torch::kBFloat16, block);
    const auto gx = yeto::nn::fp8_grad_input(g, codes, scale, torch::kBFloat16, block);
    ASSERT_EQ(y.sizes(), y32.sizes());
    ASSERT_EQ(gx.sizes(), gx32.sizes());
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    // Within the whole-weight GEMM's own bf16 rounding (and at most one bf16 step of the largest value).
    EXPECT_LE(err(y, y32), std::max(2 * y_whole, y32.abs().max().item<float>() / 128)) << block;
    EXPECT_LE(err(gx, gx32), std::max(2 * gx_whole, gx32.abs().max().item<float>() / 128)) << block;
  }
  // float32 compute: each block reduces over the same elements as the whole GEMM.
  const auto w32 = yeto::nn::dequantize_e4m3_rows(codes, scale, torch::kFloat);
  EXPECT_TRUE(torch::allclose(yeto::nn::fp8_linear(x.to(torch::kFloat), codes, scale, at::Tensor(), torch::kFloat,
                                                   130 * 50),
                              torch::linear(x.to(torch::kFloat), w32), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(yeto::nn::fp8_grad_input(g.to(torch::kFloat), codes, scale, torch::kFloat, 150 * 50),
                              torch::matmul(g.to(torch::kFloat), w32), 1e-5, 1e-5));
}

TEST(Fp8, TwentyLoraStepsTrackTheBf16Run) {
  // A frozen random base of three layers, a LoRA on each, 20 Adam steps on a fixed regression
  // target: bf16 storage against fp8 storage with the same bf16 compute. Stated tolerance: every
  // step's loss within 5% of the bf16 run's (e4m3 keeps 3 mantissa bits; bf16 keeps 7).
  auto run = [](bool fp8) {
    torch::manual_seed(7);
    std::vector<Linear> layers = {Linear(64, 128), Linear(128, 128), Linear(128, 16)};
    const auto x = torch::randn({32, 64});
    const auto target = torch::randn({32, 16}) * 0.1;
    std::vector<at::Tensor> params;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    for (auto& l : layers) {
      l->to(torch::kBFloat16);
      if (fp8) l->store_fp8(l->weight.detach().clone());
      l->add_adapter("default", LoraConfig{8, 8.0}, gen);
      params.push_back(l->lora_A("default"));
      params.push_back(l->lora_B("default"));
    }
    torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-2));
    std::vector<float> losses;
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      auto h = x.to(torch::kBFloat16);
      for (std::size_t i = 0; i < layers.size(); ++i) {
        h = layers[i](h);
        if (i + 1 < layers.size()) h = torch::gelu(h);
      }
      auto loss = (h.to(torch::kFloat) - target).pow(2).mean();
      loss.backward();
      opt.step();
      losses.push_back(loss.item<float>());
    }
    return losses;
  };
  const auto bf16 = run(false), fp8 = run(true);
  EXPECT_LT(bf16.back(), bf16.front() * 0.5f);  // it trains
  for (std::size_t i = 0; i < bf16.size(); ++i)
    EXPECT_NEAR(fp8[i], bf16[i], 0.05f * bf16[i]) << "step " << i;
}

// nn::group_norm: float32 bit for bit as at::group_norm; a bf16 input, contiguous or
// channels-last (LibTorch 1.13's bf16 CPU kernel accumulates a channels-last input's group
// statistics in bf16), within bf16 rounding of the float32 result on the same values.
TEST(Norms, GroupNormRunsReducedPrecisionInFloat32OnTheCpu) {
  auto gen = yeto::compat::make_cpu_generator(11);
  const auto offsets = at::randn({1, 128, 1, 1}, gen) * 0.3;
  const auto x = at::randn({2, 128, 32, 32}, gen) * 0.7 + offsets;
  const auto w = at::randn({128}, gen) * 0.1 + 1, b = at::randn({128}, gen) * 0.1;
  EXPECT_TRUE(yeto::nn::group_norm(x, 32, w, b, 1e-6).equal(at::group_norm(x, 32, w, b, 1e-6)));
  const auto xb = x.to(at::kBFloat16);
  const auto ref = at::group_norm(xb.to(at::kFloat), 32, w, b, 1e-6);
  for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    const auto in = xb.contiguous(format);
    const auto y = yeto::nn::group_norm(in, 32, w.to(at::kBFloat16), b.to(at::kBFloat16), 1e-6);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    const double rel = ((y.to(at::kFloat) - ref).norm() / ref.norm()).item<double>();
    EXPECT_LT(rel, 0.006) << (format == at::MemoryFormat::ChannelsLast ? "channels-last" : "contiguous");
  }
  // Through a module: its parameters and options.
  torch::nn::GroupNorm m(torch::nn::GroupNormOptions(32, 128).eps(1e-6));
  EXPECT_TRUE(yeto::nn::group_norm(m, x).equal(m(x)));
}
