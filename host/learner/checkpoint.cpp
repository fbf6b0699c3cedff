#include "learner/checkpoint.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "io/tensors.hpp"

namespace yeto::learner {
namespace fs = std::filesystem;

nlohmann::json to_json(const TrainState& s) {
  nlohmann::json j = {{"step", s.step},          {"samples", s.samples},           {"epoch", s.epoch},
          {"batch_in_epoch", s.batch_in_epoch}, {"skipped_rows", s.skipped_rows}, {"skipped", s.skipped},
          {"config_hash", s.config_hash}};
  if (!s.rank_positions.empty()) j["rank_positions"] = s.rank_positions;
  return j;
}

TrainState train_state_from_json(const nlohmann::json& j, const std::string& label) {
  try {
    TrainState s;
    s.step = j.at("step").get<std::int64_t>();
    s.samples = j.at("samples").get<std::int64_t>();
    s.epoch = j.at("epoch").get<std::int64_t>();
    s.batch_in_epoch = j.at("batch_in_epoch").get<std::int64_t>();
    s.skipped_rows = j.value("skipped_rows", std::int64_t{0});
    s.config_hash = j.value("config_hash", std::string());
    if (j.contains("skipped")) s.skipped = j.at("skipped").get<std::map<std::string, std::string>>();
    if (j.contains("rank_positions"))
      s.rank_positions = j.at("rank_positions").get<std::vector<std::array<std::int64_t, 2>>>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(label + ": not a learner checkpoint state (" + e.what() + ")", ExitCode::bad_input);
  }
}

namespace {

std::string step_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, const TrainState& state, const NamedParams& trainable,
                         const AdamW& optimizer, int keep) {
  const fs::path root = run_dir / "checkpoints";
  const fs::path dir = root / step_dir_name(state.step);
  fs::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& [name, t] : trainable) weights.emplace_back(name, t.detach());
  io::save_safetensors(dir / "trainable.safetensors", weights);
  io::save_safetensors(dir / "optimizer.safetensors", optimizer.state());
  auto j = to_json(state);
  j["optimizer_steps"] = optimizer.steps();
  j["trainable_sha256"] = sha256_file(dir / "trainable.safetensors");
  j["optimizer_sha256"] = sha256_file(dir / "optimizer.safetensors");
  atomic_write(dir / "state.json", j.dump(2) + "\n");
  fsync_directory(root);
  atomic_write(root / "latest", dir.filename().string() + "\n");

  // Prune older checkpoints, newest `keep` stay.
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 1)) < dirs.size(); ++i) {
    std::error_code ec;
    fs::remove_all(dirs[i], ec);
  }
  return dir;
}

namespace {
// What checkpoints/latest names (trimmed), nullopt without the pointer.
std::optional<std::string> latest_name(const fs::path& run_dir) {
  const fs::path pointer = run_dir / "checkpoints" / "latest";
  std::error_code ec;
  if (!fs::exists(pointer, ec)) return std::nullopt;
  std::string name = read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}
}  // namespace

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const fs::path pointer = run_dir / "checkpoints" / "latest";
  const auto named = latest_name(run_dir);
  if (!named) return std::nullopt;
  const std::string& name = *named;
  const fs::path dir = run_dir / "checkpoints" / name;
  std::error_code ec;
  if (name.empty() || name.find('/') != std::string::npos || !fs::exists(dir / "state.json", ec))
    throw Error(pointer.string() + ": points at '" + name + "', which is not a complete checkpoint; remove " +
                    pointer.string() + " to start over",
                ExitCode::bad_input);
  return dir;
}

ResumeCandidates resume_candidates(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  const auto named = latest_name(run_dir);
  if (!named) return {};
  const std::string& name = *named;
  ResumeCandidates out;
  out.latest = root / name;
  std::error_code ec;
  if (!name.empty() && name.find('/') == std::string::npos && fs::is_directory(root / name, ec))
    out.dirs.push_back(root / name);
  // Older ones kept, newest first (step directory names sort by step).
  std::vector<fs::path> older;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && (name.empty() || n < name)) older.push_back(e.path());
  }
  std::sort(older.rbegin(), older.rend());
  out.dirs.insert(out.dirs.end(), older.begin(), older.end());
  return out;
}

TrainState load_checkpoint(const fs::path& dir, const NamedParams& trainable, AdamW& optimizer) {
  const fs::path state_path = dir / "state.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointDamaged(state_path.string() + ": unreadable checkpoint state (" + e.what() + ")");
  } catch (const Error& e) {
    throw CheckpointDamaged(state_path.string() + ": unreadable checkpoint state (" + e.what() + ")");
  }
  TrainState state;
  try {
    state = train_state_from_json(j, state_path.string());
  } catch (const Error& e) {
    throw CheckpointDamaged(e.what());
  }
  for (const char* file : {"trainable", "optimizer"}) {
    const fs::path p = dir / (std::string(file) + ".safetensors");
    const std::string want = j.value(std::string(file) + "_sha256", std::string());
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw CheckpointDamaged(p.string() + ": missing; the checkpoint is damaged");
    if (sha256_file(p) != want)
      throw CheckpointDamaged(p.string() + ": contents do not match the hash recorded in state.json; the checkpoint "
                              "is damaged");
  }
  const auto weights = io::load_safetensors(dir / "trainable.safetensors");
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, t] : trainable) {
      auto it = weights.find(name);
      if (it == weights.end())
        throw Error((dir / "trainable.safetensors").string() + ": no tensor '" + name +
                        "'; the checkpoint was written for other trainable tensors (different LoRA targets or rank?)",
                    ExitCode::bad_input);
      if (it->second.sizes() != t.sizes())
        throw Error((dir / "trainable.safetensors").string() + ": tensor '" + name + "' is " +
                        c10::str(it->second.sizes()) + ", the model has " + c10::str(t.sizes()),
                    ExitCode::bad_input);
      t.copy_(it->second);
    }
  }
  const auto opt = io::load_safetensors(dir / "optimizer.safetensors");
  optimizer.load_state({opt.begin(), opt.end()}, j.value("optimizer_steps", state.step),
                       (dir / "optimizer.safetensors").string());
  return state;
}

}  // namespace yeto::learner
