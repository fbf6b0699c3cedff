#include "io/aliases.hpp"

#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::io {

const std::vector<ModelAlias>& model_aliases() {
  // Hub ids are the Diffusers-format repositories of each model, or a layout the family's plugin
  // plans itself (Hunyuan3D-2.1).
  static const std::vector<ModelAlias> table = {
      {"flux-dev", "black-forest-labs/FLUX.1-dev", "flux", "FLUX.1 [dev], guidance-distilled 12B flow transformer"},
      {"flux-schnell", "black-forest-labs/FLUX.1-schnell", "flux", "FLUX.1 [schnell], few-step 12B flow transformer"},
      {"sd35", "stabilityai/stable-diffusion-3.5-large", "sd35", "Stable Diffusion 3.5 Large (same as sd35-large)"},
      {"sd35-medium", "stabilityai/stable-diffusion-3.5-medium", "sd35", "Stable Diffusion 3.5 Medium, 2.5B MMDiT-X"},
      {"sd35-large", "stabilityai/stable-diffusion-3.5-large", "sd35", "Stable Diffusion 3.5 Large, 8B MMDiT"},
      {"ltx-video", "Lightricks/LTX-Video", "ltx", "LTX-Video text/image-to-video transformer"},
      {"wan21-t2v-1.3b", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "wan", "Wan 2.1 text-to-video, 1.3B"},
      {"wan21-t2v-14b", "Wan-AI/Wan2.1-T2V-14B-Diffusers", "wan", "Wan 2.1 text-to-video, 14B"},
      {"wan22-t2v-a14b", "Wan-AI/Wan2.2-T2V-A14B-Diffusers", "wan", "Wan 2.2 text-to-video, two 14B experts routed by timestep"},
      {"wan22", "Wan-AI/Wan2.2-T2V-A14B-Diffusers", "wan", "Wan 2.2 text-to-video (same as wan22-t2v-a14b)"},
      {"wan22-ti2v-5b", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", "wan", "Wan 2.2 text/image-to-video, 5B with the high-compression VAE"},
      {"pixart-alpha", "PixArt-alpha/PixArt-XL-2-1024-MS", "pixart", "PixArt-alpha XL-2 1024px"},
      {"pixart-sigma", "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS", "pixart", "PixArt-Sigma XL-2 1024px"},
      // Not a Diffusers repository: Tencent's release layout (hunyuan3d-dit-v2-1/config.yaml and
      // its single-file checkpoint), which the hunyuan3d plugin plans itself; its licence must be
      // acknowledged (plugins.accept_licenses) before the plugin is opened.
      {"hunyuan3d-21", "tencent/Hunyuan3D-2.1", "hunyuan3d",
       "Hunyuan3D-2.1 image-to-shape DiT (release layout: hunyuan3d-dit-v2-1/; licence must be acknowledged)"},
      // Not a Diffusers repository: ByteDance's released checkpoint (one torch.save .pt file), which
      // the protenix plugin plans itself (the DiffusionModule's tensors; the trunk stays out).
      {"protenix", "bytedance/Protenix", "protenix",
       "Protenix structure diffusion module (release layout: protenix_base_default_v1.0.0.pt)"},
      {"protenix-v2", "bytedance/Protenix-v2", "protenix", "Protenix v2 structure diffusion module (protenix-v2.pt)"},
      // Not a Diffusers repository either: NAVA's release (config.json with NAVA.safetensors, or
      // NAVA_fp8.safetensors, keys under backbone.), planned by the nava plugin.
      {"nava", "ernie-research/NAVA", "nava",
       "NAVA joint audio-video WanAVModel, 6.3B (release layout: config.json + NAVA.safetensors)"},
  };
  return table;
}

const ModelAlias* find_alias(std::string_view name) {
  for (const auto& a : model_aliases())
    if (a.alias == name) return &a;
  return nullptr;
}

std::vector<std::string> alias_names() {
  std::vector<std::string> out;
  for (const auto& a : model_aliases()) out.push_back(a.alias);
  return out;
}

std::string aliases_markdown() {
  std::string s = "| alias | hub id | family | model |\n| --- | --- | --- | --- |\n";
  for (const auto& a : model_aliases())
    s += "| `" + a.alias + "` | `" + a.hub_id + "` | " + a.family + " | " + a.description + " |\n";
  return s;
}

ResolvedModel resolve_model(const std::string& spec, const std::string& revision, const HubCache& cache) {
  ResolvedModel m;
  m.spec = spec;
  m.alias = find_alias(spec);
  std::error_code ec;
  // A directory of the alias's name in the working directory still wins: the user meant it.
  const bool local_dir = std::filesystem::is_directory(spec, ec);
  if (m.alias && !local_dir) {
    try {
      m.repo = resolve_repo(m.alias->hub_id, RepoType::model, revision, cache);
    } catch (const Error& e) {
      throw Error("model alias '" + spec + "' (" + m.alias->hub_id + "): " + e.what(), e.code());
    }
    return m;
  }
  m.alias = nullptr;
  try {
    m.repo = resolve_repo(spec, RepoType::model, revision, cache);
  } catch (const Error& e) {
    const std::string hint = spec.find('/') == std::string::npos ? did_you_mean(spec, alias_names()) : "";
    if (hint.empty()) throw;
    throw Error(std::string(e.what()) + hint, e.code());
  }
  return m;
}

}  // namespace yeto::io
