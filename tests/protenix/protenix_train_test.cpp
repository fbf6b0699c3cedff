// The protenix family end to end through yeto-host on its tiny init-model preset: training on
// generated pre-collated batches through the learner's full-step path (the diffusion loss falls),
// export and the exported adapter reloaded into the model, two islands through the syncer, bad
// batches refused naming the row, and a released-layout .pt checkpoint read weights-only (one
// with a pickled code object refused).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "structure/structure.hpp"
#include "protenix_cases.hpp"
#include "protenix_diffusion.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace px = yeto::protenix;
using nlohmann::json;

namespace {

void init_tiny(const fs::path& out) {
  const auto r = yeto::test::run_host({"init-model", "--family", "protenix", "--preset", "tiny", "--seed", "3", "--out",
                                       out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
}

// One pre-collated batch of the tiny preset's widths: 6 tokens of 3 atoms (the last token a
// ligand), ground truth on a helix of phase k, trunk outputs seeded by k; atom 4 unresolved (mask 0,
// coordinates NaN, as a batch may carry them).
std::map<std::string, torch::Tensor> make_batch(int k) {
  torch::manual_seed(300 + k);
  const std::int64_t T = 6, A = 3, N = T * A;
  const auto tok = torch::arange(T).repeat_interleave(A);
  const auto i = torch::arange(N, torch::kFloat);
  auto coord = torch::stack({4 * torch::cos(0.6 * i + k), 4 * torch::sin(0.6 * i + k), 1.5 * i}, -1);
  auto centre = torch::zeros({T, 3}).index_add(0, tok, coord) / A;
  std::map<std::string, torch::Tensor> b;
  const std::string f = "input_feature_dict.";
  b[f + "ref_pos"] = coord - centre.index_select(0, tok) + 0.1 * torch::randn({N, 3});
  b[f + "ref_charge"] = torch::zeros({N});
  b[f + "ref_mask"] = torch::ones({N});
  b[f + "ref_element"] = torch::one_hot(torch::full({N}, 5, torch::kLong), 128).to(torch::kFloat);  // carbon: Z - 1
  auto chars = torch::zeros({N, 4, 64});
  for (std::int64_t a = 0; a < N; ++a) {
    chars[a][0]['C' - 32] = 1;
    chars[a][1][static_cast<std::int64_t>('1' + a % A) - 32] = 1;
    chars[a][2][0] = 1;
    chars[a][3][0] = 1;
  }
  b[f + "ref_atom_name_chars"] = chars;
  b[f + "ref_space_uid"] = tok;
  b[f + "atom_to_token_idx"] = tok;
  b[f + "asym_id"] = torch::tensor({0, 0, 0, 0, 0, 1});
  b[f + "residue_index"] = torch::tensor({1, 2, 3, 4, 5, 1});
  b[f + "entity_id"] = torch::tensor({0, 0, 0, 0, 0, 1});
  b[f + "token_index"] = torch::arange(T);
  b[f + "sym_id"] = torch::zeros({T}, torch::kLong);
  b[f + "is_dna"] = torch::zeros({N});
  b[f + "is_rna"] = torch::zeros({N});
  b[f + "is_ligand"] = (tok == T - 1).to(torch::kFloat);
  b[f + "bond_mask"] = torch::zeros({N, N});
  b["s_inputs"] = torch::randn({T, 20});
  b["s_trunk"] = torch::randn({T, 24});
  b["z_trunk"] = torch::randn({T, T, 16});
  auto mask = torch::ones({N});
  mask[4] = 0;
  coord[4] = std::nan("");
  b["label_dict.coordinate"] = coord;
  b["label_dict.coordinate_mask"] = mask;
  return b;
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_TRUE(f) << p;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size()) << p;
  std::fclose(f);
}

// The manifest row naming every tensor of batch file `file` (its ground truth as the row's media).
json manifest_row(const std::string& file, const std::map<std::string, torch::Tensor>& batch) {
  json tensors = json::object();
  for (const auto& [name, t] : batch) tensors[name] = file + "#" + name;
  return {{"latents", file + "#label_dict.coordinate"}, {"prompt", ""}, {"tensors", tensors}};
}

// `structures` batches, `copies` rows each, in dir/train.jsonl; `edit` changes every batch first.
void write_rows(const fs::path& dir, int structures, int copies,
                const std::function<void(std::map<std::string, torch::Tensor>&)>& edit = {}) {
  fs::create_directories(dir);
  std::string manifest;
  for (int k = 0; k < structures; ++k) {
    auto b = make_batch(k);
    if (edit) edit(b);
    const auto file = "batch" + std::to_string(k) + ".safetensors";
    yeto::io::save_safetensors(dir / file, {b.begin(), b.end()});
    for (int c = 0; c < copies; ++c) manifest += manifest_row(file, b).dump() + "\n";
  }
  write_file(dir / "train.jsonl", manifest);
}

std::string train_toml(const fs::path& repo, int steps, const std::string& extra = "") {
  yeto::test::TinyLoraRun run{repo.string(), "protenix"};
  run.validation_rows = 3;
  run.steps = steps;
  run.micro_batch_size = 1;
  run.checkpoint_every = 1000;
  run.learning_rate = "0.05";
  return run.toml() + extra;
}

// A zip archive as Python's torch.save writes one, around the pickle program `pickle`.
void write_archive(const fs::path& file, const std::vector<char>& pickle, const std::vector<at::Tensor>& tensors) {
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), tensors, writer);
  writer.writeEndOfFile();
  write_file(file, bytes);
}

