// The `data` command of yeto-host: `data check` validates a dataset without training.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "data/check.hpp"
#include "data/options.hpp"

namespace yeto::cli {
namespace {

int run_data(CommandContext& ctx) {
  if (ctx.positionals().empty() || ctx.positionals()[0] != "check")
    throw UsageError("yeto-host data: expected the subcommand 'check' (yeto-host data check --config run.toml | --data PATH)");
  const config::Config& cfg = ctx.config();
  const data::DataOptions options = data::data_options(cfg);
  data::CheckOptions check;
  check.depth = ctx.has("quick") ? data::DecodeDepth::header : data::DecodeDepth::full;
  check.model_id = cfg.get_string("model.id");
  const data::CheckReport report = data::check_dataset(options, check);
  if (ctx.has("json")) std::cout << report.json().dump(2) << "\n";
  else std::cout << report.text();
  return report.exit_code();
}

}  // namespace

void register_data_commands(Registry& r) {
  Command c;
  c.name = "data";
  c.summary = "Validate a dataset without training (data check).";
  c.description =
      "`data check` reads the dataset that data.path (or --data PATH) names -- a JSON/JSONL manifest, a directory "
      "holding one, or an org/name dataset id in the hub cache at data.revision -- and decodes every row as training "
      "would: images and videos are decoded and resized to data.height x data.width (data.resize_mode), videos sampled "
      "to data.num_frames at data.fps, cached tensors read. It prints the rows, media kinds, the decoded shapes per "
      "bucket, the cached-tensor shapes and every bad row with its row number (the line for JSONL) and the reason. "
      "Exit status 30 if any row is unusable under data.on_bad_row = \"error\" (with \"skip\": only if no row is "
      "usable) or if a cache dataset's yeto_diffusion_cache.json does not match the run.";
  c.positionals = "check";
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run_config = true;
  c.options = {{"json", "", "Print the report as JSON."},
               {"quick", "", "Check headers, budgets and paths only; do not decode pixels."}};
  c.run = run_data;
  r.add(std::move(c));
}

}  // namespace yeto::cli
