// The syncer's durable state and its checkpoint file. The checkpoint is the source of
// truth of a run: exact float32 parameters (the master θ), the public state P every learner
// holds (the sum of the broadcast updates) and the outer momentum of every fragment, their
// versions, the learner registry, the budget counters and, per fragment, the tape record of
// its last merge (so a restart can re-append a merge record a crash cut off). It is written
// with yeto::AtomicFile and ends with a CRC-32C of everything before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
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

// A fragment's values, never changed once made: a merge makes new buffers and swaps them in, so
// a copy of the state (a checkpoint written off the syncer's I/O thread, a catch-up encoded on
// another thread) shares the buffers instead of copying them.
using Floats = std::shared_ptr<const std::vector<float>>;
inline Floats make_floats(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

struct FragmentState {
  std::uint64_t version = 0;
  Floats params;    // the exact master θ (the final cut, the export)
  // The public state P of this version: what every learner holds (the initial state plus every
  // decoded update, see UpdateMsg). The same buffer as params with the f32 downlink. Null in
  // memory means "equal to params" (a checkpoint always stores it).
  Floats pub;
  Floats momentum;
  double spread_ema = -1;        // unused: a slot of checkpoint format 3 (the round policy keeps no state)
  std::string last_merge_event;  // JSON line of the last merge of this fragment

  const std::vector<float>& theta() const { return *params; }
  const std::vector<float>& public_values() const { return pub ? *pub : *params; }
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

// Copies of a SyncerState share the fragments' buffers (Floats): copying one is cheap.
//
// On disk (format 3) the checkpoint is a manifest, `checkpoint.bin`, and one data file per
// fragment version beside it, `fragments/f<P>-v<VERSION>.bin` (θ, momentum and P of that
// version). The manifest names each fragment's version and the CRC-32C of its data file, so a
// merge of one fragment writes that fragment's data and a small manifest, never the other
// fragments' values: a small fragment's checkpoint does not wait for a large one's. A data file
// is written (atomically) before any manifest names it; one that no manifest names is left by
// an interrupted checkpoint and removed at start (remove_unreferenced_fragment_data).

// "fragments/f<P>-v<VERSION>.bin", relative to the checkpoint's directory.
std::filesystem::path fragment_data_name(std::uint32_t p, std::uint64_t version);
// A fragment's data file is written back to disk every this many bytes as it is written: a
// 50 M-value fragment's file is 600 MB, and the other fragments' checkpoints, whose fsyncs commit
// the filesystem's journal, should not wait behind hundreds of MB of it left to its fsync.
inline constexpr std::size_t kFragmentWriteBack = 8u << 20;
// Writes fragment p's values at f.version to dir/fragment_data_name(p, f.version) atomically
// (temporary, fsync, rename, fsync directory), written back every `write_back` bytes (0: only at
// the fsync; sync_loopback_bench's baseline); returns the file's CRC-32C. Any thread.
std::uint32_t save_fragment_data(const std::filesystem::path& dir, std::uint32_t p, const FragmentState& f,
                                 std::size_t write_back = kFragmentWriteBack);

// The manifest's exact bytes (magic "YCKP", format 3, ..., CRC-32C); data_crc[p]: the CRC of
// fragment p's data file at its version.
std::string encode_manifest(const SyncerState& s, const std::vector<std::uint32_t>& data_crc);
// Format 1 and 2 checkpoints (every fragment's values inline) are read as they are; a format 3
// manifest reads each fragment's data file from `dir`. Throws yeto::Error naming the file when
// the magic, format or a checksum is wrong or a data file is missing.
SyncerState decode_checkpoint(std::string_view bytes, const std::string& where, const std::filesystem::path& dir = {});

// Every fragment's data file, then the manifest (initial state, tools, tests).
void save_checkpoint(const std::filesystem::path& path, const SyncerState& s);
SyncerState load_checkpoint(const std::filesystem::path& path);
// The CRC-32C of each fragment's data file named by the manifest at `path` (format 3), empty
// for an older format.
std::vector<std::uint32_t> checkpoint_data_crcs(const std::filesystem::path& path);

// Removes the data files in dir/fragments that the manifest does not name (versions of s);
// returns how many. Best effort.
std::size_t remove_unreferenced_fragment_data(const std::filesystem::path& dir, const SyncerState& s);

}  // namespace yeto::sync
