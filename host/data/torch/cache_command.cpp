// `yeto-host cache`: precomputes latents and text conditioning for a dataset with the run's
// model (Pipeline::open), into a cache dataset (cache_builder.hpp), with progress on the log.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <charconv>
#include <cstring>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"
#include "data/torch/batch.hpp"
#include "data/torch/pipeline_cache.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "runtime/torch_runtime.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

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

class PipelineEncoder final : public CacheEncoder {
 public:
  PipelineEncoder(pipeline::Pipeline& p, const PipelineEncoderOptions& o) : p_(p), o_(o) {
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
    const std::string plugin = "plugin '" + p_.loaded_plugin().manifest.name + "'";

    // Raw media, one encode_media call per shape within the batch.
    std::map<std::pair<MediaKind, ShapeKey>, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (!batch[i].pixels.empty()) groups[{batch[i].kind, batch[i].shape}].push_back(i);
    for (const auto& [key, members] : groups) {
      if (!p_.plugin().has(YETO_CAP_ENCODE_MEDIA))
        throw Error("cache: " + plugin + " has no encode_media hook, so raw media cannot be cached; give the rows cached latents",
                    ExitCode::not_available);
      std::vector<at::Tensor> pixels;
      std::vector<std::vector<NamedTensor>*> dest;
      for (std::size_t i : members) {
        pixels.push_back(pixels_to_tensor(batch[i]));
        dest.push_back(&out[i]);
      }
      const json options = {{"sample", o_.sample_latents}, {"seed", o_.seed}};
      const auto result = p_.plugin().encode_media({{"pixel_values", at::stack(pixels)}}, options.dump());
      bool latents = false;
      for (const auto& [name, t] : result) {
        split_rows(name, t, static_cast<std::int64_t>(members.size()), plugin + " encode_media", dest);
        latents = latents || name == "latents";
      }
      if (!latents) throw Error("cache: " + plugin + " encode_media returned no \"latents\" tensor", ExitCode::failure);
    }

    // Prompts, one encode_conditioning call for the batch.
    json prompts = json::array();
    std::vector<std::vector<NamedTensor>*> dest;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (batch[i].has_prompt) {
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
        if (!has(name)) out[i].push_back({name, raw.dtype, raw.shape, raw.bytes});
      for (const auto& [name, ref] : batch[i].deferred)
        if (!has(name)) out[i].push_back(to_named(name, load_tensor_file(ref), ref.describe()));
    }
    return out;
  }

 private:
  pipeline::Pipeline& p_;
  PipelineEncoderOptions o_;
};

std::string duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%lldh%02lldm%02llds", s / 3600, (s / 60) % 60, s % 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%llds", s);
  return buf;
}

std::int64_t positive(const cli::CommandContext& ctx, const std::string& option) {
  const std::string v = ctx.value(option);
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < 1)
    throw UsageError("--" + option + ": expected a positive integer, got '" + v + "'");
  return out;
}

