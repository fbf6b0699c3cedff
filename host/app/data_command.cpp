// The `data` command of yeto-host: `data check` validates a dataset without training.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "data/check.hpp"
#include "data/options.hpp"

namespace yeto::app {
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
  // The held-out set is checked with the same preprocessing and reported on its own; either
  // failing fails the command.
  std::optional<data::CheckReport> validation;
  if (const auto v = data::validation_data_options(cfg)) validation = data::check_dataset(*v, check);
  if (ctx.has("json")) {
    nlohmann::json j = report.json();
    if (validation) j["validation"] = validation->json();
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << report.text();
    if (validation) std::cout << "\nvalidation.data:\n" << validation->text();
  }
  if (report.exit_code() != 0) return report.exit_code();
  return validation ? validation->exit_code() : 0;
}

}  // namespace

void register_data_command(Registry& r) {
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
      "usable) or if a cache dataset's yeto_diffusion_cache.json does not match the run. When validation.data is set, "
      "the held-out dataset is checked the same way and reported after the training data (under \"validation\" with "
      "--json); a problem in either fails the command.";
  c.positionals = "check";
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run_config = true;
  c.options = {{"json", "", "Print the report as JSON."},
               {"quick", "", "Check headers, budgets and paths only; do not decode pixels."}};
  c.run = run_data;
  r.add(std::move(c));
}

}  // namespace yeto::app
