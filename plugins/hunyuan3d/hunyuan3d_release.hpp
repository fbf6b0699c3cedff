// The layout Tencent publishes Hunyuan3D-2.1 in (Hub repository tencent/Hunyuan3D-2.1, folder
// hunyuan3d-dit-v2-1/): one config.yaml whose sections `model`, `vae`, `conditioner`,
// `scheduler` (and `image_processor`) each give a `target` class path and its `params`, next to
// one checkpoint holding the three state dicts: model.fp16.safetensors (every key prefixed by its
// section: `model.`, `vae.`, `conditioner.`) or model.fp16.ckpt (a torch.save dict {"model": ...,
// "vae": ..., "conditioner": ...}, whose flattened names carry the same prefixes). Torch-free.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace yeto::hunyuan3d {

// The subset of YAML a release config.yaml is written in, read as JSON: block mappings by
// indentation, block sequences of scalars, flow sequences of scalars ([64]), comments, quoted
// strings, anchors (&name) and aliases (*name); plain scalars resolved as PyYAML's safe_load does
// (an integer; a float only with a '.', as 1.e-6; true/false/yes/no/on/off; null/~). Anything
// else (tabs, flow mappings, multi-line scalars, tags, duplicate keys) throws
// std::invalid_argument "<file>:<line>: ...".
nlohmann::json read_release_yaml(const std::string& text, const std::string& file);

// The folder of a release layout at `model_dir`: the directory itself when it holds config.yaml,
// else its hunyuan3d-dit-v2-1/ folder when that does (the Hub repository's root); empty when
// neither.
std::filesystem::path release_folder(const std::filesystem::path& model_dir);

// The checkpoint of a release folder, the first present of model.fp16.safetensors,
// model.safetensors, model.fp16.ckpt, model.ckpt (safetensors first: no pickle). Throws
// std::invalid_argument naming the folder and the names tried when there is none.
std::filesystem::path release_checkpoint(const std::filesystem::path& folder);

// What a release config.yaml says, as our components' configs (std::invalid_argument names the
// file and the key for a missing section, target, params or required parameter, or a class this
// plugin does not serve):
//   model: the HunYuanDiTPlain `params` (input_size, in_channels, hidden_size, context_dim,
//     depth, num_heads required; the rest as given) with _class_name;
//   vae: the ShapeVAE `params` (num_latents, embed_dim, width, heads, num_decoder_layers
//     required) with _class_name;
//   conditioner: SingleImageEncoder's main_image_encoder (type DinoImageEncoder) `kwargs`
//     (config, image_size, use_cls_token), or null when the section has no encoder;
//   scheduler: the FlowMatchEulerDiscreteScheduler `params`.
struct ReleaseConfigs {
  nlohmann::json model, vae, conditioner, scheduler;
};
ReleaseConfigs release_configs(const nlohmann::json& yaml, const std::string& file);

// The load_pipeline plan of a release folder: every component from its config (inline) and the
// checkpoint's tensors under its prefix (`weights`, `weights_prefix`; the ShapeVAE's point-cloud
// encoder, `encoder.` and `pre_kl.`, ignored; the conditioner's `main_image_encoder.` level
// dropped, so its names are DinoImageEncoder's `model.*`).
nlohmann::json release_plan(const ReleaseConfigs& c, const std::filesystem::path& checkpoint);

}  // namespace yeto::hunyuan3d
