// `yeto-host report RUN_DIR`: writes the run report (RUN_DIR/report/index.html and its plots)
// from what a finished or interrupted run left in RUN_DIR. `train` writes it at its end too.
#include <cstdio>

#include "app/commands.hpp"
#include "report/report.hpp"

namespace yeto::app {
namespace {

int run_report(CommandContext& ctx) {
  const report::ReportFiles files = report::write_report(ctx.positionals().at(0));
  std::printf("report: %s\n", files.index.string().c_str());
  for (const auto& p : files.images) std::printf("  %s\n", p.string().c_str());
  return 0;
}

}  // namespace

void register_report_command(Registry& r) {
  Command c;
  c.name = "report";
  c.summary = "Write a run's report: RUN_DIR/report/index.html with loss, learning-rate and throughput plots.";
  c.description =
      "Reads RUN_DIR and writes RUN_DIR/report/: index.html, a self-contained page (inline CSS, no script, opens "
      "from disk) with the run's configuration summary, a table of the key numbers and the plots, and the plots as "
      "PNG images: loss.png (loss and val_loss per step), lr.png (learning rate), throughput.png (samples/s). For an "
      "embedded run (`train --islands N`) every plot has one line per island (RUN_DIR/island-<i>/metrics.jsonl), "
      "and merges.png (the syncer's merges over time, with how many islands each merged) and traffic.png (bytes "
      "each island sent and received against a float32 ring all-reduce, both directions) are added, with the final "
      "cut and who acknowledged it. Validation renders listed in samples/index.jsonl appear as a grid, one row per "
      "prompt and one column per step. A resumed run's repeated steps are drawn once. `train` writes this report "
      "when it finishes; run the command to write it again (for example while a run is still going).";
  c.positionals = "RUN_DIR";
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run = run_report;
  r.add(std::move(c));
}

}  // namespace yeto::app
