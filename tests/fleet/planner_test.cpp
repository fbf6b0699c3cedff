// The fleet planner (fleet/planner.hpp) on hand-built inventories: the GPU table's errors, the
// fastest configuration that fits a shape, the fleet under a budget or a TFLOPs target, and the
// reasons rejected shapes are given. Torch-free.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "core/error.hpp"
#include "fleet/planner.hpp"

namespace yeto::fleet {
namespace {

using ::testing::HasSubstr;

// A denoiser of `blocks` blocks of `per_block` bf16 parameters (two linears), 1 GB of text
// encoder, a LoRA of 10 M parameters: sizes in round numbers of GB.
memory::Inventory model(int blocks, std::int64_t per_block) {
  memory::Inventory inv;
  inv.model = "toy";
  inv.compute_dtype = "bf16";
  inv.tokens.token_pixels = 16;
  inv.tokens.text_tokens = 64;
  memory::ComponentEntry den{"transformer", "Toy", true, {}};
  const std::int64_t d = 4096, rows = per_block / 2 / d;
  for (int b = 0; b < blocks; ++b) {
    den.parameters.push_back({"blocks." + std::to_string(b) + ".up.weight", {rows, d}, "bf16"});
    den.parameters.push_back({"blocks." + std::to_string(b) + ".down.weight", {d, rows}, "bf16"});
  }
  inv.components.push_back(den);
  inv.components.push_back({"text_encoder", "Enc", false, {{"embed.weight", {500000000}, "bf16"}}});
  inv.lora.push_back({"lora", {10000000}, "f32"});
  inv.heads["transformer"] = 32;
  return inv;
}

GpuType gpu(const std::string& name, double mem, double price, double tflops, int max_per_node = 8) {
  GpuType g;
  g.name = name;
  g.memory_gb = mem;
  g.price = price;
  g.tflops = tflops;
  g.max_per_node = max_per_node;
  return g;
}

memory::RunShape shape() {
  memory::RunShape r;
  r.height = r.width = 512;
  return r;
}

TEST(GpuTable, ParsesAndNamesTheBadEntryAndKey) {
  const auto t = parse_gpu_table(R"(
[[gpu]]
name = "H100"
memory_gb = 80
price = 2.5
spot_price = 1.2
tflops = 989
regions = ["aws:us-east-1", "gcp"]
[[gpu]]
name = "L4"
memory_gb = 24
price = 0.8
tflops = 121
max_per_node = 4
)",
                                 "gpus.toml");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "H100");
  EXPECT_EQ(t[0].spot_price, 1.2);
  EXPECT_EQ(t[0].regions, (std::vector<std::string>{"aws:us-east-1", "gcp"}));
  EXPECT_EQ(t[1].max_per_node, 4);
  EXPECT_EQ(t[1].spot_price, 0);
  auto refusal = [](const std::string& text) {
    try {
      parse_gpu_table(text, "gpus.toml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(refusal("[[gpu]]\nname = \"A\"\nmemory_gb = 80\ntflops = 1\n"), HasSubstr("gpus.toml: gpu[0]: 'price' is missing"));
  EXPECT_THAT(refusal("[[gpu]]\nname = \"A\"\nmemory_gb = -1\nprice = 1\ntflops = 1\n"),
              HasSubstr("gpu[0]: 'memory_gb' must be a number >= 0"));
  EXPECT_THAT(refusal("[[gpu]]\nname = \"A\"\nmemory_gb = 8\nprice = 1\ntflops = 1\nvram = 3\n"),
              HasSubstr("gpu[0]: unknown key 'vram'"));
  EXPECT_THAT(refusal("[gpus]\n"), HasSubstr("gpus.toml: no GPU types"));
  EXPECT_THAT(refusal("[[gpu]\n"), HasSubstr("gpus.toml:1"));
}

TEST(Planner, FastestConfigurationThatFitsAndWhyTheFasterOnesDoNot) {
  // 40 blocks of 0.5 G parameters: 40 GB of bf16 blocks, 20 GB in fp8.
  const auto inv = model(40, 500000000);
  PlanOptions o;
  const auto big = plan_fleet(inv, shape(), {gpu("H200", 141, 4, 989, 1)}, o);
  ASSERT_TRUE(big.chosen);
  EXPECT_EQ(big.chosen->chosen->run.storage, "auto");  // bf16 fits 141 GB as it is
  EXPECT_EQ(big.chosen->chosen->label(), "bf16");
  EXPECT_TRUE(big.chosen->rejected.empty());
  const auto small = plan_fleet(inv, shape(), {gpu("L4", 24, 0.8, 121, 1)}, o);
  ASSERT_TRUE(small.chosen);
  const auto& r = small.chosen->chosen->run;
  EXPECT_EQ(r.storage, "fp8");
  EXPECT_GT(r.block_swap, 0);
  EXPECT_LE(small.chosen->chosen->estimate.device_bytes, 0.9 * 24e9);
  // One block fewer swapped would not fit: the fewest blocks that fit.
  memory::RunShape fewer = r;
  fewer.block_swap = r.block_swap - 1;
  fewer.backend = memory::Backend::cuda;
  EXPECT_GT(memory::estimate(inv, fewer).device_bytes, 0.9 * 24e9);
  // Every faster configuration is named with what it needs.
  ASSERT_FALSE(small.chosen->rejected.empty());
  EXPECT_THAT(small.chosen->rejected.front(), HasSubstr("bf16: needs "));
  EXPECT_THAT(small.chosen->rejected.front(), HasSubstr(" of 21.6 GB"));
}

TEST(Planner, BlockSwapNeedsTheNodesMemory) {
  const auto inv = model(40, 500000000);
  GpuType l4 = gpu("L4", 24, 0.8, 121, 1);
  const auto roomy = plan_fleet(inv, shape(), {l4}, {});
  ASSERT_TRUE(roomy.chosen);
  ASSERT_GT(roomy.chosen->chosen->run.block_swap, 0);
  // A node whose memory cannot hold the swapped blocks: the shape is rejected, saying so.
  l4.host_memory_gb = 2;
  const auto p = plan_fleet(inv, shape(), {l4}, {});
  EXPECT_FALSE(p.chosen);
  ASSERT_EQ(p.rejected.size(), 1u);
  EXPECT_THAT(p.rejected[0].reason, HasSubstr("of host memory, 1.8 GB usable on the node"));
  EXPECT_THAT(parse_gpu_table("[[gpu]]\nname = \"A\"\nmemory_gb = 8\nprice = 1\ntflops = 1\nhost_memory_gb = 64\n", "t")[0].host_memory_gb,
              64);
}

TEST(Planner, ShapesThatCannotFitAreRejectedWithTheirNeed) {
  const auto inv = model(40, 500000000);
  const auto p = plan_fleet(inv, shape(), {gpu("T4", 2, 0.2, 65, 1)}, {});
  EXPECT_FALSE(p.chosen);
  ASSERT_EQ(p.rejected.size(), 1u);
  EXPECT_EQ(p.rejected[0].shape, "1xT4");
  EXPECT_THAT(p.rejected[0].reason, HasSubstr("does not fit 2 GB per GPU even at the leanest configuration (fp8, checkpointing, block swap 40: needs"));
  EXPECT_THAT(describe_plan(p, {}), HasSubstr("plan: no island shape fits"));
}

TEST(Planner, CheapestFleetReachingTheTargetWithinTheBudget) {
  const auto inv = model(8, 250000000);  // 4 GB of blocks: fits everywhere in bf16
  const std::vector<GpuType> gpus{gpu("A", 80, 2.0, 1000, 1), gpu("B", 80, 1.0, 400, 1), gpu("C", 80, 5.0, 3000, 1)};
  PlanOptions o;
  o.flops = 2000;
  // A: 2 islands $4/h; B: 5 islands $5/h; C: 1 island $5/h (ties broken by TFLOPs).
  auto p = plan_fleet(inv, shape(), gpus, o);
  ASSERT_TRUE(p.chosen);
  EXPECT_EQ(p.chosen->gpu.name, "A");
  EXPECT_EQ(p.islands, 2);
  EXPECT_DOUBLE_EQ(p.price(), 4.0);
  // Under a budget of $3/h nothing reaches 2000 TFLOPs; each is rejected naming the budget.
  o.budget = 3;
  p = plan_fleet(inv, shape(), gpus, o);
  EXPECT_FALSE(p.chosen);
  ASSERT_EQ(p.rejected.size(), 3u);
  EXPECT_THAT(p.rejected[0].reason, HasSubstr("2 islands for the TFLOPs target cost $4.00/h, over the budget of $3.00/h"));
  // A budget alone: the most TFLOPs it buys (A: 2 islands = 2000; B: 4 = 1600; C: none).
  o.flops = 0;
  o.budget = 4.5;
  p = plan_fleet(inv, shape(), gpus, o);
  ASSERT_TRUE(p.chosen);
  EXPECT_EQ(p.chosen->gpu.name, "A");
  EXPECT_EQ(p.islands, 2);
  EXPECT_LE(p.price(), 4.5);
  bool c_rejected = false;
  for (const auto& r : p.rejected)
    if (r.shape == "1xC") c_rejected = r.reason == "one island costs $5.00/h, over the budget of $4.50/h";
  EXPECT_TRUE(c_rejected);
  // Neither: the cheapest single island; spot prices where the table has them.
  o.budget = 0;
  auto spot = gpus;
  spot[2].spot_price = 0.5;
  p = plan_fleet(inv, shape(), spot, o);
  ASSERT_TRUE(p.chosen);
  EXPECT_EQ(p.chosen->gpu.name, "C");
  EXPECT_EQ(p.islands, 1);
  o.spot = false;
  EXPECT_EQ(plan_fleet(inv, shape(), spot, o).chosen->gpu.name, "B");
}

TEST(Planner, MultiGpuIslandsShardWhenOneGpuCannotHoldTheBase) {
  const auto inv = model(40, 500000000);
  PlanOptions o;
  o.cost_swap = 10;  // swapping costed far above sharding: 8 GPUs shard the base instead
  const auto p = plan_fleet(inv, shape(), {gpu("V100", 16, 1.0, 125, 8)}, o);
  bool fsdp = false;
  for (const auto& s : p.fitting)
    if (s.per_node == 8) fsdp = s.chosen->run.fsdp_ranks == 8 && s.chosen->run.block_swap == 0;
  EXPECT_TRUE(fsdp) << describe_plan(p, o);
  const auto line = launch_line(p, "run.toml", "skypilot");
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line[2], "up");
  EXPECT_NE(std::find(line.begin(), line.end(), "--gpu"), line.end());
  EXPECT_NE(std::find(line.begin(), line.end(), "model.storage=" + std::string(p.chosen->chosen->run.storage == "fp8" ? "fp8" : "auto")),
            line.end());
}

}  // namespace
}  // namespace yeto::fleet
