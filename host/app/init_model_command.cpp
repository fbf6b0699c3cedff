// `yeto-host init-model`: a randomly initialised repository from a family plugin's preset
// (initmodel::init_model does the work).
#include <charconv>
#include <filesystem>
#include <iostream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "initmodel/init_model.hpp"

namespace yeto::app {
namespace {

int run_init_model(CommandContext& ctx) {
  initmodel::InitOptions o;
  o.family = ctx.value("family");
  o.preset = ctx.value("preset");
  o.out = ctx.value("out");
  o.force = ctx.has("force");
  if (ctx.has("seed")) {
    const std::string v = ctx.value("seed");
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), o.seed);
    if (ec != std::errc() || end != v.data() + v.size()) throw UsageError("--seed: expected a non-negative integer, got '" + v + "'");
  }
  const auto r = initmodel::init_model(ctx.args().config_file, ctx.args().overrides, o);
  std::cout << "init-model: wrote " << std::filesystem::absolute(o.out).lexically_normal().string() << " (family " << o.family << ", preset "
            << o.preset << ", seed " << o.seed << ", plugin " << r.plugin << ")\n";
  for (const auto& name : r.components) {
    std::cout << "  " << name;
    if (auto it = r.parameters.find(name); it != r.parameters.end()) std::cout << ": " << it->second << " parameters";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

void register_init_model_command(Registry& r) {
  Command c;
  c.name = "init-model";
  c.summary = "Write a randomly initialised model repository in Diffusers layout from a plugin preset.";
  c.description =
      "Loads the plugin that serves --family (through the trusted loader: plugins.dirs, plugins.trusted_keys), reads its "
      "presets (documented model shapes) and writes --out as a complete Diffusers repository: model_index.json, every "
      "component's config, each component built from its class with random weights drawn from --seed and saved as "
      "safetensors (diffusion_pytorch_model.safetensors / model.safetensors), and tokenizer files generated "
      "deterministically (a byte-level CLIP BPE vocab.json + merges.txt, a SentencePiece unigram spiece.model for T5) "
      "sized to the paired text encoder's vocabulary. The result loads with inspect, check, cache, train and sample. "
      "A non-empty --out is refused unless --force; the repository is written beside --out and moved into place at the "
      "end. Without a valid --preset, the error lists the plugin's presets.";
  c.run_config = true;
  c.options = {{"family", "NAME", "Model family (a plugin family such as flux, or a plugin name)."},
               {"preset", "NAME", "The plugin's preset (e.g. tiny)."},
               {"out", "DIR", "Repository to write."},
               {"seed", "S", "Seed of the random weights (default 0)."},
               {"force", "", "Replace a non-empty --out."}};
  c.run = run_init_model;
  r.add(std::move(c));
}

}  // namespace yeto::app