int run_cache(cli::CommandContext& ctx) {
  if (!ctx.has("output")) throw UsageError("cache: --output CACHE_DIR (the cache dataset to write or update) is required");
  const config::Config& cfg = ctx.config();
  if (cfg.get_string("model.id").empty()) throw UsageError("cache: --model (model.id) is required: the model whose encoders make the cache");
  const DataOptions data = data_options(cfg);
  const ResolvedSource source = resolve_source(data);
  const Manifest manifest = read_manifest(source, data);
  const fs::path out = fs::absolute(ctx.value("output")).lexically_normal();
  std::error_code ec;
  if (fs::equivalent(out, source.root(), ec))
    throw UsageError("cache: --output " + out.string() + " is the dataset's own directory; write the cache elsewhere");

  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  auto pipe = pipeline::Pipeline::open(cfg);
  PipelineEncoderOptions eo;
  eo.seed = static_cast<std::uint64_t>(cfg.get_int("diffusion.seed"));
  auto encoder = make_pipeline_encoder(*pipe, eo);

  CacheRunOptions run;
  run.out_dir = out;
  run.data = data;
  run.rows_per_shard = cfg.get_int("data.cache_rows_per_shard");
  run.batch_size = cfg.get_int("data.cache_batch_size");
  if (ctx.has("max-rows")) run.max_rows = positive(ctx, "max-rows");
  spdlog::info("cache: {} rows from {} with {} into {}", manifest.total_rows, source.manifest.string(), pipe->model_id(),
               out.string());
  const CacheRunStats stats = build_cache(manifest, *encoder, run, [](const CacheProgress& p) {
    if (p.starting) {
      spdlog::info("cache: {} rows to encode, {} already valid", p.total, p.skipped);
      return;
    }
    spdlog::info("cache: {}/{} rows encoded ({:.0f}%), {:.2f} rows/s, ETA {}", p.done, p.total,
                 p.total > 0 ? 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total) : 100.0, p.rows_per_second,
                 duration(p.eta_seconds));
  });
  for (const auto& e : stats.errors) spdlog::warn("cache: skipped {}", e);
  const auto index = read_cache_index(out);
  if (ctx.has("json")) {
    std::cout << json{{"output", out.string()},
                      {"computed", stats.computed},
                      {"skipped", stats.skipped},
                      {"failed", stats.failed},
                      {"remaining", stats.remaining},
                      {"rows", stats.rows},
                      {"errors", stats.errors}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "cache: " << stats.computed << " rows encoded, " << stats.skipped << " already valid, " << stats.failed
              << " failed";
    if (stats.remaining > 0) std::cout << ", " << stats.remaining << " left for a later run (--max-rows)";
    std::cout << "\ncache: " << out.string() << " holds " << stats.rows << " rows (" << kCacheContractFile << ")\n";
  }
  return 0;
}

}  // namespace

CacheProfile pipeline_cache_profile(const pipeline::Pipeline& pipeline, const DataOptions& options) {
  CacheProfile p = preprocessing_profile(options);
  p.model_id = pipeline.model_id();
  p.model_commit = pipeline.model_commit();
  p.components = pipeline.component_hashes();
  return p;
}

CacheProfile validate_cache_for_pipeline(const fs::path& dir, const pipeline::Pipeline& pipeline, const DataOptions& options) {
  return validate_cache_contract(dir, pipeline_cache_profile(pipeline, options));
}

std::unique_ptr<CacheEncoder> make_pipeline_encoder(pipeline::Pipeline& pipeline, const PipelineEncoderOptions& options) {
  return std::make_unique<PipelineEncoder>(pipeline, options);
}

}  // namespace yeto::data

namespace yeto::cli {

void register_cache_commands(Registry& r) {
  Command c;
  c.name = "cache";
  c.summary = "Precompute latents and text embeddings for a dataset.";
  c.description =
      "Loads the run's model (--model, with its family plugin) and encodes every usable row of data.path: raw images and "
      "videos through the plugin's encode_media (\"latents\"), prompts through encode_conditioning (its named "
      "conditioning tensors, e.g. prompt_embeds and pooled_prompt_embeds for Flux); cached tensors a row already has are "
      "kept. The result in --output is a cache dataset: safetensors shards, index.jsonl, manifest.jsonl (so data.path "
      "can point at it) and yeto_diffusion_cache.json, the contract a training run checks against its model, component "
      "hashes and data.* preprocessing. Each row is fingerprinted by its source files' content, the model's component "
      "hashes and the preprocessing settings: a re-run encodes only rows that are new or changed, and an interrupted "
      "run resumes after its last completed shard (data.cache_rows_per_shard rows each). Bad rows follow "
      "data.on_bad_row. Progress with rate and ETA goes to the log.";
  c.run_config = true;
  c.options = {{"output", "CACHE_DIR", "The cache dataset to write or update (required)."},
               {"max-rows", "N", "Encode at most N rows in this run; a later run continues."},
               {"json", "", "Print the run's counts as JSON."}};
  c.run = data::run_cache;
  r.add(std::move(c));
}

}  // namespace yeto::cli
