// The syncer's durable state and its checkpoint file. The checkpoint is the source of
// truth of a run: exact float32 parameters (the master θ), the public state P every learner
// holds (the sum of the broadcast updates) and the outer momentum of every fragment, their
// versions, the learner registry, the budget counters and, per fragment, the tape record of
// its last merge (so a restart can re-append a merge record a crash cut off). It is written
// with yeto::AtomicFile and ends with a CRC-32C of everything before it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sync/layout.hpp"

namespace yeto::sync {

struct LearnerRecord {
  std::string id;
  bool live = false;            // counted in the quorum
  std::uint64_t pushes = 0;     // accepted pushes
  std::uint64_t merged = 0;     // pushes that went into a merge
  std::uint64_t samples = 0;    // samples of merged pushes
  std::uint64_t joins = 0;
  double last_seen = 0;         // steady-clock seconds; not persisted (a restart restarts the clock)
};

struct FragmentState {
  std::uint64_t version = 0;
  std::vector<float> params;    // the exact master θ (the final cut, the export)
  // The public state P of this version: what every learner holds (the initial state plus every
  // decoded update, see UpdateMsg). Equal to params with the f32 downlink. Empty in memory
  // means "equal to params" (a checkpoint always stores it).
  std::vector<float> pub;
  std::vector<float> momentum;
  double spread_ema = -1;        // recent spread of push arrivals (s); < 0: none yet
  std::string last_merge_event;  // JSON line of the last merge of this fragment
};

struct SyncerState {
  bool initialised = false;
  Layout layout;
  std::vector<FragmentState> fragments;
  std::uint64_t outer_steps = 0;     // merges, all fragments together
  std::uint64_t samples_merged = 0;
  double wall_seconds = 0;           // run time consumed before the current process
  bool finished = false;             // the final cut was taken
  std::map<std::string, LearnerRecord> registry;
};

// Exact bytes of the checkpoint (magic "YCKP", format 1, ..., CRC-32C).
std::string encode_checkpoint(const SyncerState& s);
// Throws yeto::Error naming the file when the magic, format or checksum is wrong.
SyncerState decode_checkpoint(std::string_view bytes, const std::string& where);

void save_checkpoint(const std::filesystem::path& path, const SyncerState& s);
SyncerState load_checkpoint(const std::filesystem::path& path);

}  // namespace yeto::sync
