#include "artifacts/export.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>

#include <ATen/ATen.h>

#include "artifacts/adapter.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "core/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "io/tensors.hpp"
#include "sync/layout.hpp"
#include "sync/state.hpp"

namespace yeto::artifacts {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::uint64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::string component_of(const std::string& name) { return name.substr(0, name.find('.')); }

std::string some(const std::vector<std::string>& v, std::size_t n = 3) {
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size())));
  std::string s = join(head, ", ");
  if (v.size() > n) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

Error mismatch(const fs::path& file, const std::string& setting, const std::string& what) {
  return Error(file.string() + ": the checkpoint does not match the settings: " + setting + ": " + what,
               ExitCode::bad_input);
}

}  // namespace

namespace {

// Names (in canonical order) and sizes of a checkpoint against the rebuilt layout; throws
// naming the setting that differs. `numels` are the checkpoint's sizes per tensor.
void check_names_and_sizes(const fs::path& file, const std::vector<std::string>& have,
                           const std::vector<std::uint64_t>& numels, const std::vector<TrainableTensor>& expected,
                           const ExportSettings& settings) {
  std::vector<std::string> want;
  for (const auto& t : expected) want.push_back(t.name);
  if (have != want) {
    const std::set<std::string> hs(have.begin(), have.end()), ws(want.begin(), want.end());
    std::vector<std::string> only_ckpt, only_settings;
    std::set_difference(hs.begin(), hs.end(), ws.begin(), ws.end(), std::back_inserter(only_ckpt));
    std::set_difference(ws.begin(), ws.end(), hs.begin(), hs.end(), std::back_inserter(only_settings));
    std::set<std::string> hc, wc;
    for (const auto& n : have) hc.insert(component_of(n));
    for (const auto& n : want) wc.insert(component_of(n));
    if (hc != wc) {
      throw mismatch(file, "model.id (--model)",
                     "the checkpoint trains component(s) " + join({hc.begin(), hc.end()}, ", ") + ", the model " +
                         settings.model + " gives " + join({wc.begin(), wc.end()}, ", ") +
                         "; export with the model the run trained");
    }
    if (only_ckpt.empty() && only_settings.empty()) {
      throw mismatch(file, "model.id (--model)",
                     "the same tensors in another order; the checkpoint was written for another plugin version or model");
    }
    std::string what;
    if (!only_ckpt.empty()) what += "the checkpoint trains " + some(only_ckpt) + " which the settings do not";
    if (!only_settings.empty())
      what += std::string(what.empty() ? "" : "; ") + "the settings train " + some(only_settings) +
              " which the checkpoint lacks";
    throw mismatch(file, "lora.targets (--lora-targets)",
                   what + " (targets " + join(settings.targets, ",") + "); pass the --lora-targets the run trained with");
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& e = expected[i];
    if (numels[i] == numel_of(e.shape)) continue;
    const bool is_a = e.name.find(".lora_A.") != std::string::npos;
    const bool is_b = e.name.find(".lora_B.") != std::string::npos;
    if ((is_a || is_b) && e.shape.size() == 2) {
      const std::uint64_t other = static_cast<std::uint64_t>(is_a ? e.shape[1] : e.shape[0]);
      if (other > 0 && numels[i] % other == 0) {
        throw mismatch(file, "lora.r (--lora-r)",
                       "tensor " + e.name + " holds " + std::to_string(numels[i]) + " values, rank " +
                           std::to_string(numels[i] / other) + ", the settings give r = " + std::to_string(settings.r) +
                           "; pass --lora-r " + std::to_string(numels[i] / other));
      }
    }
    throw mismatch(file, "model.id (--model)",
                   "tensor " + e.name + " holds " + std::to_string(numels[i]) + " values, the model " + settings.model +
                       " gives it shape " + io::shape_str(e.shape));
  }
}

void check_finite(const fs::path& file, const std::vector<CheckpointTensor>& out) {
  for (const auto& t : out)
    for (float v : t.values)
      if (!std::isfinite(v))
        throw Error(file.string() + ": tensor " + t.name + " holds a non-finite value; the run diverged", ExitCode::bad_input);
}

// A learner's local checkpoint: trainable.safetensors with the float32 master tensors.
std::vector<CheckpointTensor> read_learner_checkpoint(const fs::path& file, const std::vector<TrainableTensor>& expected,
                                                      const ExportSettings& settings) {
  const auto st = io::SafetensorsFile::open(file);
  std::map<std::string, const io::TensorInfo*> by_name;
  for (const auto& t : st.tensors()) by_name.emplace(t.name, &t);
  std::vector<std::string> have;
  std::vector<std::uint64_t> numels;
  for (const auto& [n, t] : by_name) {
    have.push_back(n);
    numels.push_back(t->numel());
  }
  // Canonical order is sorted order; compare in the expected order where the sets agree.
  std::vector<std::string> want;
  for (const auto& t : expected) want.push_back(t.name);
  if (std::set<std::string>(want.begin(), want.end()) == std::set<std::string>(have.begin(), have.end())) {
    have = want;
    numels.clear();
    for (const auto& n : want) numels.push_back(by_name.at(n)->numel());
  }
  check_names_and_sizes(file, have, numels, expected, settings);
  std::vector<CheckpointTensor> out;
  for (const auto& e : expected) {
    const auto* info = by_name.at(e.name);
    if (info->shape != e.shape) {
      throw mismatch(file, "model.id (--model)",
                     "tensor " + e.name + " has shape " + io::shape_str(info->shape) + ", the model gives " +
                         io::shape_str(e.shape));
    }
    const at::Tensor t = io::to_tensor(st, *info).to(at::kFloat).contiguous();
    out.push_back({e.name, e.shape, std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())});
  }
  check_finite(file, out);
  return out;
}

}  // namespace

