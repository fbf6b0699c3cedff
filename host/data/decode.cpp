#include "data/decode.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "data/audio.hpp"
#include "data/image.hpp"
#include "data/resize.hpp"

namespace yeto::data {

namespace {

ShapeKey latent_shape_from_tensor(const std::vector<std::int64_t>& dims_in, const Row& row) {
  std::vector<std::int64_t> dims = dims_in;
  if (dims.size() == 5 && dims[0] == 1) dims.erase(dims.begin());
  ShapeKey k;
  k.latent = true;
  if (dims.size() == 3) {
    k.height = dims[1];
    k.width = dims[2];
  } else if (dims.size() == 4) {
    k.frames = dims[1];
    k.height = dims[2];
    k.width = dims[3];
  } else if (dims.size() == 2) {  // packed sequence latents [tokens, channels]
    k.height = dims[0];
    k.width = dims[1];
  } else {
    throw Error(row_message(row, "cached latents have shape " + shape_str(dims_in) +
                                     "; expected [C, H, W] or [C, F, H, W] (or declare latent_height/latent_width)"),
                ExitCode::bad_input);
  }
  return k;
}

void add_tensor(Sample& s, const std::string& name, const TensorRef& ref, const Row& row, DecodeDepth depth) {
  try {
    TensorInfo info = probe_tensor(ref);
    if (info.known) s.tensor_info[name] = info;
    // .pt/.pth data needs LibTorch (yeto_data_torch loads it); their header was checked above.
    const std::string ext = ref.is_inline ? "" : lower_extension(ref.path);
    const bool torch_file = ext == ".pt" || ext == ".pth";
    if (depth == DecodeDepth::full && info.known && !torch_file) s.tensors[name] = read_tensor_raw(ref);
    else if (torch_file || !info.known) s.deferred[name] = ref;
  } catch (const Error& e) {
    throw Error(row_message(row, "cached tensor '" + name + "' (" + ref.describe() + "): " + e.what()), e.code());
  }
}

// Where a row's sound comes from: its own audio file, else its video's sound track.
const std::filesystem::path& audio_source(const Row& row, const DataOptions& o) {
  if (!row.audio_path.empty()) return row.audio_path;
  if (row.media != MediaKind::video)
    throw Error("data.audio is on and a frames row has no sound: name its sound file in the '" + o.columns.audio + "' field",
                ExitCode::bad_input);
  return row.media_path;
}

// The row's sound over exactly the frames `clip` shows, as the float32 tensor "audio"
// [channels, samples]: from the first frame's timestamp to the last one's plus one frame.
// Padded frames (a clip shorter than its sample) get silence, like their repeated picture.
void add_audio(Sample& s, const Row& row, const Clip& clip, const DataOptions& o, const MediaLimits& limits) {
  const auto& src = audio_source(row, o);
  if (!(clip.source_fps > 0.0))
    throw Error(src.string() + ": the video declares no frame rate, so the sound of its frames cannot be located; give the row "
                "its rate ('fps') or re-mux the video",
                ExitCode::bad_input);
  double real = 0.0;
  const AudioWindow w = frames_window(clip.selection, clip.source_fps, o.fps, &real);
  const int rate = o.audio.sample_rate, channels = o.audio.channels;
  const std::int64_t total = audio_samples(w.duration, rate);
  const Audio a = decode_audio(src, {rate, channels}, {w.start, real}, limits);
  const std::int64_t have = std::min(a.samples, total);
  RawTensor t;
  t.dtype = "float32";
  t.shape = {channels, total};
  t.bytes.assign(static_cast<std::size_t>(channels * total) * sizeof(float), '\0');
  for (int c = 0; c < channels; ++c)
    std::memcpy(t.bytes.data() + static_cast<std::size_t>(c * total) * sizeof(float),
                a.pcm.data() + static_cast<std::size_t>(c) * static_cast<std::size_t>(a.samples),
                static_cast<std::size_t>(have) * sizeof(float));
  s.tensor_info["audio"] = {t.dtype, t.shape, true};
  s.tensors["audio"] = std::move(t);
  s.source += ", audio " + a.source.codec + " " + std::to_string(a.source.sample_rate) + " Hz x" + std::to_string(a.source.channels) +
              " from " + std::to_string(w.start).substr(0, 5) + " s";
}

// A cached tensor against what the model expects of it (data.tensor_shapes or the plugin's
// declaration): the same rank, and the same size wherever the expectation is not -1.
void check_expectation(const std::string& name, const std::vector<std::int64_t>& shape, const TensorExpectation& e) {
  bool ok = shape.size() == e.shape.size();
  for (std::size_t i = 0; ok && i < shape.size(); ++i) ok = e.shape[i] < 0 || e.shape[i] == shape[i];
  if (!ok)
    throw Error("tensor '" + name + "' has shape " + shape_str(shape) + " but the model expects " + expectation_str(e.shape) +
                    " per row (-1: any size); re-encode it for this model or fix the row",
                ExitCode::bad_input);
}

}  // namespace

MediaLimits limits_of(const DataOptions& o) { return {o.max_pixels, o.max_frames}; }

// ---- decode budget ----

struct DecodeBudget::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::uint64_t in_use = 0, peak = 0;
  std::uint64_t next_ticket = 0, serving = 0;  // arrival order: no row waits for ever
};

