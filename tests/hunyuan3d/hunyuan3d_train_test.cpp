// The hunyuan3d family end to end through yeto-host on its tiny init-model preset: training on
// generated rows (cached shape latents + image tokens) through the generic learner's full-step
// path, two islands, export and its reload by sample, and sampling (from image tokens or from an
// image through the DINOv2 conditioner) to GLB / OBJ meshes read back by our GLB reader and by
// Python's struct module.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "mesh/mesh.hpp"
#include "support/family_host.hpp"
#include "support/glb_check.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "sync/tape.hpp"

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kAccept = {"--set", "plugins.accept_licenses=[\"hunyuan3d\"]"};
const char* kAcceptToml = "[plugins]\naccept_licenses = [\"hunyuan3d\"]\n";

yeto::test::ProcessResult host(std::vector<std::string> args) {
  args.insert(args.end(), kAccept.begin(), kAccept.end());
  return yeto::test::run_host(args);
}

// init-model --family hunyuan3d --preset tiny into `out`.
void init_tiny(const fs::path& out) {
  const auto r = host({"init-model", "--family", "hunyuan3d", "--preset", "tiny", "--seed", "3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
}

// The conditioning tokens of shape class k [16, 24] (the tiny preset's text_len x context_dim).
torch::Tensor class_tokens(int k) {
  torch::manual_seed(100 + k);
  return torch::randn({16, 24});
}

// Generated training rows: three shape classes, four rows each; a row's latents [64, 8] are its
// class's latent vector on every token plus a little noise (the DiT has no positional embedding:
// its tokens are a set, so a class is learnable from the image tokens only up to the tokens'
// order), its image tokens its class's tokens.
void write_rows(const fs::path& dir) {
  fs::create_directories(dir);
  std::string manifest;
  for (int k = 0; k < 3; ++k) {
    torch::manual_seed(200 + k);
    const auto shape = torch::randn({1, 8}).expand({64, 8});
    yeto::io::save_safetensors(dir / ("cond" + std::to_string(k) + ".safetensors"), {{"image_embeds", class_tokens(k)}});
    for (int i = 0; i < 4; ++i) {
      const auto name = "shape" + std::to_string(k) + "-" + std::to_string(i) + ".safetensors";
      yeto::io::save_safetensors(dir / name, {{"latents", shape + 0.05 * torch::randn({64, 8})}});
      manifest += nlohmann::json{{"latents", name},
                                 {"prompt", ""},
                                 {"tensors", {{"image_embeds", "cond" + std::to_string(k) + ".safetensors"}}}}
                      .dump() +
                  "\n";
    }
  }
  std::FILE* f = std::fopen((dir / "train.jsonl").c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs(manifest.c_str(), f);
  std::fclose(f);
}

std::string train_toml(const fs::path& repo, int steps) {
  yeto::test::TinyLoraRun run{repo.string(), "hunyuan3d"};
  run.validation_rows = 3;
  run.steps = steps;
  run.micro_batch_size = 3;
  run.checkpoint_every = 1000;
  run.learning_rate = "0.05";
  return run.toml() + kAcceptToml;
}

// `sample` of the tiny repository conditioned on class 0's tokens, written to `out`.
yeto::test::ProcessResult sample(const fs::path& repo, const fs::path& data, const fs::path& out,
                                 const std::vector<std::string>& extra = {}, int resolution = 20) {
  std::vector<std::string> args = {"sample", "--model", repo.string(), "--diffusion-adapter", "hunyuan3d", "--prompt",
                                   (data / "cond0.safetensors").string(), "--seed", "4", "--steps", "4", "--guidance",
                                   "5.0", "--mesh-resolution", std::to_string(resolution), "--output", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return host(args);
}

}  // namespace

TEST(Hunyuan3DTrain, TinyPresetTrainsOnGeneratedRowsExportsAndSamplesMeshes) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  const auto index = nlohmann::json::parse(yeto::test::read_text(repo / "model_index.json"));
  EXPECT_EQ(index.at("model"), nlohmann::json::array({"hy3dshape", "HunYuanDiTPlain"})) << index.dump();
  EXPECT_EQ(index.at("conditioner"), nlohmann::json::array({"hy3dshape", "DinoImageEncoder"})) << index.dump();
  for (const char* c : {"model/config.json", "vae/config.json", "conditioner/config.json", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::exists(repo / c)) << c;

  // Training: the learner hands the rows' cached tensors to loss_step; the loss falls.
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  tmp.write("run.toml", train_toml(repo, 24));
  const auto r = yeto::test::train(tmp / "run.toml", tmp / "run");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_val_loss_drops(tmp / "run", 24, "hunyuan3d tiny", 0.7,
                                                            yeto::test::read_text(tmp / "run" / "metrics.jsonl")));
  EXPECT_EQ(yeto::test::metric_series(tmp / "run", "model/flow_loss").size(), 24u);
  const auto aux = yeto::test::metric_series(tmp / "run", "model/moe_aux_loss");
  ASSERT_EQ(aux.size(), 24u);
  EXPECT_GT(aux.begin()->second, 0.0);  // the MoE gates' load-balancing loss is attached in training
  const auto lora = yeto::io::load_safetensors(tmp / "run" / "lora.safetensors");
  int b_total = 0, b_moved = 0;
  for (const auto& [name, t] : lora) {
    EXPECT_EQ(name.rfind("model.blocks.", 0), 0u) << name;
    if (name.find("lora_B") == std::string::npos) continue;
    ++b_total;
    b_moved += t.abs().max().item<double>() > 0;
  }
  EXPECT_EQ(b_total, 32);  // auto: the eight attention projections of the four blocks
  EXPECT_EQ(b_moved, b_total);

  // Export: the Diffusers LoRA file holds the run's values under the same names (alpha = r: no
  // scale folded in); reloaded by sample from the directory or from its PEFT file, the same mesh.
  const auto e = yeto::test::export_adapter(tmp / "run", tmp / "adapter", kAccept);
  ASSERT_EQ(e.exit_code, 0) << e.all();
  const auto exported = yeto::io::load_safetensors(tmp / "adapter" / "pytorch_lora_weights.safetensors");
  EXPECT_EQ(exported.size(), lora.size());
  for (const auto& [name, t] : lora) {
    ASSERT_TRUE(exported.count(name)) << name << " (exported: " << exported.begin()->first << ", ...)";
    EXPECT_TRUE(torch::equal(exported.at(name), t)) << name;
  }
  auto s = sample(repo, tmp / "data", tmp / "base.glb");
  ASSERT_EQ(s.exit_code, 0) << s.all();
  s = sample(repo, tmp / "data", tmp / "adapted.glb", {"--adapter-dir", (tmp / "adapter").string()});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  EXPECT_NE(s.all().find("LoRA modules of model from"), std::string::npos) << s.all();
  s = sample(repo, tmp / "data", tmp / "peft.glb", {"--adapter-dir", (tmp / "adapter" / "adapter_model.safetensors").string()});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  const auto adapted = yeto::test::read_text(tmp / "adapted.glb");
  EXPECT_EQ(adapted, yeto::test::read_text(tmp / "peft.glb"));
  EXPECT_NE(adapted, yeto::test::read_text(tmp / "base.glb"));
  s = sample(repo, tmp / "data", tmp / "again.glb", {"--adapter-dir", (tmp / "adapter").string()});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  EXPECT_EQ(yeto::test::read_text(tmp / "again.glb"), adapted);  // same seed, same bytes

  // The GLB: our reader and Python's struct module agree on its vertices and triangles; the OBJ of
  // the same sample has the same mesh.
  const auto mesh = yeto::mesh::read_glb(tmp / "adapted.glb");
  ASSERT_FALSE(mesh.faces.empty());
  const auto py = yeto::test::python_glb_counts((tmp / "adapted.glb").string(), 1.01 + 1e-6);
  ASSERT_EQ(py.exit_code, 0) << py.all();
  EXPECT_EQ(py.out, std::to_string(mesh.vertices.size()) + " " + std::to_string(mesh.faces.size()) + "\n");
  // An image prompt: decoded by the host, encoded by the repository's DINOv2 conditioner.
  for (const auto& [name, source] : {std::pair{"a.png", "testsrc=size=48x40"}, std::pair{"b.png", "smptebars=size=40x48"}}) {
    const auto made = yeto::test::run_process({"/usr/bin/ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f",
                                               "lavfi", "-i", source, "-frames:v", "1", (tmp / name).string()});
    ASSERT_EQ(made.exit_code, 0) << made.all();
  }
  auto image_prompt = [&](const std::string& image, const std::string& out) {
    const auto made = host({"sample", "--model", repo.string(), "--diffusion-adapter", "hunyuan3d", "--prompt",
                            (tmp / image).string(), "--seed", "4", "--steps", "4", "--mesh-resolution", "16", "--output",
                            (tmp / out).string()});
    EXPECT_EQ(made.exit_code, 0) << made.all();
    return yeto::test::read_text(tmp / out);
  };
  const auto from_a = image_prompt("a.png", "a.glb");
  EXPECT_FALSE(yeto::mesh::parse_glb(from_a, "a.glb").faces.empty());
  EXPECT_EQ(image_prompt("a.png", "a2.glb"), from_a);
  EXPECT_NE(image_prompt("b.png", "b.glb"), from_a);

  s = sample(repo, tmp / "data", tmp / "adapted.obj", {"--adapter-dir", (tmp / "adapter").string()});
  ASSERT_EQ(s.exit_code, 0) << s.all();
  EXPECT_EQ(yeto::test::read_text(tmp / "adapted.obj"), yeto::mesh::obj_text(mesh));
  std::printf("  tiny sample: %zu vertices, %zu triangles, %s\n", mesh.vertices.size(), mesh.faces.size(),
              yeto::mesh::watertight(mesh) ? "watertight" : "open");
}

// The sphere test: the tiny repository's ShapeVAE decoder given analytic weights whose field is
// sum_i cos(p_i) - (2 + cos 0.6) (positive inside a closed, nearly spherical surface of radius
// about 0.6, independent of the latents): query_proj puts the field and its negation in channels
// 0 and 1 and the constants +-10 in channels 2 and 3 (their LayerNorm mean is exactly 0, so
// ln_post keeps the field's sign), the cross-attention block's c_proj outputs are 0 and
// output_proj reads channel 0. Sampling through the DiT and the decoder then writes a
// watertight GLB.
TEST(Hunyuan3DTrain, SampleOfAnAnalyticSphereDecoderIsWatertight) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  fs::path file;
  for (const auto& entry : fs::directory_iterator(repo / "vae"))
    if (entry.path().extension() == ".safetensors") file = entry.path();
  ASSERT_FALSE(file.empty());
  auto weights = yeto::io::load_safetensors(file);
  const double level = 2.0 + std::cos(0.6);
  const std::int64_t cos_x = 3 + 3 * 8;  // FourierEmbedder: [p, sin(p f), cos(p f)], a coordinate's 8 frequencies together
  int set = 0;
  for (auto& [name, t] : weights) {
    if (name.rfind("geo_decoder.", 0) != 0) continue;
    const auto rest = name.substr(std::string("geo_decoder.").size());
    if (rest.rfind("cross_attn_decoder.attn.c_proj.", 0) == 0 || rest.rfind("cross_attn_decoder.mlp.c_proj.", 0) == 0) {
      t.zero_(), ++set;
    } else if (rest == "query_proj.weight") {
      t.zero_();
      for (int axis = 0; axis < 3; ++axis) t[0][cos_x + 8 * axis] = 1.0, t[1][cos_x + 8 * axis] = -1.0;
      ++set;
    } else if (rest == "query_proj.bias") {
      t.zero_();
      t[0] = -level, t[1] = level, t[2] = 10.0, t[3] = -10.0;
      ++set;
    } else if (rest == "ln_post.weight") {
      t.fill_(1.0), ++set;
    } else if (rest == "ln_post.bias" || rest == "output_proj.bias") {
      t.zero_(), ++set;
    } else if (rest == "output_proj.weight") {
      t.zero_();
      t[0][0] = 1.0;
      ++set;
    }
  }
  ASSERT_EQ(set, 10);
  std::vector<std::pair<std::string, at::Tensor>> out(weights.begin(), weights.end());
  yeto::io::save_safetensors(file, out);
  const auto s = sample(repo, tmp / "data", tmp / "sphere.glb", {}, 32);
  ASSERT_EQ(s.exit_code, 0) << s.all();
  EXPECT_NE(s.all().find("watertight"), std::string::npos) << s.all();
  const auto mesh = yeto::mesh::read_glb(tmp / "sphere.glb");
  EXPECT_TRUE(yeto::mesh::watertight(mesh));
  std::set<std::pair<std::uint32_t, std::uint32_t>> edges;
  for (const auto& f : mesh.faces)
    for (int k = 0; k < 3; ++k) edges.insert(std::minmax(f[k], f[(k + 1) % 3]));
  const auto euler = static_cast<std::int64_t>(mesh.vertices.size()) - static_cast<std::int64_t>(edges.size()) +
                     static_cast<std::int64_t>(mesh.faces.size());
  EXPECT_EQ(euler, 2);
  double rmin = 10, rmax = 0;
  for (const auto& v : mesh.vertices) {
    const double r = std::sqrt(double(v[0]) * v[0] + double(v[1]) * v[1] + double(v[2]) * v[2]);
    rmin = std::min(rmin, r), rmax = std::max(rmax, r);
  }
  EXPECT_GT(rmin, 0.55);
  EXPECT_LT(rmax, 0.65);
  EXPECT_GT(yeto::mesh::signed_volume(mesh), 0.0);
  std::printf("  sphere sample: %zu vertices, %zu triangles, radius %.3f .. %.3f, watertight\n", mesh.vertices.size(),
              mesh.faces.size(), rmin, rmax);
}

TEST(Hunyuan3DTrain, RowsWithoutImageTokensOrWithWrongShapesAreRefusedNamingTheTensor) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  auto rewrite = [&](const std::string& from, const std::string& to) {
    auto text = yeto::test::read_text(tmp / "data" / "train.jsonl");
    for (std::size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
    tmp.write("data/train.jsonl", text);
  };
  tmp.write("run.toml", train_toml(repo, 2));
  rewrite("\"image_embeds\"", "\"clip_embeds\"");
  auto r = yeto::test::train(tmp / "run.toml", tmp / "run1");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("'image_embeds'"), std::string::npos) << r.all();
  // Tokens of another width than the DiT's context_dim.
  rewrite("\"clip_embeds\"", "\"image_embeds\"");
  torch::manual_seed(1);
  for (int k = 0; k < 3; ++k)
    yeto::io::save_safetensors(tmp / "data" / ("cond" + std::to_string(k) + ".safetensors"),
                               {{"image_embeds", torch::randn({16, 20})}});
  r = yeto::test::train(tmp / "run.toml", tmp / "run2");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("'image_embeds' must be [M, 24]"), std::string::npos) << r.all();
}