fs::path resolve_checkpoint(const fs::path& where) {
  if (!fs::exists(where)) {
    throw Error(where.string() + ": no such checkpoint (give --checkpoint the syncer's checkpoint.bin or state "
                                 "directory, a learner checkpoint directory or the run directory)",
                ExitCode::not_found);
  }
  if (!fs::is_directory(where)) return where;
  // A syncer state dir, a learner step dir, a run dir's final adapter (RUN_DIR/lora.safetensors).
  for (const char* f : {"checkpoint.bin", "trainable.safetensors", "lora.safetensors"})
    if (fs::exists(where / f)) return where / f;
  const fs::path pointer = where / "checkpoints" / "latest";
  if (fs::exists(pointer)) {
    const std::string name = trim(read_file(pointer));
    const fs::path dir = where / "checkpoints" / name;
    if (!name.empty() && name.find('/') == std::string::npos && fs::exists(dir / "trainable.safetensors"))
      return dir / "trainable.safetensors";
    throw Error(pointer.string() + ": points at '" + name + "', which holds no trainable.safetensors", ExitCode::bad_input);
  }
  throw Error(where.string() + ": holds no checkpoint (looked for checkpoint.bin, trainable.safetensors, "
                               "lora.safetensors and checkpoints/latest)",
              ExitCode::not_found);
}

std::vector<CheckpointTensor> read_trainable_checkpoint(const fs::path& checkpoint,
                                                        const std::vector<TrainableTensor>& expected,
                                                        const ExportSettings& settings) {
  const fs::path file = resolve_checkpoint(checkpoint);
  if (file.extension() == ".safetensors") return read_learner_checkpoint(file, expected, settings);
  const sync::SyncerState state = sync::load_checkpoint(file);
  if (!state.initialised) throw Error(file.string() + ": the checkpoint holds no parameters yet", ExitCode::bad_input);
  const sync::Layout& layout = state.layout;

  if (layout.fragments.size() != settings.fragments) {
    throw mismatch(file, "sync.fragments (--fragments)",
                   "the run was trained with " + std::to_string(layout.fragments.size()) + " fragment(s), the settings give " +
                       std::to_string(settings.fragments) + "; pass --fragments " +
                       std::to_string(layout.fragments.size()));
  }
  if (layout.pattern != sync::parse_pattern(settings.fragment_pattern)) {
    throw mismatch(file, "sync.fragment_pattern (--fragment-pattern)",
                   std::string("the run used ") + sync::pattern_name(layout.pattern) + ", the settings give " +
                       settings.fragment_pattern + "; pass --fragment-pattern " + sync::pattern_name(layout.pattern));
  }
  std::vector<std::string> have;
  std::vector<std::uint64_t> numels;
  for (const auto& t : layout.tensors) {
    have.push_back(t.name);
    numels.push_back(t.numel);
  }
  check_names_and_sizes(file, have, numels, expected, settings);
  std::vector<sync::TensorSpec> specs;
  for (const auto& e : expected) specs.push_back({e.name, numel_of(e.shape)});
  const sync::Layout rebuilt = sync::build_layout(specs, settings.fragments, sync::parse_pattern(settings.fragment_pattern));
  if (rebuilt.fingerprint() != layout.fingerprint()) {
    throw mismatch(file, "sync.fragments / sync.fragment_pattern", "the fragment assignment differs from the run's");
  }

  std::vector<CheckpointTensor> out(expected.size());
  std::vector<std::span<float>> spans;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    out[i].name = expected[i].name;
    out[i].shape = expected[i].shape;
    out[i].values.assign(numel_of(expected[i].shape), 0.0f);
    spans.emplace_back(out[i].values);
  }
  for (std::uint32_t p = 0; p < layout.fragments.size(); ++p) {
    const auto& params = state.fragments.at(p).theta();
    if (params.size() != layout.fragments[p].numel) {
      throw Error(file.string() + ": fragment " + std::to_string(p) + " holds " + std::to_string(params.size()) +
                      " values, its layout " + std::to_string(layout.fragments[p].numel),
                  ExitCode::bad_input);
    }
    sync::apply_fragment(layout, p, params, spans, 1.0f);
  }
  check_finite(file, out);
  return out;
}