DecodeBudget::DecodeBudget() : state_(std::make_unique<State>()) {}
DecodeBudget::~DecodeBudget() = default;

DecodeBudget& DecodeBudget::process() {
  static DecodeBudget b;
  return b;
}

DecodeBudget::Lease DecodeBudget::reserve(std::uint64_t bytes, std::uint64_t capacity) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  const std::uint64_t ticket = s.next_ticket++;
  s.cv.wait(lock, [&] { return s.serving == ticket && (s.in_use == 0 || s.in_use + bytes <= capacity); });
  ++s.serving;
  s.in_use += bytes;
  s.peak = std::max(s.peak, s.in_use);
  s.cv.notify_all();
  return Lease(this, bytes);
}

DecodeBudget::Lease::~Lease() {
  if (!budget_) return;
  State& s = *budget_->state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.in_use -= bytes_;
  }
  s.cv.notify_all();
}

std::uint64_t DecodeBudget::in_use() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->in_use;
}
std::uint64_t DecodeBudget::peak() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->peak;
}
void DecodeBudget::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->peak = state_->in_use;
}

namespace {
// Peak bytes of decoding one source picture of w x h: the decoder's buffer (up to 4 channels of
// 16 bits) and its RGB conversion.
std::uint64_t picture_bytes(std::int64_t w, std::int64_t h) { return static_cast<std::uint64_t>(w * h) * (8 + 3); }
}  // namespace

ShapeKey shape_of(const Row& row, const DataOptions& o) {
  if (row.media == MediaKind::latents) {
    auto meta = [&](const char* k) -> std::optional<std::int64_t> {
      auto it = row.latent_meta.find(k);
      return it == row.latent_meta.end() ? std::nullopt : std::optional<std::int64_t>(it->second);
    };
    if (row.height && row.width) return {false, row.frames.value_or(1), *row.height, *row.width};
    if (meta("latent_height") && meta("latent_width"))
      return {true, meta("latent_frames").value_or(1), *meta("latent_height"), *meta("latent_width")};
    TensorInfo info;
    try {
      info = probe_tensor(*row.latents);
    } catch (const Error& e) {
      throw Error(row_message(row, "cached latents (" + row.latents->describe() + "): " + e.what()), e.code());
    }
    if (!info.known)
      throw Error(row_message(row, "the shape of cached latents in " + row.latents->describe() +
                                       " is only known after loading; declare latent_height and latent_width (and latent_frames) in the row, "
                                       "or store them as .safetensors/.npy"),
                  ExitCode::bad_input);
    return latent_shape_from_tensor(info.shape, row);
  }
  ShapeKey k;
  k.frames = row.media == MediaKind::image ? 1 : row.frames.value_or(o.num_frames);
  k.height = row.height.value_or(o.height);
  k.width = row.width.value_or(o.width);
  return k;
}

