// `yeto-host export --checkpoint PATH [--model M --lora-r R --lora-alpha A --lora-targets T
// --fragments F --fragment-pattern P] --output-dir DIR [--format comfyui]`: rebuilds the run's
// exact trainable layout through its plugin and writes the checkpoint's adapter directory.
// The run's recorded configuration (RUN_DIR/config.toml) supplies every setting; a flag that
// contradicts it is refused.
#include <algorithm>
#include <ctime>
#include <iostream>
#include <map>
#include <unistd.h>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "artifacts/adapter.hpp"
#include "artifacts/export.hpp"
#include "artifacts/export_settings.hpp"
#include "artifacts/merge.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "data/cache_contract.hpp"
#include "io/aliases.hpp"
#include "io/repository.hpp"
#include "io/tensors.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"

namespace yeto::app {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json config_section(const json& all, const std::vector<std::string>& prefixes) {
  json out = json::object();
  for (const auto& [k, v] : all.items())
    for (const auto& p : prefixes)
      if (k.rfind(p, 0) == 0) out[k] = v.at("value");
  return out;
}

// Capability artifacts: the checkpoint's values go into the plugin's trainable tensors, then the
// plugin writes its own files into a fresh folder that becomes OUTPUT/plugin only when it
// succeeded (a failure leaves no partial folder and the files written before it untouched).
void save_plugin_artifact(pipeline::Pipeline& pipe, const artifacts::ExportRequest& rq,
                          const std::vector<artifacts::CheckpointTensor>& values) {
  std::map<std::string, const artifacts::CheckpointTensor*> by_name;
  for (const auto& v : values) by_name[v.name] = &v;
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : pipe.plugin().trainable_parameters()) {
      const auto it = by_name.find(name);
      if (it == by_name.end())
        throw Error("export: the checkpoint has no tensor '" + name + "' that the plugin trains", ExitCode::bad_input);
      const auto src = at::from_blob(const_cast<float*>(it->second->values.data()), it->second->shape, at::kFloat);
      if (src.sizes() != t.sizes())
        throw Error("export: checkpoint tensor '" + name + "' has shape " + c10::str(src.sizes()) +
                        ", the plugin's has " + c10::str(t.sizes()),
                    ExitCode::bad_input);
      t.copy_(src);
    }
  }
  const fs::path out = fs::path(rq.output_dir) / artifacts::kPluginArtifactDir;
  const fs::path tmp = fs::path(rq.output_dir) / ("." + std::string(artifacts::kPluginArtifactDir) + ".tmp-" +
                                                  std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    pipe.plugin().save_artifact(tmp.string(), rq.record.dump());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(out);
  fs::rename(tmp, out);
  fsync_directory(rq.output_dir);
}

// A full fine-tune of a denoiser (tuning.mode = full) in a plugin without its own files: every
// trainable tensor is one of the component's parameters, written under its own name to
// yeto_full_weights.safetensors next to the record; `merge` turns the directory into a model.
int export_full_weights(const pipeline::Pipeline& pipe, const std::string& component,
                        const std::vector<artifacts::CheckpointTensor>& values, json record, const std::string& output) {
  const std::string prefix = component + ".";
  std::map<std::string, std::vector<std::int64_t>> params;
  if (const auto* c = pipe.component(component))
    for (const auto& [name, t] : plugin::component_parameters(*c)) params.emplace(name, t.sizes().vec());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : values) {
    const std::string name = t.name.rfind(prefix, 0) == 0 ? t.name.substr(prefix.size()) : "";
    const auto it = params.find(name);
    if (name.empty() || it == params.end() || it->second != t.shape)
      throw Error("export: trainable tensor " + t.name + " is neither a LoRA weight nor a parameter of " + component +
                      " with its shape; plugin '" + pipe.loaded_plugin().manifest.name +
                      "' does not write its own files (capability artifacts), so this run cannot be exported",
                  ExitCode::bad_input);
    tensors.emplace_back(name, at::from_blob(const_cast<float*>(t.values.data()), t.shape, at::kFloat).clone());
  }
  if (fs::exists(output) && !fs::is_empty(output))
    throw UsageError("--output-dir " + output + " exists and is not empty; choose a new directory");
  fs::create_directories(output);
  io::save_safetensors(fs::path(output) / artifacts::kFullWeightsFile, tensors, {{"format", "pt"}});
  record.erase("lora");
  record["format"] = artifacts::kRecordFormat;
  record["version"] = artifacts::kRecordVersion;
  record["full"] = {{"component", component}, {"file", artifacts::kFullWeightsFile}, {"tensors", tensors.size()}};
  atomic_write(fs::path(output) / artifacts::kRecordFile, record.dump(2) + "\n");
  std::cout << "exported " << tensors.size() << " fully trained tensors of " << component << " to " << output << ": "
            << artifacts::kFullWeightsFile << ", " << artifacts::kRecordFile
            << " (`yeto-host merge --adapter-dir " << output << "` writes the model)\n";
  return 0;
}