// A released checkpoint's layout: torch.save({"model": {"module.diffusion_module.<name>": ...}}).
void write_release_checkpoint(const fs::path& file, const std::map<std::string, torch::Tensor>& weights) {
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& [n, t] : weights) state.insert("module.diffusion_module." + n, t);
  state.insert("module.pairformer_stack.blocks.0.weight", torch::zeros({2}));  // the trunk: not read
  c10::Dict<std::string, c10::Dict<std::string, torch::Tensor>> root;
  root.insert("model", state);
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(root));
  pickler.stop();
  write_archive(file, pickle, pickler.tensorData());
}

}  // namespace

TEST(ProtenixTrain, TinyPresetTrainsOnGeneratedBatchesAndExports) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  const auto index = json::parse(yeto::test::read_text(repo / "model_index.json"));
  EXPECT_EQ(index.at("diffusion_module"), json::array({"protenix", "ProtenixDiffusionModule"}));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", 3, 4));
  tmp.write("run.toml", train_toml(repo, 40));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", 40, "protenix tiny", 0.85,
                                                            yeto::test::read_text(tmp / "run" / "metrics.jsonl")));
  EXPECT_EQ(yeto::test::metric_series(tmp / "run", "model/mse_loss").size(), 40u);
  EXPECT_EQ(yeto::test::metric_series(tmp / "run", "model/smooth_lddt_loss").size(), 40u);

  // LoRA auto: linear_q/k/v/o/g of the 4 blocks (1 atom encoder, 2 token, 1 atom decoder).
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  int b_total = 0, b_moved = 0;
  for (const auto& [name, t] : lora) {
    EXPECT_EQ(name.rfind("diffusion_module.", 0), 0u) << name;
    EXPECT_NE(name.find(".attention_pair_bias.attention.linear_"), std::string::npos) << name;
    if (name.find("lora_B") == std::string::npos) continue;
    ++b_total;
    b_moved += t.abs().max().item<double>() > 0;
  }
  EXPECT_EQ(b_total, 20);
  EXPECT_EQ(b_moved, b_total);

  // Export, then the exported PEFT file reloaded into the tiny model: the same layers, the same
  // values, and a different denoiser output than the base model's.
  const auto e = yeto::test::export_adapter(tmp / "run", tmp / "adapter");
  ASSERT_EQ(e.exit_code, 0) << e.all();
  const auto exported = yeto::io::load_safetensors(tmp / "adapter" / "pytorch_lora_weights.safetensors");
  ASSERT_EQ(exported.size(), lora.size());
  for (const auto& [name, t] : lora) {
    ASSERT_TRUE(exported.count(name)) << name;
    EXPECT_TRUE(torch::equal(exported.at(name), t)) << name;
  }
  auto model = px::DiffusionModule(
      px::DiffusionConfig::from_json(json::parse(yeto::test::read_text(repo / "diffusion_module" / "config.json"))));
  yeto::nn::load_named_tensors(*model,
                               yeto::io::load_safetensors(repo / "diffusion_module" / "diffusion_pytorch_model.safetensors"));
  model->eval();
  const auto batch = make_batch(0);
  std::map<std::string, torch::Tensor> feats(batch.begin(), batch.end());
  const auto in = px::diffusion_inputs(feats, "input_feature_dict.");
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 18, 3}) * 10;
  const auto t = torch::tensor({3.0f, 12.0f});
  const auto base = model->forward(x, t, in);
  yeto::nn::LoraConfig cfg;
  cfg.r = 4;
  cfg.alpha = 4;
  const auto loaded = yeto::nn::load_lora_state_dict(*model, exported, cfg, "default", "diffusion_module.");
  EXPECT_EQ(loaded.size(), 20u);
  const auto adapted = model->forward(x, t, in);
  const double moved = (adapted - base).abs().max().item<double>();
  EXPECT_GT(moved, 1e-6);
  for (auto& [path, layer] : yeto::nn::lora_capable_layers(*model))
    if (layer->has_adapter("default")) layer->merge();
  EXPECT_TRUE(torch::allclose(model->forward(x, t, in), adapted, 1e-4, 1e-4));

  // Sampling the base + exported adapter writes mmCIF and PDB that the host's parsers read back:
  // every atom of the batch (18; its one ligand token's atoms as HETATM), one model per sample.
  const auto fold = tmp / "fold.cif";
  const auto sr = yeto::test::run_host({"sample", "--model", repo.string(), "--diffusion-adapter", "protenix",
                                        "--adapter-dir", (tmp / "adapter").string(), "--prompt",
                                        (tmp / "data" / "batch0.safetensors").string(), "--output", fold.string(),
                                        "--structure-format", "both", "--seed", "5"});
  ASSERT_EQ(sr.exit_code, 0) << sr.all();
  for (const auto& file : {fold, tmp / "fold.pdb"}) {
    const yeto::structure::Structure st = yeto::structure::read_structure(file);
    EXPECT_EQ(st.atoms.size(), 18u) << file;
    ASSERT_GE(st.models.size(), 1u) << file;
    std::size_t hetero = 0;
    for (const auto& a : st.atoms) hetero += a.hetero;
    EXPECT_EQ(hetero, 3u) << file;
    for (const auto& m : st.models)
      for (const auto& xyz : m)
        for (const auto v : xyz) EXPECT_TRUE(std::isfinite(v)) << file;
  }
}

