#include "data/options.hpp"

#include "config/config.hpp"

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

}  // namespace yeto::data