TEST(Hunyuan3DTrain, TwoIslandsTrainTheTinyPreset) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  ASSERT_NO_FATAL_FAILURE(init_tiny(repo));
  ASSERT_NO_FATAL_FAILURE(write_rows(tmp / "data"));
  tmp.write("run.toml",
            "[run]\nthreads = 1\n[model]\nid = \"" + repo.string() +
                "\"\nadapter = \"hunyuan3d\"\nprecision = \"fp32\"\n"
                "[data]\npath = \"data/train.jsonl\"\nworkers = 1\n[lora]\nr = 4\nalpha = 4.0\n"
                "[train]\nmax_steps = 8\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
                "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\nwarmup_steps = 1\n[diffusion]\nseed = 5\n"
                "[sync]\nfragments = 2\ninner_steps = 2\nquorum = 2\nheartbeat_s = 0.2\nlearner_timeout_s = 3\n"
                "grace_max_s = 4\nround_deadline_s = 8\nreconnect_budget_s = 30\nfinal_timeout_s = 10\n" +
                kAcceptToml);
  const fs::path run = tmp / "run";
  std::size_t merges = 0;
  ASSERT_NO_FATAL_FAILURE(yeto::test::train_two_islands(tmp / "run.toml", run, 8, &merges));
  // Both islands end on the syncer's final cut: the same adapter.
  const auto a = yeto::io::load_safetensors(run / "island-0" / "lora.safetensors");
  const auto b = yeto::io::load_safetensors(run / "island-1" / "lora.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  std::printf("  two hunyuan3d islands: %zu merges\n", merges);
}
