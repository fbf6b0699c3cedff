// `yeto-host train --islands 2` end to end: the embedded syncer and two real learner islands
// training the tiny Flux repository (tests/fixtures/repos/flux-tiny) on a generated dataset.
// Checks the tape (merges with both islands), the terminal handshake (both islands end with
// LoRA weights bit-identical to the syncer's final cut and acknowledged) and the summary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "dataset.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string run_toml(int steps, const std::string& sync_extra = "") {
  return yeto::learner::test::tiny_flux_islands_toml(steps, sync_extra);
}

// The float32 tensors of a safetensors file, concatenated in sorted-name (canonical) order.
std::string canonical_bytes(const fs::path& file) {
  const std::string s = yeto::read_file(file);
  std::uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  const json h = json::parse(s.substr(8, n));
  std::map<std::string, std::pair<std::size_t, std::size_t>> spans;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t["dtype"], "F32") << name;
    spans[name] = {t["data_offsets"][0].get<std::size_t>(), t["data_offsets"][1].get<std::size_t>()};
  }
  std::string out;
  for (const auto& [name, o] : spans) out += s.substr(8 + n + o.first, o.second - o.first);
  return out;
}

TEST(TrainIslands, TwoFluxIslandsMergeAndEndOnTheFinalCut) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  dir.write("run.toml", run_toml(8));
  const fs::path run = dir / "run";
  const auto r = yeto::test::run_host(
      {"train", "--islands", "2", "--config", (dir / "run.toml").string(), "--output", run.string()});
  auto logs = [&] {
    std::string s = r.all();
    for (const char* f : {"syncer/syncer.log", "island-0/learner.log", "island-1/learner.log"})
      if (fs::exists(run / f)) s += std::string("\n==== ") + f + "\n" + yeto::read_file(run / f);
    return s;
  };
  ASSERT_EQ(r.exit_code, 0) << logs();
  EXPECT_NE(r.out.find("outer steps merged"), std::string::npos) << r.out;
  std::cout << r.out;

  std::set<std::string> merged;
  std::size_t merges = 0;
  std::string reason;
  for (const auto& rec : yeto::sync::read_tape_records(run / "syncer" / "tape.jsonl")) {
    if (rec["event"] == "merge") {
      ++merges;
      for (const auto& l : rec["learners"]) merged.insert(l.get<std::string>());
    }
    if (rec["event"] == "final_cut") reason = rec["reason"];
  }
  EXPECT_GE(merges, 4u) << logs();
  EXPECT_EQ(merged, (std::set<std::string>{"island-0", "island-1"}));
  EXPECT_EQ(reason, "learners_done");

  const json fin = json::parse(yeto::read_file(run / "syncer" / "final.json"));
  EXPECT_EQ(fin["acked"].size(), 2u) << fin.dump();
  EXPECT_TRUE(fin["missing"].empty()) << fin.dump();
  const std::string cut = yeto::read_file(run / "syncer" / "final_cut.bin");
  ASSERT_GT(cut.size(), 0u);
  for (const char* island : {"island-0", "island-1"}) {
    ASSERT_TRUE(fs::exists(run / island / "lora.safetensors")) << logs();
    EXPECT_TRUE(canonical_bytes(run / island / "lora.safetensors") == cut) << island;
  }
  const json s = json::parse(yeto::read_file(run / "summary.json"));
  EXPECT_EQ(s["island_exits"], json::array({0, 0}));
  for (const auto& i : s["per_island"]) {
    EXPECT_EQ(i["steps"], 8) << s.dump();
    EXPECT_TRUE(i["final_digest_matches"].get<bool>()) << s.dump();
  }
  EXPECT_GT(s["allreduce_over_total"].get<double>(), 1.0) << s.dump();
  EXPECT_GT(s["bytes_received_total"].get<double>(), 0) << s.dump();
  EXPECT_NE(r.out.find("traffic of the islands, sent + received:"), std::string::npos) << r.out;

  // The run report, written when the run ended and named in the summary.
  const fs::path index = run / "report" / "index.html";
  EXPECT_NE(r.out.find("  report: " + index.string()), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(index)) << r.out;
  const std::string html = yeto::read_file(index);
  for (const char* png : {"loss.png", "lr.png", "throughput.png", "merges.png", "traffic.png"}) {
    EXPECT_NE(html.find(std::string("src=\"") + png + "\""), std::string::npos) << png;
    EXPECT_GT(fs::file_size(run / "report" / png), 1000u) << png;
  }
  EXPECT_NE(html.find("<td data-key=\"island-1.final_step\">8</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td data-key=\"final_cut_reason\">learners_done</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td data-key=\"acknowledged\">island-0, island-1</td>"), std::string::npos) << html;
}

