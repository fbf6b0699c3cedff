// init_model(): the LibTorch half of `yeto-host init-model` (plugin presets, seeded
// components through Pipeline::open, safetensors); preset_files.cpp writes the configs.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <unistd.h>

#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "initmodel/init_model.hpp"
#include "io/tensors.hpp"
#include "models/autoencoder_kl.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "runtime/torch_runtime.hpp"

namespace yeto::initmodel {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Removes a staging folder unless the run completed.
struct StagingDir {
  fs::path path;
  bool keep = false;
  ~StagingDir() {
    std::error_code ec;
    if (!keep && !path.empty()) fs::remove_all(path, ec);
  }
};

const plugin::PluginFile& find_family_plugin(const plugin::Catalog& catalog, const std::string& family,
                                             const plugin::LoaderOptions& options) {
  for (const auto& p : catalog.plugins)
    if (std::find(p.manifest.families.begin(), p.manifest.families.end(), family) != p.manifest.families.end()) return p;
  if (const plugin::PluginFile* p = catalog.find(family)) return *p;
  std::vector<std::string> families;
  for (const auto& p : catalog.plugins)
    for (const auto& f : p.manifest.families) families.push_back(f);
  std::vector<std::string> dirs;
  for (const auto& d : options.dirs) dirs.push_back(d.string());
  throw Error("init-model: no plugin serves family '" + family + "'" + did_you_mean(family, families) + " (families found: " +
                  (families.empty() ? std::string("none") : join(families, ", ")) + "; searched " +
                  (dirs.empty() ? std::string("no plugin directories") : join(dirs, ", ")) + ")",
              ExitCode::plugin_not_found);
}

std::string preset_list(const json& presets) {
  std::string out;
  for (const auto& [name, p] : presets.items()) {
    out += "\n  " + name;
    if (p.is_object() && p.contains("description") && p["description"].is_string())
      out += ": " + p["description"].get<std::string>();
  }
  return out;
}

bool non_empty_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::directory_iterator(p, ec) != fs::directory_iterator();
}

// The weights file name Diffusers / transformers save a component under.
std::string weights_file(const std::string& library) {
  return library == "transformers" ? "model.safetensors" : "diffusion_pytorch_model.safetensors";
}

}  // namespace

FamilyPresets family_presets(const config::Config& cfg, const std::string& family, std::uint64_t seed) {
  const plugin::LoaderOptions lopts = plugin::LoaderOptions::from_config(cfg);
  const plugin::Catalog catalog = plugin::Catalog::scan(lopts.dirs);
  const plugin::PluginFile& file = find_family_plugin(catalog, family, lopts);
  plugin::HostApiOptions ho;
  ho.plugin_name = file.manifest.name;
  ho.config_values = plugin::config_values(cfg);
  ho.seed = seed;
  const plugin::LoadedPlugin& loaded = plugin::load_file(file, lopts, plugin::make_host_api(ho));
  FamilyPresets out{file.manifest.name, file.manifest.version, json()};
  {
    plugin::Instance instance(loaded, ho.config_values.dump());
    const std::string text = instance.presets();
    try {
      out.presets = json::parse(text);
    } catch (const json::exception& e) {
      throw Error("plugin '" + file.manifest.name + "': presets() returned invalid JSON (" + e.what() + ")", ExitCode::plugin_abi_mismatch);
    }
  }
  if (!out.presets.is_object() || out.presets.empty())
    throw Error("plugin '" + file.manifest.name + "' offers no init-model presets", ExitCode::not_available);
  return out;
}

