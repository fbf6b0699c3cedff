#include "pipeline/cache_encoder.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/torch/batch.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"

namespace yeto::pipeline {
using nlohmann::json;

namespace {

using data::MediaKind;
using data::NamedTensor;
using data::Sample;
using data::ShapeKey;
using data::shape_str;

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return "";
  }
}

NamedTensor to_named(const std::string& name, const at::Tensor& tensor, const std::string& hook) {
  const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  const std::string dtype = dtype_name(t.scalar_type());
  if (dtype.empty())
    throw Error(hook + " returned tensor '" + name + "' of dtype " + std::string(c10::toString(t.scalar_type())) +
                    ", which a cache cannot store",
                ExitCode::failure);
  NamedTensor out;
  out.name = name;
  out.dtype = dtype;
  out.shape = t.sizes().vec();
  out.bytes.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

// Splits a batch-first tensor of `hook`'s output into one tensor per row.
void split_rows(const std::string& name, const at::Tensor& t, std::int64_t rows, const std::string& hook,
                std::vector<std::vector<NamedTensor>*>& out) {
  if (t.dim() == 0 || t.size(0) != rows)
    throw Error(hook + " returned '" + name + "' of shape " + shape_str(t.sizes().vec()) + " for a batch of " +
                    std::to_string(rows) + " rows; the plugin must return batch-first tensors",
                ExitCode::failure);
  for (std::int64_t i = 0; i < rows; ++i) out[static_cast<std::size_t>(i)]->push_back(to_named(name, t[i], hook));
}

class PipelineEncoder final : public data::CacheEncoder {
 public:
  PipelineEncoder(Pipeline& p, const CacheEncoderOptions& o) : p_(p), o_(o) {
    auto& plugin = p_.plugin();
    const std::string name = p_.loaded_plugin().manifest.name;
    if (!plugin.has(YETO_CAP_ENCODE_MEDIA) && !plugin.has(YETO_CAP_ENCODE_CONDITIONING))
      throw Error("cache: plugin '" + name + "' implements neither encode_media nor encode_conditioning, so there is nothing "
                  "to precompute for this model",
                  ExitCode::not_available);
  }
  std::string model_id() const override { return p_.model_id(); }
  std::string model_commit() const override { return p_.model_commit(); }
  std::map<std::string, std::string> component_hashes() const override { return p_.component_hashes(); }

  std::vector<std::vector<NamedTensor>> encode(const std::vector<Sample>& batch) override {
    c10::InferenceMode guard;
    std::vector<std::vector<NamedTensor>> out(batch.size());
    consumed_.assign(batch.size(), {});
    const std::string plugin = "plugin '" + p_.loaded_plugin().manifest.name + "'";

    // Raw media, one encode_media call per shape within the batch.
    std::map<std::pair<MediaKind, ShapeKey>, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (!batch[i].pixels.empty()) groups[{batch[i].kind, batch[i].shape}].push_back(i);
    for (const auto& [key, members] : groups) {
      if (!p_.plugin().has(YETO_CAP_ENCODE_MEDIA))
        throw Error("cache: " + plugin + " has no encode_media hook, so raw media cannot be cached; give the rows cached latents",
                    ExitCode::not_available);
      std::vector<at::Tensor> pixels, sound;
      std::vector<std::vector<NamedTensor>*> dest;
      for (std::size_t i : members) {
        pixels.push_back(data::pixels_to_tensor(batch[i]));
        dest.push_back(&out[i]);
        const auto a = batch[i].tensors.find("audio");
        if (a != batch[i].tensors.end()) sound.push_back(data::raw_to_tensor(a->second));
      }
      // The media's decoded sound goes to the hook with its pictures (stacked when every member
      // has it in one shape, else one call per row) and, like the pixels, is not stored itself.
      plugin::NamedTensors media = {{"pixel_values", at::stack(pixels)}};
      const bool with_sound = sound.size() == members.size() && !sound.empty();
      if (with_sound) {
        bool same = true;
        for (const auto& t : sound) same = same && t.sizes() == sound.front().sizes();
        if (!same) {
          for (std::size_t k = 0; k < members.size(); ++k) {
            encode_group({{"pixel_values", pixels[k].unsqueeze(0)}, {"audio", sound[k].unsqueeze(0)}}, {dest[k]}, plugin);
            consumed_[members[k]].insert("audio");
          }
          continue;
        }
        media.emplace_back("audio", at::stack(sound));
        for (std::size_t i : members) consumed_[i].insert("audio");
      }
      encode_group(media, dest, plugin);
    }

    // Prompts, one encode_conditioning call for the batch; a row that already carries its cached
    // prompt_embeds keeps them (as training uses them instead of its prompt).
    json prompts = json::array();
    std::vector<std::vector<NamedTensor>*> dest;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (batch[i].has_prompt && !batch[i].tensors.count("prompt_embeds") && !batch[i].deferred.count("prompt_embeds")) {
        prompts.push_back(batch[i].prompt);
        dest.push_back(&out[i]);
      }
    if (!prompts.empty()) {
      if (!p_.plugin().has(YETO_CAP_ENCODE_CONDITIONING))
        throw Error("cache: " + plugin + " has no encode_conditioning hook, so prompts cannot be cached; give the rows cached "
                    "prompt_embeds",
                    ExitCode::not_available);
      const auto result = p_.plugin().encode_conditioning(prompts.dump(), {});
      if (result.empty()) throw Error("cache: " + plugin + " encode_conditioning returned no tensors", ExitCode::failure);
      for (const auto& [name, t] : result)
        split_rows(name, t, static_cast<std::int64_t>(prompts.size()), plugin + " encode_conditioning", dest);
    }

    // Cached tensors the rows already have are kept as they are (unless just computed).
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto has = [&](const std::string& name) {
        for (const auto& t : out[i])
          if (t.name == name) return true;
        return false;
      };
      for (const auto& [name, raw] : batch[i].tensors)
        if (!has(name) && !consumed_[i].count(name)) out[i].push_back({name, raw.dtype, raw.shape, raw.bytes});
      for (const auto& [name, ref] : batch[i].deferred)
        if (!has(name)) out[i].push_back(to_named(name, data::load_tensor_file(ref), ref.describe()));
    }
    return out;
  }

 private:
  // One encode_media call; its batch-first outputs split into the rows of `dest`.
  void encode_group(const plugin::NamedTensors& media, const std::vector<std::vector<NamedTensor>*>& dest,
                    const std::string& plugin) {
    const json options = {{"sample", o_.sample_latents}, {"seed", o_.seed}};
    const auto result = p_.plugin().encode_media(media, options.dump());
    auto rows = dest;
    bool latents = false;
    for (const auto& [name, t] : result) {
      split_rows(name, t, static_cast<std::int64_t>(rows.size()), plugin + " encode_media", rows);
      latents = latents || name == "latents";
    }
    if (!latents) throw Error("cache: " + plugin + " encode_media returned no \"latents\" tensor", ExitCode::failure);
  }

  Pipeline& p_;
  CacheEncoderOptions o_;
  std::vector<std::set<std::string>> consumed_;  // per row of the batch: decoded tensors the hook took
};

}  // namespace

data::CacheProfile cache_profile(const Pipeline& pipeline, const data::DataOptions& options) {
  data::CacheProfile p = data::preprocessing_profile(options);
  p.model_id = pipeline.model_id();
  p.model_commit = pipeline.model_commit();
  p.components = pipeline.component_hashes();
  return p;
}

data::RowInputs declared_row_inputs(const Pipeline& pipeline, std::string* from) {
  const std::string who = "the model's plugin (" + pipeline.loaded_plugin().manifest.name + ")";
  if (from) *from = who;
  const auto& plan = pipeline.plan();
  if (!plan.is_object() || !plan.contains("inputs")) return {};
  return data::parse_row_inputs(plan["inputs"], who);
}

data::CacheProfile validate_cache(const std::filesystem::path& dir, const Pipeline& pipeline,
                                  const data::DataOptions& options) {
  return data::validate_cache_contract(dir, cache_profile(pipeline, options));
}

std::unique_ptr<data::CacheEncoder> make_cache_encoder(Pipeline& pipeline, const CacheEncoderOptions& options) {
  return std::make_unique<PipelineEncoder>(pipeline, options);
}

}  // namespace yeto::pipeline