bool is_lora_weight(std::string_view name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

ExportReport export_adapter(const ExportRequest& rq) {
  return export_adapter(rq, read_trainable_checkpoint(rq.checkpoint, rq.expected, rq.settings));
}

ExportReport export_adapter(const ExportRequest& rq, std::vector<CheckpointTensor> tensors) {
  AdapterExport e;
  std::set<std::string> comps;
  for (const auto& t : tensors) comps.insert(component_of(t.name));
  if (!rq.component.empty()) {
    if (!comps.count(rq.component))
      throw Error("export: --component " + rq.component + ": the trainable tensors belong to " +
                      join({comps.begin(), comps.end()}, ", "),
                  ExitCode::usage);
    std::erase_if(tensors, [&](const auto& t) { return component_of(t.name) != rq.component; });
    comps = {rq.component};
  }
  if (comps.size() != 1) {
    throw Error("export: the trainable tensors span components " + join({comps.begin(), comps.end()}, ", ") +
                    "; an adapter directory holds one denoiser: export each with --component NAME",
                ExitCode::usage);
  }
  e.component = *comps.begin();
  const std::string prefix = e.component + ".";
  for (const auto& t : tensors) {
    const std::string rest = t.name.substr(prefix.size());
    if (rest.size() <= 14 || !is_lora_weight(rest)) {
      throw Error("export: trainable tensor " + t.name + " is not a LoRA lora_A/lora_B weight (full fine-tuning "
                                                         "exports are not adapters)",
                  ExitCode::bad_input);
    }
    const bool is_a = rest.ends_with(".lora_A.weight");
    const std::string module = rest.substr(0, rest.size() - 14);
    at::Tensor v = at::from_blob(const_cast<float*>(t.values.data()), t.shape, at::kFloat).clone();
    (is_a ? e.modules[module].A : e.modules[module].B) = v;
  }
  for (auto& [module, m] : e.modules) {
    if (!m.A.defined() || !m.B.defined())
      throw Error("export: module " + prefix + module + " lacks lora_A or lora_B", ExitCode::bad_input);
    m.scale = rq.settings.alpha / static_cast<double>(rq.settings.r);
  }
  e.r = rq.settings.r;
  e.alpha = rq.settings.alpha;
  for (const auto& c : rq.candidate_modules)
    if (c.rfind(prefix, 0) == 0) e.candidate_modules.push_back(c.substr(prefix.size()));
  e.base_model_class = rq.base_model_class;
  e.base_model_name_or_path = rq.settings.model;
  e.record = rq.record;
  e.record["checkpoint"] = rq.checkpoint.string();
  e.comfyui = rq.comfyui;
  write_adapter_dir(rq.output_dir, e);

  ExportReport r;
  r.component = e.component;
  r.modules = e.modules.size();
  r.files = {kDiffusersFile, kPeftConfigFile, kPeftWeightsFile, kRecordFile};
  if (rq.comfyui) r.files.push_back(kComfyFile);
  return r;
}

}  // namespace yeto::artifacts
