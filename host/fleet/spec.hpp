// An island's shape as `yeto-host launch --gpu` takes it: `cloud:[nodes x]<count>x<gpu>[@region]`.
//
//   aws:8xH100                 one node with 8 H100s on AWS (any region)
//   gcp:2x8xA100-80GB@us-central1   two nodes with 8 A100-80GB each in us-central1
//   slurm:4xcpu                one node, 4 CPU ranks (no GPU), in the cluster's default partition
//
// `cloud` names where the island runs and means what the engine makes of it: SkyPilot's
// infra (aws, gcp, azure, lambda, runpod, kubernetes, ...), a Slurm partition (`slurm` or
// `default`: the cluster's default partition), a Kubernetes node pool (`k8s` or `default`:
// any). `gpu` is an accelerator name as the engine spells it (H100, A100-80GB, L4, ...) or
// `cpu` for ranks without a GPU; `count` is GPUs per node (ranks per node either way).
// Torch-free.
#pragma once

#include <string>
#include <string_view>

namespace yeto::fleet {

struct IslandSpec {
  std::string cloud;
  int nodes = 1;
  int per_node = 1;   // GPUs per node (CPU ranks per node for gpu == "cpu")
  std::string gpu;    // accelerator name as given; "cpu" for no GPU
  std::string region; // empty: any

  bool cpu_only() const { return gpu == "cpu"; }
  int ranks() const { return nodes * per_node; }
  // True for the cloud names that mean "wherever the engine puts it" (default, slurm, k8s).
  bool default_cloud() const;
  std::string to_string() const;  // the canonical spelling, parsed back to the same spec
};

// Parses one `--gpu` entry. Throws yeto::UsageError naming the bad part and the grammar.
IslandSpec parse_island_spec(std::string_view text);

}  // namespace yeto::fleet
