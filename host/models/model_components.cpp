#include "models/model_components.hpp"

#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/tensors.hpp"
#include "io/weights.hpp"

namespace yeto::models {

std::vector<std::string> model_component_classes() {
  return {"AutoencoderKL",   "AutoencoderKLLTX2Audio", "CLIPTextModel",    "CLIPTextModelWithProjection",
          "LTX2Vocoder",     "LTX2VocoderWithBWE",     "T5EncoderModel",   "UMT5EncoderModel"};
}

std::shared_ptr<io::ModuleComponent> build_model_component(const std::string& class_name,
                                                           const nlohmann::json& config, const std::string& where) {
  if (class_name == "AutoencoderKL") {
    return std::make_shared<AutoencoderKLComponent>(AutoencoderKL(AutoencoderKLConfig::from_json(config, where)));
  }
  if (class_name == "CLIPTextModel" || class_name == "CLIPTextModelWithProjection") {
    return std::make_shared<CLIPTextComponent>(
        CLIPTextModel(CLIPTextConfig::from_json(config, where), class_name == "CLIPTextModelWithProjection"));
  }
  if (class_name == "T5EncoderModel" || class_name == "UMT5EncoderModel") {
    return std::make_shared<T5EncoderComponent>(
        T5EncoderModel(T5Config::from_json(config, class_name == "UMT5EncoderModel", where)));
  }
  if (class_name == "AutoencoderKLLTX2Audio")
    return std::make_shared<LTX2AudioVaeComponent>(
        AutoencoderKLLTX2Audio(LTX2AudioVaeConfig::from_json(config, where)));
  if (class_name == "LTX2Vocoder")
    return std::make_shared<LTX2VocoderComponent>(LTX2Vocoder(LTX2VocoderConfig::from_json(config, where)));
  if (class_name == "LTX2VocoderWithBWE")
    return std::make_shared<LTX2VocoderComponent>(LTX2VocoderWithBWE(LTX2VocoderBweConfig::from_json(config, where)));
  throw Error(where + ": class " + class_name + " is not one of the shared models (" +
                  join(model_component_classes(), ", ") + ")",
              ExitCode::bad_input);
}

nn::LoadOptions checkpoint_rules(const std::string& class_name) {
  nn::LoadOptions o;
  if (class_name == "AutoencoderKL") {
    o.rename = autoencoder_kl_rename;
  } else if (class_name == "CLIPTextModel" || class_name == "CLIPTextModelWithProjection") {
    o.ignore_unexpected = {"text_model.embeddings.position_ids"};
    if (class_name == "CLIPTextModel") o.ignore_unexpected.push_back("text_projection.weight");
  } else if (class_name == "AutoencoderKLLTX2Audio") {
    // ltx-core's names; statistics Diffusers does not keep (the video VAE's are also dropped).
    o.rename = ltx2_audio_vae_diffusers_name;
    o.ignore_unexpected = {"per_channel_statistics.*", "audio_vae.per_channel_statistics.*"};
  } else if (class_name == "LTX2Vocoder" || class_name == "LTX2VocoderWithBWE") {
    const bool bwe = class_name == "LTX2VocoderWithBWE";
    o.rename = [bwe](const std::string& n) { return ltx2_vocoder_diffusers_name(n, bwe); };
  } else if (class_name == "T5EncoderModel" || class_name == "UMT5EncoderModel") {
    o.rename = T5EncoderModelImpl::rename;
    o.ignore_unexpected = {"decoder.*", "lm_head.weight"};
  }
  return o;
}

nn::LoadReport load_component_weights(torch::nn::Module& module, const std::string& class_name,
                                      const io::WeightSource& source, bool strict) {
  const auto rules = checkpoint_rules(class_name);
  auto targets = nn::named_tensors(module);
  nn::LoadReport report;
  std::vector<std::pair<std::string, std::string>> plan;  // checkpoint name, module name
  std::set<std::string> seen;
  std::vector<std::string> mismatched;
  const bool has_shared = source.has("shared.weight");
  for (const auto& raw : source.names()) {
    // T5 files may hold the tied embedding under both names; read it once.
    if (raw == "encoder.embed_tokens.weight" && has_shared) continue;
    const std::string name = rules.rename ? rules.rename(raw) : raw;
    auto it = targets.find(name);
    if (it == targets.end()) {
      if (!nn::name_matches(raw, rules.ignore_unexpected) && !nn::name_matches(name, rules.ignore_unexpected)) {
        report.unexpected.push_back(raw);
      }
      continue;
    }
    const auto loc = source.locate(raw);
    const auto& shape = loc.info->shape;
    std::int64_t numel = 1;
    for (auto s : shape) numel *= s;
    const bool same = shape == it->second.sizes().vec();
    const bool conv1x1 = shape.size() == static_cast<std::size_t>(it->second.dim()) + 2 && shape.back() == 1 &&
                         shape[shape.size() - 2] == 1 && numel == it->second.numel();
    if (!same && !conv1x1) {
      mismatched.push_back(raw + " (checkpoint " + io::shape_str(shape) + ", module " +
                           io::shape_str(it->second.sizes().vec()) + ")");
      continue;
    }
    seen.insert(name);
    plan.emplace_back(raw, name);
  }
  for (const auto& [name, t] : targets) {
    if (seen.count(name) || name.find("lora_") != std::string::npos) continue;
    report.missing.push_back(name);
  }
  if (!mismatched.empty() || (strict && (!report.missing.empty() || !report.unexpected.empty()))) {
    std::ostringstream msg;
    msg << "cannot load the weights in " << source.root().string() << " into " << class_name << ":";
    auto list = [&msg](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg << "\n  " << what << " (" << names.size() << "):";
      for (std::size_t i = 0; i < names.size() && i < 12; ++i) msg << " " << names[i];
      if (names.size() > 12) msg << " ...";
    };
    list("missing from the checkpoint", report.missing);
    list("unexpected in the checkpoint", report.unexpected);
    list("shape mismatches", mismatched);
    msg << "\n(nothing was loaded; check that config.json belongs to these weights)";
    throw Error(msg.str(), ExitCode::bad_input);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [raw, name] : plan) {
    const auto loc = source.locate(raw);
    auto& dst = targets.at(name);
    // The checkpoint's bytes in place (a view of the mapping when dtype and device match).
    at::Tensor t = io::tensor_as(loc.file, *loc.info, dst.scalar_type(), dst.device());
    if (t.scalar_type() != dst.scalar_type()) t = t.to(dst.scalar_type());
    dst.set_data(t.reshape(dst.sizes()));
    report.loaded.push_back(name);
  }
  return report;
}

void register_model_components(io::ComponentRegistry& registry) {
  for (const auto& cls : model_component_classes()) {
    const std::string kind = cls == "AutoencoderKL"                                     ? "vae"
                             : cls == "AutoencoderKLLTX2Audio"                          ? "audio_vae"
                             : cls == "LTX2Vocoder" || cls == "LTX2VocoderWithBWE"      ? "vocoder"
                                                                                        : "text_encoder";
    registry.add(cls, kind, [cls](const io::ComponentSource& src) -> std::shared_ptr<io::Component> {
      const auto where = (src.dir / "config.json").string();
      // With weights to load, built without initialising them (io::DeferredInit).
      std::optional<io::DeferredInit> deferred;
      if (!src.dir.empty()) deferred.emplace();
      auto component = build_model_component(cls, src.config, where);
      if (!src.dir.empty()) {
        auto weights = io::WeightSource::open(src.dir, src.variant);
        load_component_weights(component->module(), cls, weights, /*strict=*/true);
        std::vector<std::pair<std::string, at::Tensor>> all;
        for (const auto& t : component->module().named_parameters()) all.emplace_back(t.key(), t.value());
        for (const auto& t : component->module().named_buffers()) all.emplace_back(t.key(), t.value());
        io::DeferredInit::check_initialized(all, where + " (" + cls + ")");
      }
      component->module().eval();
      return component;
    });
  }
}

}  // namespace yeto::models