// The syncer's budget ends the run long before train.max_steps: both islands stop on the
// cut, overwrite their weights from it, acknowledge and save the cut as their adapter.
TEST(TrainIslands, TheSyncerBudgetEndsBothIslandsOnTheFinalCut) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  dir.write("run.toml", yeto::learner::test::tiny_flux_islands_toml(400, "budget_outer_steps = 4\n", "[validation]\nsplit = 0.25\n"));
  const fs::path run = dir / "run";
  const auto r = yeto::test::run_host(
      {"train", "--islands", "2", "--config", (dir / "run.toml").string(), "--output", run.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json s = json::parse(yeto::read_file(run / "summary.json"));
  EXPECT_EQ(s["final_cut"]["reason"], "budget_outer_steps") << s.dump();
  EXPECT_EQ(s["outer_steps_merged"], 4) << s.dump();
  EXPECT_EQ(s["final"]["acked"].size(), 2u) << s.dump();
  const std::string cut = yeto::read_file(run / "syncer" / "final_cut.bin");
  for (const char* island : {"island-0", "island-1"}) {
    ASSERT_TRUE(fs::exists(run / island / "lora.safetensors")) << r.all();
    EXPECT_TRUE(canonical_bytes(run / island / "lora.safetensors") == cut) << island;
  }
  for (const auto& i : s["per_island"]) EXPECT_LT(i["steps"].get<int>(), 400) << s.dump();
  // Each island evaluates the held-out rows on the final cut it ends on, as its last record.
  for (const char* island : {"island-0", "island-1"}) {
    std::istringstream lines(yeto::read_file(run / island / "metrics.jsonl"));
    json last;
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) last = json::parse(line);
    ASSERT_TRUE(last.contains("val_loss_final_cut")) << island << ": " << last.dump();
    EXPECT_TRUE(std::isfinite(last["val_loss_final_cut"].get<double>())) << last.dump();
  }
}

// Islands of two ranks each (train.island_ranks = 2, ddp): the launcher starts four learner
// processes with the torchrun variables; each island is one learner to the syncer, its rank 1
// trains its own shard and ends on the same cut without ever talking to the syncer.
TEST(TrainIslands, IslandsOfTwoRanksTrainDdpAndEndOnTheFinalCut) {
  yeto::test::TempDir dir;
  yeto::learner::test::write_dataset(dir / "data", 12, {}, 32);
  // 24 steps: four rank processes start less evenly than two, and an island that reached
  // max_steps before the other joined would end the run alone (learners_done).
  dir.write("run.toml", run_toml(24));
  const fs::path run = dir / "run";
  const auto r = yeto::test::run_host({"train", "--islands", "2", "--island-ranks", "2", "--shard", "ddp", "--config",
                                       (dir / "run.toml").string(), "--output", run.string()});
  auto logs = [&] {
    std::string all = r.all();
    for (const char* f : {"syncer/syncer.log", "island-0/learner.log", "island-0/learner-rank1.log",
                          "island-1/learner.log", "island-1/learner-rank1.log"})
      if (fs::exists(run / f)) all += std::string("\n==== ") + f + "\n" + yeto::read_file(run / f);
    return all;
  };
  ASSERT_EQ(r.exit_code, 0) << logs();
  const json s = json::parse(yeto::read_file(run / "summary.json"));
  EXPECT_EQ(s["island_exits"], json::array({0, 0}));
  EXPECT_EQ(s["final"]["acked"].size(), 2u) << s.dump();
  std::set<std::string> learners;
  for (const auto& rec : yeto::sync::read_tape_records(run / "syncer" / "tape.jsonl"))
    if (rec["event"] == "join" || rec["event"] == "merge")
      for (const auto& l : rec["learners"]) learners.insert(l.get<std::string>());
  EXPECT_EQ(learners, (std::set<std::string>{"island-0", "island-1"}));
  const std::string cut = yeto::read_file(run / "syncer" / "final_cut.bin");
  for (const char* island : {"island-0", "island-1"}) {
    ASSERT_TRUE(fs::exists(run / island / "lora.safetensors")) << r.all();
    EXPECT_TRUE(canonical_bytes(run / island / "lora.safetensors") == cut) << island;
    const std::string rank1 = yeto::read_file(run / island / "learner-rank1.log");
    EXPECT_NE(rank1.find("rank 1 of 2"), std::string::npos) << rank1;
    EXPECT_NE(rank1.find(std::string("learner ") + island + " rank 1: 24 steps"), std::string::npos) << rank1;
    EXPECT_NE(rank1.find("ended on the final cut"), std::string::npos) << rank1;
    // Both ranks' samples count: one rank alone sees at most micro batch 2 x 24 steps = 48.
    std::string last;
    std::istringstream in(yeto::read_file(run / island / "metrics.jsonl"));
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) last = l;
    EXPECT_EQ(json::parse(last)["step"], 24) << last;
    EXPECT_GT(json::parse(last)["samples"].get<int>(), 48) << last;
  }
}

}  // namespace
