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

DeclaredInputsReader& declared_inputs_reader() {
  static DeclaredInputsReader reader;
  return reader;
}

int run_data(CommandContext& ctx) {
  if (ctx.positionals().empty() || ctx.positionals()[0] != "check")
    throw UsageError("yeto-host data: expected the subcommand 'check' (yeto-host data check --config run.toml | --data PATH)");
  const config::Config& cfg = ctx.config();
  data::DataOptions options = data::data_options(cfg);
  data::CheckOptions check;
  check.depth = ctx.has("quick") ? data::DecodeDepth::header : data::DecodeDepth::full;
  check.model_id = cfg.get_string("model.id");
  // With a model, rows are checked for what it declares (audio, cached tensor shapes) as
  // training will; a model that cannot be opened leaves data.* alone, with a warning.
  data::RowInputs inputs;
  std::string from, unread;
  if (!check.model_id.empty() && declared_inputs_reader()) {
    try {
      inputs = declared_inputs_reader()(cfg, &from);
    } catch (const Error& e) {
      unread = "model.id = \"" + check.model_id + "\": what the model declares of its rows could not be read (" + e.what() +
               "); rows were checked with data.* alone";
    }
  }
  data::apply_row_inputs(options, inputs, from);
  data::CheckReport report = data::check_dataset(options, check);
  if (!unread.empty()) report.warnings.push_back(unread);
  if (!inputs.empty()) report.warnings.insert(report.warnings.begin(), "rows checked for what " + from + " declares: " + [&] {
    std::string what;
    if (inputs.audio)
      what += "audio at " + std::to_string(inputs.audio->sample_rate) + " Hz, " + std::to_string(inputs.audio->channels) +
              " channel(s)";
    for (const auto& [name, e] : inputs.tensors) what += (what.empty() ? "" : "; ") + name + " " + data::expectation_str(e.shape);
    return what;
  }());
  // The held-out set is checked with the same preprocessing and reported on its own; either
  // failing fails the command.
  std::optional<data::CheckReport> validation;
  if (auto v = data::validation_data_options(cfg)) {
    data::apply_row_inputs(*v, inputs, from);
    validation = data::check_dataset(*v, check);
  }
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

void register_data_command(Registry& r, DeclaredInputsReader declared_inputs) {
  declared_inputs_reader() = std::move(declared_inputs);
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
      "--json); a problem in either fails the command. With model.id set, the model's plugin is asked (without "
      "loading weights) what it needs of its rows -- e.g. each video row's sound at its sample rate, or cached tensors "
      "such as audio latents of a given shape -- and rows are checked for that, as training will.";
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
