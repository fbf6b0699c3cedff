// The memory model (host/memory) on a hand-built inventory: every part checked against the
// arithmetic written out here.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "memory/memory_model.hpp"

namespace yeto::memory {
namespace {

// Two blocks of one linear 64 -> 256 and one 256 -> 64 (plus a per-sample modulation 64 -> 384),
// a 3-channel pixel convolution of 8 channels in the VAE, a bf16 denoiser, 4 heads.
Inventory toy() {
  Inventory inv;
  inv.model = "toy";
  inv.compute_dtype = "bf16";
  inv.tokens.token_pixels = 16;
  inv.tokens.text_tokens = 8;
  inv.tokens.attention = "joint";
  inv.tokens.per_sample_linears = {"norm.linear"};
  ComponentEntry den{"transformer", "Toy", true, {}};
  for (int b = 0; b < 2; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    den.parameters.push_back({p + "ff.up.weight", {256, 64}, "bf16"});
    den.parameters.push_back({p + "ff.down.weight", {64, 256}, "bf16"});
    den.parameters.push_back({p + "norm.linear.weight", {384, 64}, "bf16"});
    den.parameters.push_back({p + "ff.up.bias", {256}, "bf16"});
  }
  den.parameters.push_back({"proj_in.weight", {64, 16}, "bf16"});
  inv.components.push_back(den);
  ComponentEntry vae{"vae", "ToyVAE", false, {}};
  vae.parameters.push_back({"encoder.conv_in.weight", {8, 3, 3, 3}, "f32"});
  inv.components.push_back(vae);
  inv.lora.push_back({"blocks.0.ff.up.lora_A.weight", {4, 64}, "f32"});
  inv.lora.push_back({"blocks.0.ff.up.lora_B.weight", {256, 4}, "f32"});
  inv.heads["transformer"] = 4;
  return inv;
}

double part(const Breakdown& b, const std::string& name) {
  for (const auto& p : b.parts)
    if (p.name == name) return p.host_bytes + p.device_bytes;
  return -1;
}

TEST(MemoryModel, BaseLoraAndActivationsByHand) {
  const Inventory inv = toy();
  RunShape run;
  run.height = 64;  // 4 x 4 = 16 image tokens, + 8 text (joint) = 24
  run.width = 64;
  run.cached_latents = true;  // no encoding transient: the step's activations count
  const Breakdown b = estimate(inv, run);
  EXPECT_EQ(b.image_tokens, 16);
  EXPECT_EQ(b.text_tokens, 8);
  EXPECT_EQ(b.blocks, 2);
  const double block_params = 256 * 64 + 64 * 256 + 384 * 64 + 256;
  EXPECT_DOUBLE_EQ(part(b, "frozen base bf16"), (2 * block_params + 64 * 16) * 2);
  EXPECT_DOUBLE_EQ(part(b, "frozen base f32"), 8 * 3 * 3 * 3 * 4.0);  // the VAE, loaded all the same
  EXPECT_EQ(b.lora_params, 4 * 64 + 256 * 4);
  EXPECT_DOUBLE_EQ(part(b, "lora + grads + adamw"), (4 * 64 + 256 * 4) * 16.0);
  // Per block: 24 tokens x (64 + 256 + 256 + 64) features x 2 bytes (the modulation runs per
  // sample), + scores 4 heads x 24 x 24 x (4 + 2) bytes; the latents term 16 x 64 x 16.
  const double block = 24.0 * 640 * 2 + 4.0 * 24 * 24 * 6;
  EXPECT_DOUBLE_EQ(part(b, "activations"), 2 * block + 16.0 * 64 * 16);
  EXPECT_DOUBLE_EQ(part(b, "allocator retention"), kCpuHeapRetention * 2 * block);
  EXPECT_DOUBLE_EQ(part(b, "workspace"), std::max(24.0 * 256 * 4, 4.0 * 24 * 24 * 4));
  EXPECT_DOUBLE_EQ(part(b, "runtime"), kCpuRuntimeBytes);
  EXPECT_EQ(b.device_bytes, 0);
}

TEST(MemoryModel, TextLinearsSeeOnlyTheTextTokens) {
  Inventory inv = toy();
  inv.tokens.text_linears = {"ff.down"};
  RunShape run;
  run.height = run.width = 64;
  run.cached_latents = true;
  const Breakdown b = estimate(inv, run);
  // ff.up at 24 tokens (64 + 256 features), ff.down at the 8 text tokens (256 + 64).
  const double block = (24.0 * 320 + 8.0 * 320) * 2 + 4.0 * 24 * 24 * 6;
  EXPECT_DOUBLE_EQ(part(b, "activations"), 2 * block + 16.0 * 64 * 16);
}

TEST(MemoryModel, CheckpointingKeepsInputsAndOneBlock) {
  const Inventory inv = toy();
  RunShape run;
  run.height = run.width = 64;
  run.cached_latents = true;
  run.checkpointing = true;
  const Breakdown b = estimate(inv, run);
  const double block = 24.0 * 640 * 2 + 4.0 * 24 * 24 * 6;
  // Each block keeps its input (24 tokens x 64 hidden x 2 bytes), one block is rebuilt.
  EXPECT_DOUBLE_EQ(part(b, "activations"), 2 * 24.0 * 64 * 2 + block + 16.0 * 64 * 16);
  run.checkpointing_every = 2;  // block 0 checkpointed, block 1 kept
  const Breakdown half = estimate(inv, run);
  EXPECT_DOUBLE_EQ(part(half, "activations"), 24.0 * 64 * 2 + block + block + 16.0 * 64 * 16);
}

TEST(MemoryModel, Fp8StoresDenoiserLinearsAsBytesWithRowScales) {
  const Inventory inv = toy();
  RunShape run;
  run.height = run.width = 64;
  run.cached_latents = true;
  run.storage = "fp8";
  const Breakdown b = estimate(inv, run);
  const double fp8 = 2 * ((256 * 64 + 256 * 4.0) + (64 * 256 + 64 * 4.0) + (384 * 64 + 384 * 4.0)) + (64 * 16 + 64 * 4.0);
  EXPECT_DOUBLE_EQ(part(b, "frozen base fp8 (+ row scales)"), fp8);
  EXPECT_DOUBLE_EQ(part(b, "frozen base bf16"), 2 * 256 * 2.0);  // the biases stay bf16
}

TEST(MemoryModel, EncodingTransientWhenLargerThanTheStep) {
  Inventory inv = toy();
  inv.components[1].parameters[0].shape = {64, 3, 3, 3};
  RunShape run;
  run.height = run.width = 512;  // 1024 image tokens
  const Breakdown b = estimate(inv, run);
  // 64 channels x 512 x 512 x 4 bytes x 6 maps = 403 MB, more than the step's activations.
  EXPECT_DOUBLE_EQ(part(b, "workspace (media encoding)"), 64.0 * 512 * 512 * 4 * 6);
  EXPECT_EQ(part(b, "activations"), 0);
  EXPECT_DOUBLE_EQ(part(b, "frozen base f32"), 64 * 3 * 3 * 3 * 4.0);  // the VAE is loaded
  run.cached_latents = true;  // no encoding: the step's activations again
  EXPECT_GT(part(estimate(inv, run), "activations"), 0);
}

TEST(MemoryModel, CudaFsdpAndBlockSwap) {
  const Inventory inv = toy();
  RunShape run;
  run.height = run.width = 64;
  run.cached_latents = true;
  run.backend = Backend::cuda;
  run.fused_attention = true;
  const double block_bytes = (256 * 64 + 64 * 256 + 384 * 64 + 256) * 2.0;
  const double plain = estimate(inv, run).device_bytes;
  const double largest = 384 * 64 * 2.0;  // the blocks' largest Linear weight, bf16
  const double linears = (256 * 64 + 64 * 256 + 384 * 64) * 2.0;  // a block's Linear weights
  const auto base = [](const Breakdown& x) {  // the frozen base on the device, all dtypes
    double sum = 0;
    for (const auto& p : x.parts)
      if (p.name.rfind("frozen base", 0) == 0) sum += p.device_bytes;
    return sum;
  };
  const double plain_base = base(estimate(inv, run));
  run.fsdp_ranks = 2;  // half of each block + two whole Linear weights; checkpointing implied
  const Breakdown f = estimate(inv, run);
  EXPECT_DOUBLE_EQ(base(f), plain_base - 2 * block_bytes + 2 * block_bytes / 2 + 2 * largest);
  EXPECT_EQ(f.host_bytes, BackendCosts::of(Backend::cuda).runtime_host_bytes);
  run.fsdp_ranks = 1;
  run.block_swap = 2;  // both blocks' Linear weights on the host, the two largest in flight
  const Breakdown s = estimate(inv, run);
  EXPECT_DOUBLE_EQ(part(s, "swapped blocks (host)"), 2 * linears);
  EXPECT_DOUBLE_EQ(s.device_bytes, plain - 2 * linears + 2 * largest);
  EXPECT_GT(s.host_bytes, f.host_bytes);
  run.block_swap = 1;  // one block's weights on the host: in flight at most what was moved
  EXPECT_DOUBLE_EQ(estimate(inv, run).device_bytes, plain - linears + 2 * largest);
  // On the CPU backend there is no device to swap from: the same peak as without swapping.
  RunShape cpu;
  cpu.height = cpu.width = 64;
  cpu.cached_latents = true;
  const double none = estimate(inv, cpu).host_bytes;
  cpu.block_swap = 1;
  EXPECT_DOUBLE_EQ(estimate(inv, cpu).host_bytes, none);
}

TEST(MemoryModel, TwoDenoisersHoldOneDenoisersActivations) {
  Inventory inv = toy();
  ComponentEntry second = inv.components[0];
  second.name = "transformer_2";
  inv.components.push_back(second);
  inv.heads["transformer_2"] = 4;
  RunShape run;
  run.height = run.width = 64;
  run.cached_latents = true;
  const Breakdown one = estimate(toy(), run);
  const Breakdown two = estimate(inv, run);
  EXPECT_DOUBLE_EQ(part(two, "activations"), part(one, "activations"));  // rows split between the experts
  EXPECT_DOUBLE_EQ(part(two, "frozen base bf16"), 2 * part(one, "frozen base bf16"));
  EXPECT_EQ(two.blocks, 4);
  run.checkpointing = true;
  run.checkpointing_every = 2;  // block 0 of each denoiser
  EXPECT_DOUBLE_EQ(part(estimate(inv, run), "activations"), part(estimate(toy(), run), "activations"));
}

TEST(MemoryModel, VideoTokensAndSelfCrossAttention) {
  TokenGeometry g;
  g.token_pixels = 16;
  g.token_frames = 4;
  EXPECT_EQ(image_tokens(g, 480, 832, 81), 30 * 52 * 21);
  EXPECT_EQ(image_tokens(g, 64, 64, 1), 16);
  g.token_frames = 0;
  EXPECT_EQ(image_tokens(g, 64, 64, 9), 16);  // an image family ignores frames
}

TEST(MemoryModel, InventoryRoundTripsAndBadInputIsNamed) {
  const Inventory inv = toy();
  const Inventory back = Inventory::from_json(inv.to_json(), "toy.json");
  RunShape run;
  EXPECT_DOUBLE_EQ(estimate(back, run).host_bytes, estimate(inv, run).host_bytes);
  nlohmann::json j = inv.to_json();
  j["components"][0]["parameters"][0][2] = "q4";
  EXPECT_THROW(Inventory::from_json(j, "toy.json"), Error);
  EXPECT_THROW(TokenGeometry::from_json({{"attention", "cross"}}, "plan"), Error);
  run.storage = "int4";
  EXPECT_THROW(estimate(inv, run), UsageError);
}

}  // namespace
}  // namespace yeto::memory