int run_export(CommandContext& ctx) {
  const std::string checkpoint_arg = ctx.value("checkpoint");
  if (checkpoint_arg.empty()) throw UsageError("export needs --checkpoint PATH (syncer state, learner checkpoint or run directory)");
  const std::string output = ctx.value("output-dir");
  if (output.empty()) throw UsageError("export needs --output-dir DIR");
  const std::string format = ctx.value("format", "diffusers");
  if (format != "diffusers" && format != "comfyui")
    throw UsageError("--format '" + format + "': expected diffusers (the default: Diffusers + PEFT layouts) or comfyui "
                     "(also comfyui_lora.safetensors)");
  const fs::path checkpoint = artifacts::resolve_checkpoint(checkpoint_arg);

  const artifacts::ResolvedExportConfig rc =
      artifacts::resolve_export_config(checkpoint, ctx.args().config_file, ctx.args().overrides);
  const config::Config& cfg = rc.config;

  pipeline::OpenOptions open;
  open.load_weights = false;  // only the layout is needed: shapes, names, plugin
  const auto pipe = pipeline::Pipeline::open(cfg, open);
  std::vector<artifacts::TrainableTensor> expected;
  for (const auto& [name, t] : pipe->plugin().trainable_parameters()) expected.push_back({name, t.sizes().vec()});
  if (expected.empty()) throw Error("the plugin reports no trainable tensors for this configuration", ExitCode::failure);
  // The denoiser whose adapter this directory holds: --component, else the run's only one.
  std::string component = expected.front().name.substr(0, expected.front().name.find('.'));
  if (ctx.has("component")) component = ctx.value("component");

  artifacts::ExportRequest rq;
  rq.checkpoint = checkpoint;
  rq.expected = std::move(expected);
  rq.settings = artifacts::export_settings(cfg);
  rq.output_dir = output;
  rq.comfyui = format == "comfyui";
  rq.component = ctx.has("component") ? component : "";
  if (const auto* c = pipe->component(component)) {
    for (const auto& [name, t] : plugin::component_parameters(*c)) {
      if (t.dim() != 2 || name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) continue;
      if (name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos) continue;
      rq.candidate_modules.push_back(component + "." + name.substr(0, name.size() - 7));
    }
  }
  const auto& repo = pipe->repo();
  if (const auto* info = repo.single_model() ? &repo.components().front() : repo.component(component))
    rq.base_model_class = info->class_name;

  const io::ResolvedModel resolved =
      io::resolve_model(pipeline::model_spec(cfg), cfg.get_string("model.revision"),
                        io::hub_cache(cfg.get_path("model.hub_cache")));
  const json all = cfg.to_json();
  json record = json::object();
  record["base_model"] = artifacts::base_model_record(pipeline::model_spec(cfg), resolved.repo, repo, {component});
  record["base_model"]["class_name"] = rq.base_model_class;
  record["plugin"] = pipe->loaded_plugin().provenance.to_json();
  record["lora"] = {{"r", rq.settings.r},
                    {"alpha", rq.settings.alpha},
                    {"dropout", cfg.get_number("lora.dropout")},
                    {"targets", cfg.get_list("lora.targets")}};
  record["loss"] = config_section(all, {"diffusion.", "tuning."});
  record["fragments"] = {{"count", rq.settings.fragments}, {"pattern", rq.settings.fragment_pattern}};
  const std::string data = cfg.get_string("data.path");
  const fs::path contract = fs::path(data) / data::kCacheContractFile;
  std::error_code ec;
  if (!data.empty() && fs::exists(contract, ec)) {
    record["cache_contract"] = json::parse(read_file(contract));
  } else {
    record["cache_contract"] = nullptr;
  }
  const BuildInfo& b = build_info();
  record["export"] = {{"time", now_utc()},
                      {"host", {{"version", b.version}, {"git_commit", b.git_commit}, {"torch", b.torch_version}}},
                      {"checkpoint", checkpoint.string()},
                      {"checkpoint_sha256", sha256_file(checkpoint)},
                      {"run_config", rc.recorded_file.empty() ? json(nullptr) : json(rc.recorded_file.string())},
                      {"config_hash", cfg.hash()}};
  rq.record = record;

  const bool own_files = pipe->plugin().has(YETO_CAP_ARTIFACTS);
  const bool lora = std::all_of(rq.expected.begin(), rq.expected.end(),
                                [](const artifacts::TrainableTensor& t) { return artifacts::is_lora_weight(t.name); });
  // The checkpoint is read once, for the adapter files and the plugin's own (capability artifacts).
  auto values = artifacts::read_trainable_checkpoint(rq.checkpoint, rq.expected, rq.settings);
  if (!lora && !own_files) return export_full_weights(*pipe, component, values, record, output);
  if (lora) {
    const artifacts::ExportReport r =
        own_files ? artifacts::export_adapter(rq, values) : artifacts::export_adapter(rq, std::move(values));
    std::vector<std::string> files = r.files;
    if (own_files) {
      save_plugin_artifact(*pipe, rq, values);
      files.push_back(std::string(artifacts::kPluginArtifactDir) + "/");
    }
    std::cout << "exported " << r.modules << " LoRA modules of " << r.component << " (r " << rq.settings.r
              << ", alpha " << rq.settings.alpha << ") to " << output << ": " << join(files, ", ") << "\n";
    return 0;
  }
  // Trainables that are no LoRA (full tuning, a full-step model's own tensors): no Diffusers or
  // PEFT file can hold them, so the record and the plugin's own files carry the trained state.
  fs::create_directories(output);
  save_plugin_artifact(*pipe, rq, values);
  json rec = record;
  rec["checkpoint"] = checkpoint.string();
  rec["trainable"] = json::array();
  for (const auto& t : rq.expected) rec["trainable"].push_back({{"name", t.name}, {"shape", t.shape}});
  rec["artifact"] = artifacts::kPluginArtifactDir;
  atomic_write(fs::path(output) / artifacts::kRecordFile, rec.dump(2) + "\n");
  std::cout << "exported " << rq.expected.size() << " trained tensors through plugin '"
            << pipe->loaded_plugin().manifest.name << "' to " << output << ": " << artifacts::kRecordFile << ", "
            << artifacts::kPluginArtifactDir << "/\n";
  return 0;
}

}  // namespace

