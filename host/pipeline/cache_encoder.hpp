// The model side of cache datasets: the CacheEncoder that `yeto-host cache` drives (a loaded
// pipeline's family plugin: pixels -> encode_media -> "latents", prompts ->
// encode_conditioning -> its named conditioning tensors) and the profile a run trained on a
// cache must match (model id/commit, the pipeline's component hashes, data.* preprocessing).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "data/cache_builder.hpp"
#include "data/cache_contract.hpp"
#include "data/options.hpp"

namespace yeto::pipeline {

class Pipeline;

// What a cache made with `pipeline` under `options` records (tensors excluded: those are
// outputs, compared only when the caller adds them).
data::CacheProfile cache_profile(const Pipeline& pipeline, const data::DataOptions& options);

// Checks the cache dataset in `dir` (its yeto_diffusion_cache.json) against the run: throws
// yeto::Error (bad_input) naming every differing field -- model.id, model.commit,
// components.<name>, preprocessing.<setting> -- and what to do; not_found when `dir` holds
// no contract. Returns the cache's profile (with its tensor dtypes/shapes).
data::CacheProfile validate_cache(const std::filesystem::path& dir, const Pipeline& pipeline,
                                  const data::DataOptions& options);

// What the pipeline's plugin declares of its rows (its plan's "inputs": audio, expected cached
// tensor shapes; see plugin.h load_pipeline), empty when it declares nothing. *from is set to
// who declared them, for messages ("the model's plugin (NAME)"). Throws yeto::Error
// (bad_input) naming the plugin when the declaration is malformed.
data::RowInputs declared_row_inputs(const Pipeline& pipeline, std::string* from);

struct CacheEncoderOptions {
  bool sample_latents = false;  // encode_media {"sample": ...}: false takes the distribution's mean
  std::uint64_t seed = 0;       // encode_media {"seed": ...}
};

// Encodes raw media and prompts with the pipeline's plugin hooks; cached tensors a row
// already has are passed through unchanged. Every tensor is stored per row (the batch
// dimension removed), on CPU, in the dtype the plugin returned. Throws not_available when the
// plugin has neither encode_media nor encode_conditioning.
std::unique_ptr<data::CacheEncoder> make_cache_encoder(Pipeline& pipeline, const CacheEncoderOptions& options);

}  // namespace yeto::pipeline
