// The data.* settings of a run, read once from the resolved configuration so the rest of the
// pipeline never looks keys up by string.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace yeto::config {
class Config;
}

namespace yeto::data {

enum class ResizeMode { stretch, center_crop };
enum class BadRowPolicy { error, skip };

struct Columns {
  std::string image = "image";
  std::string video = "video";
  std::string latents = "latents";
  std::string prompt = "prompt";
  std::string prompt_embeds = "prompt_embeds";
  std::string attention_mask = "prompt_attention_mask";
  std::string pooled_embeds = "pooled_prompt_embeds";
  std::string audio = "audio";
};

// The sound of video rows, when the model takes it (data.audio, or the plugin's declared
// inputs): the row's `audio` file, else its video's sound track, resampled and cut to the
// time span of the frames the row's sample shows. Handed over as the float32 tensor "audio"
// [channels, samples].
struct AudioInput {
  bool enabled = false;
  int sample_rate = 16000;
  int channels = 1;
  bool explicit_format = false;  // data.audio_sample_rate or data.audio_channels set by the user
};

// What a model expects of a cached tensor: its shape per row (without the batch dimension),
// -1 for any size; with `with_latents`, a row of cached latents must carry it too.
struct TensorExpectation {
  std::vector<std::int64_t> shape;
  bool with_latents = false;
};

// The row inputs a model's plugin declares (the "inputs" object of its load_pipeline plan):
//   {"audio": {"sample_rate": 16000, "channels": 1},
//    "tensors": {"<name>": {"shape": [-1, 128], "with_latents": true}}}
// Both parts are optional.
struct RowInputs {
  std::optional<AudioInput> audio;
  std::map<std::string, TensorExpectation> tensors;
  bool empty() const { return !audio && tensors.empty(); }
};

struct DataOptions {
  std::string source;                // data.path as written (path or org/name)
  std::string source_key = "data.path";  // the key that named it, for messages
  std::filesystem::path source_base;  // directory a relative data.path resolves from
  std::string revision = "main";
  std::string format = "auto";
  std::filesystem::path hub_cache;   // model.hub_cache (empty: environment default)
  Columns columns;
  std::int64_t height = 512;
  std::int64_t width = 512;
  ResizeMode resize_mode = ResizeMode::center_crop;
  std::int64_t num_frames = 1;
  double fps = 0.0;
  bool bucket_by_shape = false;
  BadRowPolicy on_bad_row = BadRowPolicy::error;
  bool allow_path_escape = false;
  std::int64_t max_pixels = 64LL << 20;
  std::int64_t max_frames = 4096;
  int workers = 2;
  int prefetch = 4;
  std::uint64_t decode_memory = 1024ull << 20;  // data.decode_memory_mb, see DecodeBudget
  std::uint64_t seed = 0;
  std::int64_t micro_batch_size = 1;
  AudioInput audio;
  std::map<std::string, TensorExpectation> tensor_shapes;  // data.tensor_shapes + declared ones
};

// Reads data.*, model.hub_cache, diffusion.seed and train.micro_batch_size ("auto" -> 1).
DataOptions data_options(const config::Config& cfg);

// The held-out dataset validation.data names, read with the same preprocessing and row
// policy as data.path (a relative path resolves from the file that set validation.data).
// Empty when validation.data is not set.
std::optional<DataOptions> validation_data_options(const config::Config& cfg);

const char* resize_mode_name(ResizeMode m);

// Parses a plugin's declared inputs; throws yeto::Error (bad_input) naming `who` and the key
// when the object is malformed. A null or absent value declares nothing.
RowInputs parse_row_inputs(const nlohmann::json& inputs, const std::string& who);

// Lays a declaration over options read from the configuration: a declared audio input turns
// audio on at the declared rate and channels; declared tensor shapes join data.tensor_shapes.
// Throws yeto::Error (usage) when data.audio_sample_rate / data.audio_channels or a
// data.tensor_shapes entry, set explicitly, contradict what the model declares.
void apply_row_inputs(DataOptions& options, const RowInputs& inputs, const std::string& who);

// "[-1, 128]" style text of an expected shape.
std::string expectation_str(const std::vector<std::int64_t>& shape);

}  // namespace yeto::data