void register_export_command(Registry& r) {
  Command c;
  c.name = "export";
  c.summary = "Export a trained adapter in Diffusers, PEFT and ComfyUI layouts.";
  c.description =
      "Rebuilds the exact trainable layout of the run (canonical tensor names and shapes from the model, the plugin, "
      "the LoRA and the fragment settings), checks the checkpoint against it and writes --output-dir with "
      "pytorch_lora_weights.safetensors (Diffusers, alpha/r folded in), adapter_config.json + "
      "adapter_model.safetensors (PEFT) and yeto_diffusion_adapter.json (base model and commit, modules, recipes, "
      "plugin, provenance); --format comfyui adds comfyui_lora.safetensors. --checkpoint takes the syncer's "
      "checkpoint.bin or state directory, a learner checkpoint (trainable.safetensors or its directory) or a run "
      "directory. The run's recorded config.toml (found next to the checkpoint or up to three directories above) "
      "supplies every setting; flags are only needed without one, and a flag that contradicts it is refused. A "
      "checkpoint that does not fit the settings fails naming the setting. See docs/ARTIFACTS.md.";
  c.run_config = true;
  c.options = {
      {"checkpoint", "PATH", "Syncer checkpoint, learner checkpoint or run directory.", false, 0},
      {"output-dir", "DIR", "Adapter directory to write.", false, 0},
      {"format", "FORMAT", "diffusers (default: Diffusers + PEFT layouts) or comfyui (also ComfyUI naming).", false, 0},
      {"component", "NAME", "The denoiser to export when the run trains several (e.g. transformer_2 of Wan 2.2); one "
                            "adapter directory per denoiser. transformer_2's Diffusers file names its keys "
                            "'transformer.' as Diffusers loads it (load_into_transformer_2=True); the record keeps "
                            "transformer_2.", false, 0},
  };
  c.run = run_export;
  r.add(std::move(c));
}

}  // namespace yeto::app