TEST(ProtenixTrain, BadBatchesAreRefusedNamingTheRow) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  struct Bad {
    std::string name;
    std::function<void(std::map<std::string, torch::Tensor>&)> edit;
    std::vector<std::string> expect;
  };
  const std::vector<Bad> cases = {
      {"missing", [](auto& b) { b.erase("input_feature_dict.ref_charge"); b.erase("s_trunk"); },
       {"protenix: row ", "missing input_feature_dict.ref_charge, s_trunk", "pre-collated Protenix batch"}},
      {"shape", [](auto& b) { b["s_trunk"] = torch::randn({6, 23}); },
       {"protenix: row ", "'s_trunk' must be [N_token, 24], got [6, 23]"}},
      {"nan", [](auto& b) { b["label_dict.coordinate"][2][1] = std::nan(""); },
       {"protenix: row ", "resolved atom(s) with NaN or infinite coordinates (first: atom 2)",
        "set label_dict.coordinate_mask to 0"}},
  };
  for (const auto& c : cases) {
    const auto dir = tmp / c.name;
    ASSERT_NO_FATAL_FAILURE(write_rows(dir / "data", 1, 4, c.edit));
    write_file(dir / "run.toml", train_toml(repo, 2));
    const auto r = yeto::test::train(dir / "run.toml", dir / "run");
    EXPECT_NE(r.exit_code, 0) << c.name;
    for (const auto& want : c.expect) EXPECT_NE(r.all().find(want), std::string::npos) << c.name << ": " << r.all();
    const auto all = r.all();
    const auto at = all.find("protenix: row ");
    if (at != std::string::npos) std::printf("  %s: %s\n", c.name.c_str(), all.substr(at, all.find('\n', at) - at).c_str());
  }
}

// Two islands through the syncer, with micro batches of two rows (equal shapes stack).
TEST(ProtenixTrain, TwoIslandsTrainTheTinyPreset) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", 2, 3));
  tmp.write("run.toml",
            "[run]\nthreads = 1\n[model]\nid = \"" + repo.string() +
                "\"\nadapter = \"protenix\"\nprecision = \"fp32\"\n"
                "[data]\npath = \"data/train.jsonl\"\nworkers = 1\n[lora]\nr = 4\nalpha = 4.0\n"
                "[train]\nmax_steps = 8\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
                "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\nwarmup_steps = 1\n[diffusion]\nseed = 5\n"
                "[sync]\nfragments = 2\ninner_steps = 2\nquorum = 2\nheartbeat_s = 0.2\nlearner_timeout_s = 3\n"
                "grace_max_s = 4\nround_deadline_s = 8\nreconnect_budget_s = 30\nfinal_timeout_s = 10\n");
  const fs::path run = tmp / "run";
  std::size_t merges = 0;
  ASSERT_NO_FATAL_FAILURE(yeto::test::train_two_islands(tmp / "run.toml", run, 8, &merges));
  const auto a = yeto::io::load_safetensors(run / "island-0" / "lora.safetensors");
  const auto b = yeto::io::load_safetensors(run / "island-1" / "lora.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  std::printf("  two protenix islands: %zu merges\n", merges);
}

