#include "data/options.hpp"

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::data {

DataOptions data_options(const config::Config& cfg) {
  DataOptions o;
  o.source = cfg.get_string("data.path");
  o.source_base = cfg.entry("data.path").base_dir;
  o.revision = cfg.get_string("data.revision");
  o.format = cfg.get_string("data.format");
  o.hub_cache = cfg.get_path("model.hub_cache");
  o.columns.image = cfg.get_string("data.image_column");
  o.columns.video = cfg.get_string("data.video_column");
  o.columns.latents = cfg.get_string("data.latent_column");
  o.columns.prompt = cfg.get_string("data.prompt_column");
  o.columns.prompt_embeds = cfg.get_string("data.text_embeds_column");
  o.columns.attention_mask = cfg.get_string("data.text_attention_mask_column");
  o.columns.pooled_embeds = cfg.get_string("data.pooled_text_embeds_column");
  o.height = cfg.get_int("data.height");
  o.width = cfg.get_int("data.width");
  o.resize_mode = cfg.get_string("data.resize_mode") == "stretch" ? ResizeMode::stretch : ResizeMode::center_crop;
  o.num_frames = cfg.get_int("data.num_frames");
  o.fps = cfg.get_number("data.fps");
  o.bucket_by_shape = cfg.get_bool("data.bucket_by_shape");
  o.on_bad_row = cfg.get_string("data.on_bad_row") == "skip" ? BadRowPolicy::skip : BadRowPolicy::error;
  o.allow_path_escape = cfg.get_bool("data.allow_path_escape");
  o.max_pixels = cfg.get_int("data.max_pixels");
  o.max_frames = cfg.get_int("data.max_frames");
  o.workers = static_cast<int>(cfg.get_int("data.workers"));
  o.prefetch = static_cast<int>(cfg.get_int("data.prefetch"));
  o.decode_memory = static_cast<std::uint64_t>(cfg.get_int("data.decode_memory_mb")) << 20;
  o.seed = static_cast<std::uint64_t>(cfg.get_int("diffusion.seed"));
  o.micro_batch_size = cfg.is_auto("train.micro_batch_size") ? 1 : cfg.get_int("train.micro_batch_size");
  o.columns.audio = cfg.get_string("data.audio_column");
  o.audio.enabled = cfg.get_bool("data.audio");
  o.audio.sample_rate = static_cast<int>(cfg.get_int("data.audio_sample_rate"));
  o.audio.channels = static_cast<int>(cfg.get_int("data.audio_channels"));
  o.audio.explicit_format = cfg.entry("data.audio_sample_rate").origin != config::Origin::default_value ||
                            cfg.entry("data.audio_channels").origin != config::Origin::default_value;
  for (const std::string& entry : cfg.get_list("data.tensor_shapes")) {
    const std::string where = "data.tensor_shapes entry '" + entry + "'";
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(where + ": expected NAME=[d0, d1, ...] (-1: any size), optionally followed by ' with latents'");
    const std::string name = trim(entry.substr(0, eq));
    std::string rest = trim(entry.substr(eq + 1));
    TensorExpectation e;
    const std::string suffix = "with latents";
    if (rest.size() > suffix.size() && rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0) {
      e.with_latents = true;
      rest = trim(rest.substr(0, rest.size() - suffix.size()));
    }
    try {
      const auto j = nlohmann::json::parse(rest);
      e.shape = j.get<std::vector<std::int64_t>>();
    } catch (const nlohmann::json::exception&) {
      throw UsageError(where + ": the shape must be a list of integers such as [-1, 128]");
    }
    for (const auto d : e.shape)
      if (d < -1 || d == 0) throw UsageError(where + ": sizes are positive, or -1 for any size");
    o.tensor_shapes[name] = e;
  }
  return o;
}

std::optional<DataOptions> validation_data_options(const config::Config& cfg) {
  const std::string path = cfg.get_string("validation.data");
  if (path.empty()) return std::nullopt;
  DataOptions o = data_options(cfg);
  o.source = path;
  o.source_key = "validation.data";
  o.source_base = cfg.entry("validation.data").base_dir;
  return o;
}

const char* resize_mode_name(ResizeMode m) { return m == ResizeMode::stretch ? "stretch" : "center-crop"; }

std::string expectation_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

RowInputs parse_row_inputs(const nlohmann::json& j, const std::string& who) {
  RowInputs r;
  if (j.is_null()) return r;
  auto fail = [&](const std::string& why) -> RowInputs {
    throw Error(who + ": declared inputs: " + why + " (expected {\"audio\": {\"sample_rate\": N, \"channels\": 1 | 2}, "
                "\"tensors\": {NAME: {\"shape\": [...], \"with_latents\": bool}}})",
                ExitCode::bad_input);
  };
  if (!j.is_object()) return fail("not a JSON object");
  for (const auto& [key, v] : j.items())
    if (key != "audio" && key != "tensors") return fail("unknown key '" + key + "'");
  if (j.contains("audio") && !j["audio"].is_null()) {
    const auto& a = j["audio"];
    if (!a.is_object()) return fail("'audio' is not an object");
    AudioInput in;
    in.enabled = true;
    if (a.contains("sample_rate")) {
      if (!a["sample_rate"].is_number_integer() || a["sample_rate"].get<std::int64_t>() < 1000 ||
          a["sample_rate"].get<std::int64_t>() > 384000)
        return fail("'audio.sample_rate' must be an integer in [1000, 384000]");
      in.sample_rate = a["sample_rate"].get<int>();
    }
    if (a.contains("channels")) {
      if (!a["channels"].is_number_integer() || (a["channels"].get<int>() != 1 && a["channels"].get<int>() != 2))
        return fail("'audio.channels' must be 1 or 2");
      in.channels = a["channels"].get<int>();
    }
    r.audio = in;
  }
  if (j.contains("tensors") && !j["tensors"].is_null()) {
    if (!j["tensors"].is_object()) return fail("'tensors' is not an object");
    for (const auto& [name, v] : j["tensors"].items()) {
      TensorExpectation e;
      if (!v.is_object() || !v.contains("shape") || !v["shape"].is_array()) return fail("'tensors." + name + "' has no 'shape' list");
      for (const auto& d : v["shape"]) {
        if (!d.is_number_integer() || d.get<std::int64_t>() < -1 || d.get<std::int64_t>() == 0)
          return fail("'tensors." + name + ".shape' holds " + d.dump() + "; sizes are positive, or -1 for any size");
        e.shape.push_back(d.get<std::int64_t>());
      }
      if (v.contains("with_latents")) {
        if (!v["with_latents"].is_boolean()) return fail("'tensors." + name + ".with_latents' must be true or false");
        e.with_latents = v["with_latents"].get<bool>();
      }
      r.tensors[name] = e;
    }
  }
  return r;
}

void apply_row_inputs(DataOptions& o, const RowInputs& in, const std::string& who) {
  if (in.audio) {
    if (o.audio.explicit_format && (o.audio.sample_rate != in.audio->sample_rate || o.audio.channels != in.audio->channels))
      throw UsageError("data.audio_sample_rate / data.audio_channels = " + std::to_string(o.audio.sample_rate) + " Hz, " +
                       std::to_string(o.audio.channels) + " channel(s), but " + who + " takes audio at " +
                       std::to_string(in.audio->sample_rate) + " Hz, " + std::to_string(in.audio->channels) +
                       " channel(s); remove the keys (the model's rate is used)");
    o.audio = *in.audio;
  }
  for (const auto& [name, e] : in.tensors) {
    auto it = o.tensor_shapes.find(name);
    if (it != o.tensor_shapes.end() && it->second.shape != e.shape)
      throw UsageError("data.tensor_shapes: '" + name + "' is " + expectation_str(it->second.shape) + " but " + who + " expects " +
                       expectation_str(e.shape) + "; remove the entry");
    o.tensor_shapes[name] = e;
  }
}

}  // namespace yeto::data
