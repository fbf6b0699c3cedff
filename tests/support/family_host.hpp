// Scaffolding the family plugins' yeto-host tests share: the staged signed plugin, check-parity
// over fixture cases, the refusal of an unsigned copy, a tiny LoRA run configuration, training
// and its val_loss, export, metrics.jsonl series, and a two-island run. Header-only: it uses the test target's
// YETO_BUILD_DIR. Helpers that ASSERT are void; wrap them in ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"

namespace yeto::test {

// Where the build stages its signed plugins.
inline std::filesystem::path stage_plugins() { return std::filesystem::path(YETO_BUILD_DIR) / "stage" / "plugins"; }

// <plugin>.so, .yeto.json and .yeto.sig are staged and `plugins verify` accepts the library; the
// manifest (.yeto.json) is returned in *manifest when given.
inline void verify_staged_plugin(const std::string& plugin, nlohmann::json* manifest = nullptr) {
  const auto dir = stage_plugins();
  for (const auto& f : {plugin + ".so", plugin + ".yeto.json", plugin + ".yeto.sig"})
    ASSERT_TRUE(std::filesystem::exists(dir / f)) << (dir / f);
  const auto r = run_host({"plugins", "verify", (dir / (plugin + ".so")).string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  if (manifest) *manifest = nlohmann::json::parse(read_text(dir / (plugin + ".yeto.json")));
}

// `check-parity <dirs...> --json [extra...]` exits 0; its "cases" array goes to *cases.
inline void run_check_parity(const std::vector<std::filesystem::path>& dirs, nlohmann::json* cases,
                             const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"check-parity"};
  for (const auto& d : dirs) args.push_back(d.string());
  args.push_back("--json");
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_host(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  *cases = nlohmann::json::parse(r.out).at("cases");
}

// check-parity of the named cases under `dir`: each is supported and passes, each comparison is
// within its tolerance, and every key of its case.json "compare" (but those in `not_compared`)
// was compared. Prints each case's worst max_abs / atol.
inline void expect_parity_cases(const std::filesystem::path& dir, const std::vector<std::string>& names,
                                const std::vector<std::string>& extra = {},
                                const std::set<std::string>& not_compared = {}) {
  std::vector<std::filesystem::path> dirs;
  for (const auto& n : names) dirs.push_back(dir / n);
  nlohmann::json cases;
  ASSERT_NO_FATAL_FAILURE(run_check_parity(dirs, &cases, extra));
  ASSERT_EQ(cases.size(), names.size());
  for (const auto& c : cases) {
    const auto name = c.at("case").get<std::string>();
    EXPECT_TRUE(c.at("supported").get<bool>()) << c.dump(1);
    EXPECT_TRUE(c.at("pass").get<bool>()) << c.dump(1);
    const auto case_json = nlohmann::json::parse(read_text(dir / name / "case.json"));
    std::set<std::string> compared;
    double worst = 0.0;
    for (const auto& cmp : c.at("comparisons")) {
      EXPECT_TRUE(cmp.at("pass").get<bool>()) << name << ": " << cmp.dump();
      compared.insert(cmp.at("name").get<std::string>());
      const double atol = cmp.at("atol").get<double>(), err = cmp.at("max_abs").get<double>();
      if (atol > 0) worst = std::max(worst, err / atol);
    }
    for (const auto& [key, _] : case_json.at("compare").items()) {
      if (not_compared.count(key)) continue;
      EXPECT_TRUE(compared.count(key)) << name << ": '" << key << "' was not compared";
    }
    std::printf("  %s: %zu outputs compared, worst max_abs / atol %.3g\n", name.c_str(), compared.size(), worst);
  }
}

// A copy of the plugin without its signature, found through plugins.dirs, is refused (exit 20,
// "unsigned") before `args` (a sample command writing `out`) writes anything. With
// then_signed_loads, the signature is copied next to it and the same command succeeds.
inline void expect_unsigned_copy_refused(const std::string& plugin, std::vector<std::string> args,
                                         const std::filesystem::path& out, const TempDir& tmp,
                                         bool then_signed_loads = false) {
  namespace fs = std::filesystem;
  const auto dir = stage_plugins();
  fs::create_directories(tmp / "plugins");
  fs::copy_file(dir / (plugin + ".so"), tmp / ("plugins/" + plugin + ".so"));
  fs::copy_file(dir / (plugin + ".yeto.json"), tmp / ("plugins/" + plugin + ".yeto.json"));
  args.insert(args.end(), {"--set", "plugins.dirs=" + (tmp / "plugins").string()});
  const auto r = run_host(args);
  EXPECT_EQ(r.exit_code, 20) << r.all();
  EXPECT_NE(r.all().find("unsigned"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(out));
  if (!then_signed_loads) return;
  fs::copy_file(dir / (plugin + ".yeto.sig"), tmp / ("plugins/" + plugin + ".yeto.sig"));
  const auto ok = run_host(args);
  EXPECT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_TRUE(fs::exists(out));
}

// The run.toml of a tiny single-process LoRA run (r 4, alpha 4, AdamW lr, no weight decay, one
// warm-up step, validation split 0.25) on the dataset at data/train.jsonl.
struct TinyLoraRun {
  std::string model;    // [model] id
  std::string adapter;  // [model] adapter (the plugin)
  int max_sequence_length = 16;
  std::string data = "height = 32\nwidth = 32\n";  // [data] keys between path and workers
  int validation_rows = 8;
  int steps = 40;
  int micro_batch_size = 3;
  int checkpoint_every = 20;
  std::string learning_rate = "0.01";
  int seed = 5;
  std::string timestep_sampling = "logit-normal";

  std::string toml() const {
    return "[run]\nthreads = 1\n"
           "[model]\nid = \"" + model + "\"\nadapter = \"" + adapter + "\"\nprecision = \"fp32\"\n"
           "max_sequence_length = " + std::to_string(max_sequence_length) + "\n"
           "[data]\npath = \"data/train.jsonl\"\n" + data + "workers = 1\n"
           "[validation]\nsplit = 0.25\nmax_rows = " + std::to_string(validation_rows) + "\n"
           "[lora]\nr = 4\nalpha = 4.0\n"
           "[train]\nmax_steps = " + std::to_string(steps) + "\nmicro_batch_size = " +
           std::to_string(micro_batch_size) + "\ncheckpoint_every = " + std::to_string(checkpoint_every) + "\n"
           "[optimizer]\nlearning_rate = " + learning_rate + "\nweight_decay = 0.0\nwarmup_steps = 1\n"
           "[diffusion]\nseed = " + std::to_string(seed) + "\ntimestep_sampling = \"" + timestep_sampling + "\"\n";
  }
};

// `train --config <config> --output <run_dir>`.
inline ProcessResult train(const std::filesystem::path& config, const std::filesystem::path& run_dir) {
  return run_host({"train", "--config", config.string(), "--output", run_dir.string()});
}

// `export --checkpoint <run_dir> --output-dir <out_dir> [extra...]`.
inline ProcessResult export_adapter(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"export", "--checkpoint", run_dir.string(), "--output-dir", out_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_host(args);
}

// step -> value of `field` from RUN_DIR/metrics.jsonl (numbers_only: lines whose value is not a
// number are skipped; otherwise such a value throws).
inline std::map<std::int64_t, double> metric_series(const std::filesystem::path& run_dir, const std::string& field,
                                                    bool numbers_only = false) {
  std::map<std::int64_t, double> out;
  std::istringstream in(read_text(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(field) && (!numbers_only || j.at(field).is_number()))
      out[j.at("step").get<std::int64_t>()] = j.at(field).get<double>();
  }
  return out;
}

// val_loss is recorded at step 0 and `steps`; prints "  <label> val_loss A -> B (ratio R)<suffix>"
// and expects B < max_ratio * A. `context` is shown when either fails.
inline void expect_val_loss_drops(const std::filesystem::path& run_dir, int steps, const std::string& label,
                                  double max_ratio, const std::string& context, const std::string& suffix = "") {
  const auto val = metric_series(run_dir, "val_loss", true);
  ASSERT_TRUE(val.count(0) && val.count(steps)) << context;
  std::printf("  %s val_loss %.4f -> %.4f (ratio %.3f)%s\n", label.c_str(), val.at(0), val.at(steps),
              val.at(steps) / val.at(0), suffix.c_str());
  EXPECT_LT(val.at(steps), max_ratio * val.at(0)) << context;
}

// `yeto-host train --islands 2 --config config --output run`, then what every family's two-island
// test expects: exit 0, at least two merges, both islands in them, both islands exited 0 after
// `steps` steps and hold the syncer's final cut (the run's logs shown when a check fails). Sets
// *merges to the merge count.
inline void train_two_islands(const std::filesystem::path& config, const std::filesystem::path& run, int steps,
                              std::size_t* merges) {
  const auto r = run_host({"train", "--islands", "2", "--config", config.string(), "--output", run.string()});
  auto logs = [&] {
    std::string s = r.all();
    for (const char* f : {"syncer/syncer.log", "island-0/learner.log", "island-1/learner.log"})
      if (std::filesystem::exists(run / f)) s += std::string("\n==== ") + f + "\n" + read_text(run / f);
    return s;
  };
  ASSERT_EQ(r.exit_code, 0) << logs();
  std::set<std::string> merged;
  *merges = 0;
  for (const auto& rec : yeto::sync::read_tape_records(run / "syncer" / "tape.jsonl"))
    if (rec["event"] == "merge") {
      ++*merges;
      for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
    }
  EXPECT_GE(*merges, 2u) << logs();
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"})) << logs();
  const auto summary = nlohmann::json::parse(read_text(run / "summary.json"));
  EXPECT_EQ(summary["island_exits"], nlohmann::json::array({0, 0})) << summary.dump();
  for (const auto& i : summary["per_island"]) {
    EXPECT_EQ(i["steps"], steps) << summary.dump();
    EXPECT_TRUE(i["final_digest_matches"].get<bool>()) << summary.dump();
  }
}

}  // namespace yeto::test