// A directory holding a released checkpoint (no model_index.json): the diffusion module's tensors
// are read weights-only under model.module.diffusion_module. (the trunk's are skipped), with the
// directory's config.json and scheduler_config.json over the family's defaults; the run sees the
// weights of the repository they came from (the same first val_loss). A checkpoint whose pickle
// calls a code object (builtins.exec) is refused before anything runs, naming the file.
TEST(ProtenixTrain, ReleasedCheckpointIsReadWeightsOnly) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", 1, 4));
  const auto release = tmp / "release";
  ASSERT_NO_FATAL_FAILURE(write_release_checkpoint(
      release / "protenix_tiny_v1.pt",
      yeto::io::load_safetensors(repo / "diffusion_module" / "diffusion_pytorch_model.safetensors")));
  auto config = json::parse(yeto::test::read_text(repo / "diffusion_module" / "config.json"));
  write_file(release / "config.json", config.dump());
  // The tiny preset's training settings over the defaults (4 copies instead of 48): both runs draw
  // the same training copies.
  const std::string sched = R"({"N_sample": 4, "N_step": 20})";
  write_file(release / "scheduler_config.json", sched);

  auto run = [&](const fs::path& model, const std::string& name, const std::map<std::string, std::string>& env = {}) {
    write_file(tmp / (name + ".toml"), train_toml(model, 1));
    return yeto::test::run_host({"train", "--config", (tmp / (name + ".toml")).string(), "--output",
                                 (tmp / name).string()},
                                "", env);
  };
  auto r = run(repo, "from-repo");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = run(release, "from-release");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("protenix: released checkpoint"), std::string::npos) << r.all();
  const auto a = yeto::test::metric_series(tmp / "from-repo", "val_loss", true);
  const auto b = yeto::test::metric_series(tmp / "from-release", "val_loss", true);
  ASSERT_TRUE(a.count(0) && b.count(0));
  EXPECT_DOUBLE_EQ(a.at(0), b.at(0));

  // The same checkpoint named by YETO_PROTENIX_CHECKPOINT from an otherwise empty directory.
  fs::create_directories(tmp / "empty");
  write_file(tmp / "empty" / "config.json", config.dump());
  write_file(tmp / "empty" / "scheduler_config.json", sched);
  r = run(tmp / "empty", "from-env", {{"YETO_PROTENIX_CHECKPOINT", (release / "protenix_tiny_v1.pt").string()}});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_DOUBLE_EQ(yeto::test::metric_series(tmp / "from-env", "val_loss", true).at(0), a.at(0));

  // builtins.exec("pass") as the whole archive's object: refused, and nothing ran.
  const std::string program = std::string("\x80\x02" "cbuiltins\nexec\n" "X\x04\x00\x00\x00pass" "\x85" "R.", 29);
  const auto evil = tmp / "evil";
  write_archive(evil / "protenix_evil.pt", std::vector<char>(program.begin(), program.end()), {});
  write_file(evil / "config.json", config.dump());
  write_file(evil / "scheduler_config.json", sched);
  r = run(evil, "from-evil");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("protenix_evil.pt"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("builtins"), std::string::npos) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "from-evil" / "lora.safetensors"));
  const auto all = r.all();
  const auto at = all.find("[error]");
  if (at != std::string::npos) std::printf("  %s\n", all.substr(at, all.find('\n', at) - at).c_str());
}

// tuning.mode = "full" (the experiment): every DiffusionModule parameter trains except the frozen
// Fourier noise embedding.
TEST(ProtenixTrain, FullTuningTrainsTheDiffusionModule) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data", 1, 4));
  tmp.write("run.toml", train_toml(repo, 3, "[tuning]\nmode = \"full\"\n"));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  // The run's trained tensors: the module's own parameters under their Protenix names, moved.
  const auto trained = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  const auto base = yeto::io::load_safetensors(repo / "diffusion_module" / "diffusion_pytorch_model.safetensors");
  EXPECT_EQ(trained.size(), base.size() - 2);
  std::size_t moved = 0;
  for (const auto& [name, t] : base) {
    const auto it = trained.find("diffusion_module." + name);
    if (name.find("fourier_embedding") != std::string::npos) {
      EXPECT_TRUE(it == trained.end()) << name;
      continue;
    }
    ASSERT_TRUE(it != trained.end()) << name;
    moved += !torch::equal(it->second, t);
  }
  EXPECT_GT(moved, base.size() / 2);
}
