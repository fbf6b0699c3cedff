// RUN_DIR/launch/fleet.json: what `yeto-host launch up` submitted, read back by `status`,
// `logs` and `down`. Written atomically after every submission, so a failure half-way leaves
// the jobs already submitted on record. Torch-free.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fleet/fleet.hpp"

namespace yeto::fleet {

struct JobRecord {
  std::string role;        // "syncer" or "island-<i>"
  std::string spec;        // the island's shape ("" for the syncer)
  std::string manifest;    // the file submitted
  std::string job;         // the engine's handle: Slurm job id, SkyPilot cluster/job name, Kubernetes Job name
  std::string submitted;   // UTC time, ISO 8601
  // SkyPilot: "managed-job" (`sky jobs launch`, spot islands) or "cluster" (`sky launch`); what
  // `logs` and `down` address, whatever launch.spot says later. Empty for Slurm and Kubernetes.
  std::string kind;
};

struct FleetRecord {
  std::string engine;
  std::string name;
  std::string k8s_namespace;
  std::vector<JobRecord> jobs;  // the syncer first
};

std::filesystem::path record_path(const std::filesystem::path& run_dir);
void write_record(const std::filesystem::path& run_dir, const FleetRecord& r);
// Throws yeto::Error naming the file when it is missing (nothing launched) or malformed.
FleetRecord read_record(const std::filesystem::path& run_dir);

}  // namespace yeto::fleet
