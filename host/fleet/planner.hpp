// `yeto-host launch plan --gpus TABLE`: island shapes sized by the memory model
// (memory/memory_model.hpp) from a GPU table the user provides, before anything is rented.
// Torch-free: the model's inventory is an input (the app builds it without reading a weight).
//
// The GPU table (TOML, docs/FLEET.md):
//
//   [[gpu]]
//   name = "H100"            # the accelerator as the engine spells it (--gpu cloud:8xH100)
//   memory_gb = 80           # per GPU
//   price = 2.49             # $/h per GPU on demand
//   spot_price = 1.25        # $/h per GPU on spot capacity (optional)
//   tflops = 989             # dense bf16 TFLOPs per GPU
//   regions = ["aws:us-east-1", "gcp:us-central1"]   # cloud[:region] where it is offered (optional)
//   max_per_node = 8         # GPUs per node (default 8)
//   host_memory_gb = 1800    # the node's memory (optional): block swap's host side must fit it
//
// For every GPU type and GPUs per node (1, 2, 4, 8, ... up to max_per_node) the planner finds
// the fastest memory configuration that fits (storage bf16 or fp8, activation checkpointing,
// fsdp over the node's GPUs, block swap of the fewest blocks that fits), in the order of their
// relative step cost (PlanOptions' cost model), or rejects the shape with the leanest
// configuration's need. Then the fleet: k islands of one fitting shape, the cheapest that
// reaches --flops, or with --budget the most TFLOPs within it (ties: the cheapest), or without
// either the cheapest single island.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "memory/memory_model.hpp"

namespace yeto::fleet {

struct GpuType {
  std::string name;
  double memory_gb = 0;
  double price = 0;        // $/h per GPU, on demand
  double spot_price = 0;   // 0: not offered on spot
  double tflops = 0;
  std::vector<std::string> regions;  // "cloud[:region]"
  int max_per_node = 8;
  double host_memory_gb = 0;  // per node; 0: not checked
};

// Reads the table; throws yeto::UsageError naming the file, the entry and the key.
std::vector<GpuType> read_gpu_table(const std::filesystem::path& file);
std::vector<GpuType> parse_gpu_table(const std::string& toml_text, const std::string& where);

struct PlanOptions {
  double budget = 0;        // $/h for the whole fleet; 0: none
  double flops = 0;         // TFLOPs the fleet should reach; 0: none
  bool spot = true;         // price islands at spot_price where the table has one
  double headroom = 0.9;    // a configuration fits when its device peak <= headroom x memory
  int max_islands = 64;
  // Relative step cost of each measure (1 = plain bf16): multiplied together.
  double cost_fp8 = 1.05;            // dequantising weights per layer
  double cost_checkpointing = 1.33;  // one more forward per checkpointed block
  double cost_fsdp = 1.10;           // gathers per block (implies checkpointing)
  double cost_swap = 0.5;            // x (swapped bytes / the blocks' bf16 bytes), per step
};

// One memory configuration of one shape, tried or chosen.
struct Config {
  memory::RunShape run;
  memory::Breakdown estimate;
  double cost = 1;   // relative step cost
  std::string label() const;  // "fp8, checkpointing, block swap 22"
};

struct Shape {
  GpuType gpu;
  int per_node = 1;
  std::optional<Config> chosen;
  std::vector<std::string> rejected;  // faster configurations that did not fit, with their need
  double price() const;               // $/h of one island (set by plan_fleet: spot or on demand)
  double price_per_gpu = 0;
  double tflops() const;              // effective: per_node x tflops / cost
  std::string island_spec() const;    // "aws:4xH100@us-east-1"
  std::string name() const;           // "4xH100"
};

struct Rejection {
  std::string shape;
  std::string reason;
};

struct FleetPlan {
  std::optional<Shape> chosen;
  int islands = 0;
  std::vector<Shape> fitting;          // every shape that fits, cheapest first
  std::vector<Rejection> rejected;     // shapes that do not fit or were ruled out, with why
  double price() const;                // $/h of the chosen fleet
  double tflops() const;
};

// `base` is the run as configured (media size, micro batch, ...; its storage, checkpointing,
// block swap and fsdp are what the planner chooses). Throws UsageError for an empty table.
FleetPlan plan_fleet(const memory::Inventory& inv, const memory::RunShape& base, const std::vector<GpuType>& gpus,
                     const PlanOptions& options);

// The plan as `launch plan` prints it: the chosen fleet with its memory breakdown, the other
// shapes that fit, the rejected shapes with their reasons.
std::string describe_plan(const FleetPlan& plan, const PlanOptions& options);

// The plan as JSON: {"chosen": {"shape", "island", "islands", "config", "storage", "checkpointing",
// "block_swap", "fsdp_ranks", "device_bytes", "host_bytes", "price_per_h", "tflops", "rejected"} or
// null, "fitting": [...], "rejected": [{"shape", "reason"}]}.
nlohmann::json plan_json(const FleetPlan& plan);

// The `yeto-host launch up` line of the chosen fleet: its --gpu entries and the --set overrides
// of its configuration (model.storage, train.activation_checkpointing, train.shard,
// train.island_ranks, model.block_swap).
std::vector<std::string> launch_line(const FleetPlan& plan, const std::string& config_file,
                                     const std::string& engine);

}  // namespace yeto::fleet
