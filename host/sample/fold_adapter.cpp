#include "sample/fold_adapter.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <vector>

#include "artifacts/adapter.hpp"
#include "artifacts/merge.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/hub.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"

namespace fs = std::filesystem;

namespace yeto::sample {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

nlohmann::json check_adapter_plugin(const fs::path& adapter_dir, const config::Config& cfg) {
  const fs::path record_file = fs::is_directory(adapter_dir) ? adapter_dir / artifacts::kRecordFile : fs::path();
  if (record_file.empty() || !fs::exists(record_file)) return nullptr;
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(read_file(record_file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(record_file.string() + ": not valid JSON (" + e.what() + ")", ExitCode::bad_input);
  }
  std::string recorded;
  if (record.contains("plugin") && record["plugin"].is_object() && record["plugin"].contains("name") &&
      record["plugin"]["name"].is_string())
    recorded = record["plugin"]["name"].get<std::string>();
  if (!recorded.empty() && cfg.get_string("model.adapter").empty())
    throw UsageError("--adapter-dir " + adapter_dir.string() + ": the adapter was trained with plugin '" + recorded +
                     "' (" + record_file.filename().string() + " plugin.name); a plugin is never loaded because an "
                     "artifact names it: pass --diffusion-adapter " + recorded + " (or set model.adapter) to load it");
  return record;
}

FoldReport fold_adapter(pipeline::Pipeline& pipe, const config::Config& cfg, const fs::path& adapter_dir,
                        const std::string& into) {
  const auto denoisers = pipe.denoisers();
  if (denoisers.empty())
    throw Error("--adapter-dir: the model " + pipe.model_dir().string() + " has no denoiser component to adapt",
                ExitCode::bad_input);
  if (!into.empty() && std::find(denoisers.begin(), denoisers.end(), into) == denoisers.end())
    throw UsageError("--adapter-dir " + adapter_dir.string() + ":" + into + ": the model's denoisers are " +
                     join(denoisers, ", ") + "; name one of them after ':'");

  // Every weight of every denoiser, by "<component>.<Diffusers name>", sharing storage.
  std::map<std::string, at::Tensor> weights;
  std::vector<std::string> known;
  for (const auto& d : denoisers) {
    const auto* c = pipe.component(d);
    if (!c) continue;
    for (const auto& [name, t] : plugin::component_parameters(*c)) {
      weights.emplace(d + "." + name, t);
      if (ends_with(name, ".weight")) known.push_back(d + "." + name.substr(0, name.size() - 7));
    }
  }
  artifacts::ReadOptions ro;
  ro.component = denoisers.front();
  ro.known_modules = known;
  ro.into = into;
  ro.denoisers = denoisers;
  const artifacts::Adapter adapter = artifacts::read_adapter(adapter_dir, ro);

  const io::ResolvedModel resolved = io::resolve_model(cfg.get_string("model.id"), cfg.get_string("model.revision"),
                                                       io::hub_cache(cfg.get_path("model.hub_cache")));
  const auto mismatches = artifacts::base_mismatches(adapter.record, resolved.repo, pipe.repo());
  if (!mismatches.empty())
    throw Error("--adapter-dir " + adapter_dir.string() + " was trained on another base than --model " +
                    cfg.get_string("model.id") + ":\n  " + join(mismatches, "\n  ") +
                    "\nsample it with the model it was trained on (" + artifacts::kRecordFile + " base_model)",
                ExitCode::bad_input);

  FoldReport report;
  report.components = join(adapter.components(), ", ");
  std::vector<std::string> weight_names;
  for (const auto& [n, t] : weights) weight_names.push_back(n);
  // Check every module before touching a weight: a refused adapter leaves the model as it was.
  std::vector<std::pair<at::Tensor, const artifacts::LoraModule*>> work;
  for (const auto& [module, m] : adapter.modules) {
    const std::string wname = module + ".weight";
    const auto it = weights.find(wname);
    if (it == weights.end())
      throw Error(adapter.file.string() + ": LoRA module '" + module + "' has no weight '" + wname + "' in the model " +
                      pipe.model_dir().string() + did_you_mean(wname, weight_names) +
                      "; the adapter belongs to another model",
                  ExitCode::bad_input);
    const at::Tensor& w = it->second;
    if (w.dim() != 2 || w.size(0) != m.B.size(0) || w.size(1) != m.A.size(1))
      throw Error(adapter.file.string() + ": LoRA module '" + module + "' maps " + std::to_string(m.A.size(1)) + " -> " +
                      std::to_string(m.B.size(0)) + " but the model's '" + wname + "' is " + shape_text(w.sizes()),
                  ExitCode::bad_input);
    if (!w.is_floating_point() || w.element_size() < 2)
      throw Error("the model's '" + wname + "' is " + std::string(c10::toString(w.scalar_type())) +
                      "; adapters fold only into float32/bf16/fp16 weights",
                  ExitCode::bad_input);
    work.emplace_back(w, &m);
  }
  const c10::NoGradGuard no_grad;
  for (auto& [w, m] : work) {
    // The same arithmetic as `merge`: float32 fold, cast back to the weight's dtype.
    const at::Tensor delta = at::mm(m->B.to(w.device()), m->A.to(w.device())).mul_(m->scale);
    w.copy_((w.to(at::kFloat) + delta).to(w.scalar_type()));
  }
  report.modules = work.size();
  return report;
}

}  // namespace yeto::sample