Sample decode_row(const Row& row, std::size_t index, const DataOptions& o, DecodeDepth depth) {
  Sample s;
  s.row = index;
  s.kind = row.media;
  s.shape = shape_of(row, o);
  if (row.prompt) {
    s.prompt = *row.prompt;
    s.has_prompt = true;
  }
  const MediaLimits limits = limits_of(o);
  const int w = static_cast<int>(s.shape.width), h = static_cast<int>(s.shape.height);
  try {
    switch (row.media) {
      case MediaKind::image: {
        const std::string what = row.inline_image.empty() ? row.media_path.string() : "inline image";
        // The file is read once: its header sizes the decode budget, then the same bytes decode.
        const std::string file = row.inline_image.empty() ? read_media_file(row.media_path) : std::string();
        const std::string_view bytes = row.inline_image.empty() ? std::string_view(file) : std::string_view(row.inline_image);
        const ImageInfo info = probe_image(bytes, what, limits.max_pixels);
        if (depth == DecodeDepth::header) {
          s.source = std::to_string(info.width) + "x" + std::to_string(info.height) + " " + std::to_string(info.channels) + "ch" +
                     (info.sixteen_bit ? " 16-bit" : "");
          break;
        }
        const auto lease = DecodeBudget::process().reserve(
            picture_bytes(info.width, info.height) + static_cast<std::uint64_t>(w) * h * 3, o.decode_memory);
        const Image img = decode_image(bytes, what, limits.max_pixels);
        s.source = std::to_string(img.width) + "x" + std::to_string(img.height);
        s.pixels.resize(static_cast<std::size_t>(w) * h * 3);
        resize_rgb(img.rgb.data(), img.width, img.height, s.pixels.data(), w, h, o.resize_mode);
        break;
      }
      case MediaKind::video: {
        if (depth == DecodeDepth::header) {
          const VideoInfo info = probe_video(row.media_path, limits);
          s.source = info.codec + " " + std::to_string(info.width) + "x" + std::to_string(info.height) + " " +
                     std::to_string(info.fps).substr(0, 5) + " fps ~" + std::to_string(info.declared_frames) + " frames";
          if (o.audio.enabled) {
            const AudioInfo a = probe_audio(audio_source(row, o), limits);
            s.source += ", audio " + a.codec + " " + std::to_string(a.sample_rate) + " Hz";
          }
          break;
        }
        const ClipTarget t{w, h, o.resize_mode, s.shape.frames, o.fps};
        // Reserved once the reader has the stream's size, before any frame is decoded; the
        // decoder keeps a few reference frames besides the one being converted.
        std::optional<DecodeBudget::Lease> lease;
        Clip clip = decode_video_clip(row.media_path, t, limits, [&](int source_width, int source_height) {
          lease.emplace(DecodeBudget::process().reserve(
              4 * picture_bytes(source_width, source_height) + static_cast<std::uint64_t>(s.shape.frames) * w * h * 3,
              o.decode_memory));
        });
        s.source = std::to_string(clip.source_frames) + " frames at " + std::to_string(clip.source_fps).substr(0, 5) + " fps" +
                   (clip.selection.padded ? ", " + std::to_string(clip.selection.padded) + " padded" : "");
        if (o.audio.enabled) add_audio(s, row, clip, o, limits);
        s.pixels = std::move(clip.rgb);
        break;
      }
      case MediaKind::frames: {
        if (depth == DecodeDepth::header) {
          if (static_cast<std::int64_t>(row.frame_paths.size()) > limits.max_frames)
            throw Error("frame list has " + std::to_string(row.frame_paths.size()) + " images, above data.max_frames = " +
                            std::to_string(limits.max_frames),
                        ExitCode::bad_input);
          for (const auto& f : row.frame_paths) probe_image_file(f, limits.max_pixels);
          s.source = std::to_string(row.frame_paths.size()) + " frame images";
          if (o.audio.enabled) probe_audio(audio_source(row, o), limits);
          break;
        }
        const ClipTarget t{w, h, o.resize_mode, s.shape.frames, o.fps};
        const ImageInfo first = row.frame_paths.empty() ? ImageInfo{} : probe_image_file(row.frame_paths.front(), limits.max_pixels);
        const auto lease = DecodeBudget::process().reserve(
            picture_bytes(first.width, first.height) + static_cast<std::uint64_t>(s.shape.frames) * w * h * 3,
            o.decode_memory);
        Clip clip = decode_frame_list(row.frame_paths, row.fps, t, limits);
        s.source = std::to_string(clip.source_frames) + " frame images" +
                   (clip.selection.padded ? ", " + std::to_string(clip.selection.padded) + " padded" : "");
        if (o.audio.enabled) add_audio(s, row, clip, o, limits);
        s.pixels = std::move(clip.rgb);
        break;
      }
      case MediaKind::latents:
        break;
      case MediaKind::none:
        throw Error("row has no media", ExitCode::bad_input);
    }
  } catch (const Error& e) {
    throw Error(row_message(row, e.what()), e.code());
  }
  if (row.latents) add_tensor(s, "latents", *row.latents, row, depth);
  if (row.prompt_embeds) add_tensor(s, "prompt_embeds", *row.prompt_embeds, row, depth);
  if (row.attention_mask) add_tensor(s, "prompt_attention_mask", *row.attention_mask, row, depth);
  if (row.pooled_embeds) add_tensor(s, "pooled_prompt_embeds", *row.pooled_embeds, row, depth);
  for (const auto& [name, ref] : row.tensors) add_tensor(s, name, ref, row, depth);
  for (const auto& [name, e] : o.tensor_shapes) {
    if (e.with_latents && row.media == MediaKind::latents && !s.tensor_info.count(name) && !s.deferred.count(name))
      throw Error(row_message(row, "the row has cached latents but no '" + name + "', which the model needs with them (shape " +
                                       expectation_str(e.shape) + "); add it to the row, or give the row its raw media"),
                  ExitCode::bad_input);
    auto it = s.tensor_info.find(name);
    if (it == s.tensor_info.end()) continue;
    try {
      check_expectation(name, it->second.shape, e);
    } catch (const Error& err) {
      throw Error(row_message(row, err.what()), err.code());
    }
  }
  return s;
}

}  // namespace yeto::data
