// `yeto-host cache`: precomputes latents and text conditioning for a dataset with the run's
// model (Pipeline::open), into a cache dataset (cache_builder.hpp), with progress on the log.
#include <charconv>
#include <cstring>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "app/commands.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"
#include "pipeline/cache_encoder.hpp"
#include "pipeline/pipeline.hpp"
#include "runtime/torch_runtime.hpp"

namespace yeto::app {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using data::build_cache;
using data::CacheProgress;
using data::CacheRunOptions;
using data::CacheRunStats;
using data::DataOptions;
using data::data_options;
using data::kCacheContractFile;
using data::Manifest;
using data::read_cache_index;
using data::read_manifest;
using data::resolve_source;
using data::ResolvedSource;

std::string duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%lldh%02lldm%02llds", s / 3600, (s / 60) % 60, s % 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%llds", s);
  return buf;
}

std::int64_t positive(const CommandContext& ctx, const std::string& option) {
  const std::string v = ctx.value(option);
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < 1)
    throw UsageError("--" + option + ": expected a positive integer, got '" + v + "'");
  return out;
}

int run_cache(CommandContext& ctx) {
  if (!ctx.has("output")) throw UsageError("cache: --output CACHE_DIR (the cache dataset to write or update) is required");
  const config::Config& cfg = ctx.config();
  if (cfg.get_string("model.id").empty()) throw UsageError("cache: --model (model.id) is required: the model whose encoders make the cache");
  DataOptions data = data_options(cfg);
  const ResolvedSource source = resolve_source(data);
  const fs::path out = fs::absolute(ctx.value("output")).lexically_normal();
  std::error_code ec;
  if (fs::equivalent(out, source.root(), ec))
    throw UsageError("cache: --output " + out.string() + " is the dataset's own directory; write the cache elsewhere");

  runtime::configure_threads(static_cast<int>(cfg.get_int("run.threads")));
  auto pipe = pipeline::Pipeline::open(cfg);
  // What the model's plugin declares of its rows (e.g. the sound of video rows), as training reads them.
  std::string declared_by;
  data::apply_row_inputs(data, pipeline::declared_row_inputs(*pipe, &declared_by), declared_by);
  const Manifest manifest = read_manifest(source, data);
  pipeline::CacheEncoderOptions eo;
  eo.seed = static_cast<std::uint64_t>(cfg.get_int("diffusion.seed"));
  auto encoder = pipeline::make_cache_encoder(*pipe, eo);

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

data::RowInputs read_declared_inputs(const config::Config& cfg, std::string* from) {
  pipeline::OpenOptions open;
  open.plan_only = true;
  open.load_weights = false;
  open.prepare = false;
  const auto p = pipeline::Pipeline::open(cfg, open);
  return pipeline::declared_row_inputs(*p, from);
}

void register_cache_command(Registry& r) {
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
  c.run = run_cache;
  r.add(std::move(c));
}

}  // namespace yeto::app