InitResult init_model(const std::optional<fs::path>& config_file, const std::vector<config::Override>& overrides,
                      const InitOptions& o) {
  if (o.family.empty()) throw UsageError("init-model: --family NAME is required (e.g. --family flux)");
  if (o.out.empty()) throw UsageError("init-model: --out DIR is required");
  const fs::path out = fs::absolute(o.out).lexically_normal();
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw Error("init-model: --out " + out.string() + " exists and is not a directory", ExitCode::bad_input);
  if (non_empty_dir(out) && !o.force)
    throw Error("init-model: --out " + out.string() + " is not empty; choose a new directory or pass --force to replace it",
                ExitCode::bad_input);

  // 1. The family's plugin, through the trusted loader, and its presets.
  const config::Config cfg = config::Config::resolve(config_file, overrides);
  const FamilyPresets fp = family_presets(cfg, o.family, o.seed);
  const json& presets = fp.presets;
  if (o.preset.empty())
    throw UsageError("init-model: --preset NAME is required; plugin '" + fp.plugin + "' offers:" + preset_list(presets));
  if (!presets.contains(o.preset)) {
    std::vector<std::string> names;
    for (const auto& [n, p] : presets.items()) names.push_back(n);
    throw UsageError("init-model: plugin '" + fp.plugin + "' has no preset '" + o.preset + "'" + did_you_mean(o.preset, names) +
                     "; it offers:" + preset_list(presets));
  }

  // 2. Configs and tokenizer files into a staging folder beside --out.
  fs::create_directories(out.parent_path());
  StagingDir staging;
  // Built in steps: GCC 12 misreports -Wstringop-overflow on `"." + string` here.
  std::string staging_name = out.filename().string();
  staging_name.insert(staging_name.begin(), '.');
  staging_name += ".init-model-" + std::to_string(::getpid());
  staging.path = out.parent_path() / staging_name;
  fs::remove_all(staging.path, ec);
  fs::create_directories(staging.path);
  const std::string where = "plugin '" + fp.plugin + "' preset '" + o.preset + "'";
  const json& preset = presets[o.preset];
  InitResult result;
  result.plugin = fp.plugin;
  result.components = write_preset_files(staging.path, preset, where);

  // 3. Every component built from its class with seeded random weights, saved in Diffusers layout.
  std::vector<config::Override> ov = overrides;
  ov.push_back({"model.id", staging.path.string(), "init-model"});
  ov.push_back({"model.adapter", fp.plugin, "init-model"});
  ov.push_back({"model.precision", "fp32", "init-model"});
  ov.push_back({"run.device", "cpu", "init-model"});
  ov.push_back({"diffusion.seed", std::to_string(o.seed), "init-model"});
  const config::Config open_cfg = config::Config::resolve(config_file, ov);
  runtime::configure_threads(static_cast<int>(open_cfg.get_int("run.threads")));
  at::manual_seed(o.seed);
  {
    pipeline::OpenOptions open;
    open.load_weights = false;
    open.prepare = false;
    auto pipe = pipeline::Pipeline::open(open_cfg, open);
    c10::InferenceMode guard;
    const json& index = preset["model_index"];
    for (const auto& name : result.components) {
      const yeto_component_v1* c = pipe->component(name);
      if (!c) continue;  // the plugin's plan leaves it out
      plugin::NamedTensors params = plugin::component_parameters(*c);
      if (params.empty()) continue;  // tokenizers, schedulers
      std::int64_t count = 0;
      for (auto& [n, t] : params) {
        t = t.detach().to(at::kCPU).contiguous();
        count += t.numel();
      }
      const json& spec = preset["components"].value(name, json::object());
      if (spec.value("weights", "") == "pixel-codec") {
        const std::string class_name = index[name][1].get<std::string>();
        if (class_name != "AutoencoderKL")
          throw Error(where + ": components." + name + ".weights \"pixel-codec\" is for an AutoencoderKL, not " + class_name,
                      ExitCode::bad_input);
        const fs::path vae_config = staging.path / name / "config.json";
        models::set_pixel_codec_weights(models::AutoencoderKLConfig::from_json(json::parse(read_file(vae_config)),
                                                                               vae_config.string()),
                                        params, where + ": components." + name);
        spdlog::info("init-model: {}: analytic pixel-codec weights", name);
      }
      io::save_safetensors(staging.path / name / weights_file(index[name][0].get<std::string>()), params, {{"format", "pt"}});
      result.parameters[name] = count;
      spdlog::info("init-model: {} ({}): {} parameters", name, index[name][1].get<std::string>(), count);
    }
  }
  atomic_write(staging.path / "yeto_init_model.json",
               json{{"plugin", fp.plugin}, {"plugin_version", fp.version}, {"family", o.family},
                    {"preset", o.preset}, {"seed", o.seed}}
                       .dump(2) +
                   "\n");

  // 4. Into place: the old --out (with --force) is moved aside first and removed last.
  fs::path old;
  if (fs::exists(out, ec)) {
    old = out.parent_path() / ("." + out.filename().string() + ".replaced-" + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    fs::rename(out, old);
  }
  fs::rename(staging.path, out);
  staging.keep = true;
  fsync_directory(out.parent_path());
  if (!old.empty()) fs::remove_all(old, ec);
  return result;
}

}  // namespace yeto::initmodel
