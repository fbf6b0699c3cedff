// Hunyuan3D-2.1's release layout (tencent/Hunyuan3D-2.1, hunyuan3d-dit-v2-1/: config.yaml and
// one checkpoint whose keys carry the section prefixes model. / vae. / conditioner.), written
// from the tiny preset's weights: it loads as a directory, as the Hub repository's root, through
// the hub cache by id and by the alias hunyuan3d-21, from model.fp16.safetensors and from a
// torch.save model.fp16.ckpt, and samples and trains to the same bytes as the family file's
// layout; the YAML subset reader; bad configs and checkpoints are refused naming the file and the
// key or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include "hunyuan3d_release.hpp"
#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> kAccept = {"--set", "plugins.accept_licenses=[\"hunyuan3d\"]"};

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string read_bytes(const fs::path& p) { return yeto::test::read_text(p); }

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_TRUE(f) << p;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

// A YAML scalar as PyYAML's yaml.dump spells it (a float always with a '.').
std::string yaml_scalar(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) {
    std::ostringstream o;
    o.precision(17);
    o << v.get<double>();
    std::string s = o.str();
    if (s.find('.') == std::string::npos) {
      const auto e = s.find('e');
      s.insert(e == std::string::npos ? s.size() : e, ".0");
    }
    return s;
  }
  return "'" + v.get<std::string>() + "'";
}

// Block YAML of a JSON object (keys starting with '_' dropped); `anchors` puts "&name" before the
// value of a key path, `aliases` replaces a key path's value by "*name".
void yaml_block(const json& j, int indent, const std::string& path, std::string& out,
                const std::map<std::string, std::string>& anchors, const std::map<std::string, std::string>& aliases) {
  for (const auto& [k, v] : j.items()) {
    if (!k.empty() && k[0] == '_') continue;
    const std::string p = path.empty() ? k : path + "." + k;
    out += std::string(static_cast<std::size_t>(indent), ' ') + k + ":";
    if (const auto a = aliases.find(p); a != aliases.end()) {
      out += " *" + a->second + "\n";
    } else if (v.is_object()) {
      out += "  # " + p + "\n";
      yaml_block(v, indent + 2, p, out, anchors, aliases);
    } else if (v.is_array()) {
      std::string items;
      for (const auto& x : v) items += (items.empty() ? "" : ", ") + yaml_scalar(x);
      out += " [" + items + "]\n";
    } else {
      const auto anchor = anchors.find(p);
      out += (anchor != anchors.end() ? " &" + anchor->second : std::string()) + " " + yaml_scalar(v) + "\n";
    }
  }
}

json read_json(const fs::path& p) { return json::parse(yeto::test::read_text(p)); }

// config.yaml of the release layout for the repository `repo` (init-model's family-file layout),
// written as upstream's: sections with target and params, the conditioner's DinoImageEncoder under
// SingleImageEncoder's main_image_encoder, num_latents by anchor and alias. `drop` removes a
// params key of the model section.
std::string release_yaml(const fs::path& repo, const std::string& drop = "") {
  json model = read_json(repo / "model/config.json");
  if (!drop.empty()) model.erase(drop);
  json vae = read_json(repo / "vae/config.json");
  json cond = read_json(repo / "conditioner/config.json");
  json sched = read_json(repo / "scheduler/scheduler_config.json");
  json kwargs = json::object();
  for (const char* k : {"config", "image_size", "use_cls_token"})
    if (cond.contains(k)) kwargs[k] = cond[k];
  kwargs["config"]["model_type"] = "dinov2";  // keys transformers writes that the encoder does not need
  kwargs["config"]["drop_path_rate"] = 0.0;
  json doc = {
      {"model", {{"target", "hy3dshape.models.denoisers.hunyuandit.HunYuanDiTPlain"}, {"params", model}}},
      {"vae", {{"target", "hy3dshape.models.autoencoders.ShapeVAE"}, {"params", vae}}},
      {"conditioner",
       {{"target", "hy3dshape.models.conditioner.SingleImageEncoder"},
        {"params", {{"main_image_encoder", {{"type", "DinoImageEncoder"}, {"kwargs", kwargs}}}}}}},
      {"scheduler", {{"target", "hy3dshape.schedulers.FlowMatchEulerDiscreteScheduler"}, {"params", sched}}},
      {"image_processor",
       {{"target", "hy3dshape.preprocessors.ImageProcessorV2"}, {"params", {{"size", 512}, {"border_ratio", 0.15}}}}}};
  std::string out = "# Hunyuan3D-2.1 shape model (written from the tiny preset)\n";
  yaml_block(doc, 0, "", out, {{"model.params.input_size", "num_latents"}}, {{"vae.params.num_latents", "num_latents"}});
  return out;
}

// Every tensor of a component folder's safetensors files.
std::map<std::string, torch::Tensor> folder_tensors(const fs::path& dir) {
  std::map<std::string, torch::Tensor> all;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors")
      for (auto& [n, t] : yeto::io::load_safetensors(e.path())) all.emplace(n, t);
  return all;
}

// The release checkpoint's tensors: model., vae. (plus point-cloud encoder tensors the decoder
// does not use, as the release has), conditioner.main_image_encoder.
std::map<std::string, std::map<std::string, torch::Tensor>> release_state(const fs::path& repo) {
  std::map<std::string, std::map<std::string, torch::Tensor>> s;
  s["model"] = folder_tensors(repo / "model");
  s["vae"] = folder_tensors(repo / "vae");
  s["vae"].emplace("encoder.query", torch::randn({4, 32}));
  s["vae"].emplace("pre_kl.weight", torch::randn({16, 32}));
  for (auto& [n, t] : folder_tensors(repo / "conditioner")) s["conditioner"].emplace("main_image_encoder." + n, t);
  return s;
}

void write_safetensors_checkpoint(const fs::path& file,
                                  const std::map<std::string, std::map<std::string, torch::Tensor>>& state) {
  std::vector<std::pair<std::string, torch::Tensor>> flat;
  for (const auto& [section, tensors] : state)
    for (const auto& [n, t] : tensors) flat.emplace_back(section + "." + n, t);
  fs::create_directories(file.parent_path());
  yeto::io::save_safetensors(file, flat);
}

// A torch.save archive of {"model": {...}, "vae": {...}, "conditioner": {...}}, as the release's
// model.fp16.ckpt: plain dicts of tensors rebuilt by torch._utils._rebuild_tensor_v2 over
// storages in data/<key> of the zip, as Python's torch.save writes them (torch::pickle_save
// would tag the dicts with TorchScript types, a global Python's archives do not have).
void write_ckpt(const fs::path& file, const std::map<std::string, std::map<std::string, torch::Tensor>>& state) {
  c10::Dict<std::string, c10::Dict<std::string, torch::Tensor>> root;
  for (const auto& [section, tensors] : state) {
    c10::Dict<std::string, torch::Tensor> d;
    for (const auto& [n, t] : tensors) d.insert(n, t);
    root.insert(section, d);
  }
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(root));
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  write_file(file, bytes);
}

void write_release(const fs::path& folder, const fs::path& repo, bool ckpt = false) {
  write_file(folder / "config.yaml", release_yaml(repo));
  const auto state = release_state(repo);
  if (ckpt) write_ckpt(folder / "model.fp16.ckpt", state);
  else write_safetensors_checkpoint(folder / "model.fp16.safetensors", state);
}

yeto::test::ProcessResult run(std::vector<std::string> args, bool accept = true) {
  if (accept) args.insert(args.end(), kAccept.begin(), kAccept.end());
  return yeto::test::run_host(args);
}

// `sample` of `model` conditioned on the tokens in `cond`, to `out` (extra args appended).
yeto::test::ProcessResult sample(const std::string& model, const fs::path& cond, const fs::path& out,
                                 std::vector<std::string> extra = {"--diffusion-adapter", "hunyuan3d"},
                                 bool accept = true) {
  std::vector<std::string> args = {"sample", "--model", model, "--prompt", cond.string(), "--seed", "4", "--steps", "3",
                                   "--guidance", "5.0", "--mesh-resolution", "16", "--output", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run(args, accept);
}

}  // namespace

TEST(Hunyuan3DRelease, YamlSubsetReadsUpstreamConfigSyntax) {
  const std::string text =
      "# comment\n"
      "model:\n"
      "  target: hy3dshape.models.denoisers.hunyuandit.HunYuanDiTPlain\n"
      "  params:\n"
      "    input_size: &num_latents 4096   # trailing comment\n"
      "    qk_norm_type: 'rms'\n"
      "    eps: 1.e-6\n"
      "    not_a_float: 1e-6\n"
      "    scale: 1.0039506158752403\n"
      "    axes: [64, 32]\n"
      "    flag: true\n"
      "    none: ~\n"
      "    url: \"a#b: c\"\n"
      "vae:\n"
      "  params:\n"
      "    num_latents: *num_latents\n"
      "    list:\n"
      "    - 1\n"
      "    - two\n";
  const json j = yeto::hunyuan3d::read_release_yaml(text, "config.yaml");
  const json& p = j.at("model").at("params");
  EXPECT_EQ(p.at("input_size"), 4096);
  EXPECT_EQ(p.at("qk_norm_type"), "rms");
  EXPECT_DOUBLE_EQ(p.at("eps").get<double>(), 1e-6);
  EXPECT_EQ(p.at("not_a_float"), "1e-6");  // PyYAML (YAML 1.1) reads it as a string
  EXPECT_DOUBLE_EQ(p.at("scale").get<double>(), 1.0039506158752403);
  EXPECT_EQ(p.at("axes"), json::array({64, 32}));
  EXPECT_EQ(p.at("flag"), true);
  EXPECT_TRUE(p.at("none").is_null());
  EXPECT_EQ(p.at("url"), "a#b: c");
  EXPECT_EQ(j.at("vae").at("params").at("num_latents"), 4096);
  EXPECT_EQ(j.at("vae").at("params").at("list"), json::array({1, "two"}));

  const auto refused = [](const std::string& yaml, const std::string& what) {
    try {
      yeto::hunyuan3d::read_release_yaml(yaml, "dir/config.yaml");
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const std::invalid_argument& e) {
      EXPECT_TRUE(contains(e.what(), what)) << e.what();
    }
  };
  refused("a:\n\tb: 1\n", "dir/config.yaml:2: a tab");
  refused("a: 1\na: 2\n", "dir/config.yaml:2: the key 'a' appears twice");
  refused("a: *nowhere\n", "dir/config.yaml:1: the alias '*nowhere'");
  refused("a: {b: 1}\n", "dir/config.yaml:1:");
  refused("a:\n  b: 1\n    c: 2\n", "dir/config.yaml:3: unexpected indentation");
  refused("a: 'open\n", "dir/config.yaml:1: an unterminated");

  // Sections: a missing key names the file and its path; a class the plugin does not serve.
  const auto configs_refused = [](const json& doc, const std::string& what) {
    try {
      yeto::hunyuan3d::release_configs(doc, "dir/config.yaml");
      ADD_FAILURE() << "accepted: " << doc.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_TRUE(contains(e.what(), "dir/config.yaml: ")) << e.what();
      EXPECT_TRUE(contains(e.what(), what)) << e.what();
    }
  };
  configs_refused(json::object(), "no 'model' section");
  configs_refused({{"model", {{"target", "x.HunYuanDiTPlain"}}}}, "'model.params' is missing");
  configs_refused({{"model", {{"target", "x.Hunyuan3DDiT"}, {"params", json::object()}}}},
                  "'model.target' is 'x.Hunyuan3DDiT'; the hunyuan3d plugin serves HunYuanDiTPlain");
  configs_refused({{"model", {{"target", "x.HunYuanDiTPlain"}, {"params", {{"input_size", 8}}}}}},
                  "'model.params.in_channels' is missing");
}

TEST(Hunyuan3DRelease, ReleaseLayoutSamplesAndTrainsLikeTheFamilyLayout) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  {
    const auto r = run({"init-model", "--family", "hunyuan3d", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }
  for (const auto& [n, t] : folder_tensors(repo / "conditioner"))
    ASSERT_EQ(n.rfind("model.", 0), 0u) << n << ": DinoImageEncoder's names are upstream's (model.<Dinov2Model>)";
  torch::manual_seed(100);
  const auto cond = tmp / "cond.safetensors";
  yeto::io::save_safetensors(cond, {{"image_embeds", torch::randn({16, 24})}});

  // The reference: the family file's layout.
  ASSERT_EQ(sample(repo.string(), cond, tmp / "base.glb").exit_code, 0);
  const std::string base = read_bytes(tmp / "base.glb");
  ASSERT_GT(base.size(), 100u);

  // The release folder itself (safetensors), and the Hub repository's root (ckpt in its
  // hunyuan3d-dit-v2-1/ folder).
  const auto release = tmp / "release";
  ASSERT_NO_FATAL_FAILURE(write_release(release, repo));
  auto r = sample(release.string(), cond, tmp / "release.glb");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(contains(r.all(), "release layout")) << r.all();
  EXPECT_EQ(read_bytes(tmp / "release.glb"), base) << "the release layout samples the same mesh";

  const auto hub_root = tmp / "hub/models--tencent--Hunyuan3D-2.1";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  write_file(hub_root / "refs/main", commit);
  const auto snapshot = hub_root / "snapshots" / commit;
  ASSERT_NO_FATAL_FAILURE(write_release(snapshot / "hunyuan3d-dit-v2-1", repo, /*ckpt=*/true));
  r = sample(snapshot.string(), cond, tmp / "ckpt.glb");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(read_bytes(tmp / "ckpt.glb"), base) << "model.fp16.ckpt (torch.save) samples the same mesh";

  // Through the hub cache: by the alias, and by the Hub id (no --diffusion-adapter: the plugin
  // that declares the alias serves its hub id); the licence gate still comes first.
  const std::vector<std::string> cache = {"--set", "model.hub_cache=" + (tmp / "hub").string()};
  r = sample("hunyuan3d-21", cond, tmp / "alias.glb", cache);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(read_bytes(tmp / "alias.glb"), base);
  r = sample("tencent/Hunyuan3D-2.1", cond, tmp / "id.glb", cache);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(read_bytes(tmp / "id.glb"), base);
  r = sample("hunyuan3d-21", cond, tmp / "refused.glb", cache, /*accept=*/false);
  EXPECT_EQ(r.exit_code, 27) << r.all();
  EXPECT_TRUE(contains(r.all(), "plugins.accept_licenses")) << r.all();
  EXPECT_FALSE(fs::exists(tmp / "refused.glb"));

  // Training: the same run from either layout ends on the same adapter bytes.
  std::string manifest;
  fs::create_directories(tmp / "data");
  fs::copy_file(cond, tmp / "data/cond.safetensors");
  for (int i = 0; i < 4; ++i) {
    torch::manual_seed(300 + i);
    const auto name = "lat" + std::to_string(i) + ".safetensors";
    yeto::io::save_safetensors(tmp / "data" / name, {{"latents", torch::randn({64, 8})}});
    manifest += json{{"latents", name}, {"prompt", ""}, {"tensors", {{"image_embeds", "cond.safetensors"}}}}.dump() + "\n";
  }
  write_file(tmp / "data/train.jsonl", manifest);
  for (const auto& [name, model] : {std::pair{"a", repo}, std::pair{"b", release}}) {
    yeto::test::TinyLoraRun run_cfg{model.string(), "hunyuan3d"};
    run_cfg.validation_rows = 1;
    run_cfg.steps = 3;
    run_cfg.micro_batch_size = 3;
    run_cfg.checkpoint_every = 1000;
    run_cfg.learning_rate = "0.05";
    tmp.write(std::string(name) + ".toml", run_cfg.toml() + "[plugins]\naccept_licenses = [\"hunyuan3d\"]\n");
    const auto t = yeto::test::train(tmp / (std::string(name) + ".toml"), tmp / (std::string("run-") + name));
    ASSERT_EQ(t.exit_code, 0) << t.all();
  }
  EXPECT_EQ(read_bytes(tmp / "run-a/lora.safetensors"), read_bytes(tmp / "run-b/lora.safetensors"))
      << "training from the release layout ends on the same adapter";
}

TEST(Hunyuan3DRelease, BadReleaseLayoutsAreRefusedNamingTheFileAndKey) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  {
    const auto r = run({"init-model", "--family", "hunyuan3d", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
    ASSERT_EQ(r.exit_code, 0) << r.all();
  }
  const auto cond = tmp / "cond.safetensors";
  yeto::io::save_safetensors(cond, {{"image_embeds", torch::randn({16, 24})}});
  const auto expect_refused = [&](const fs::path& dir, const std::vector<std::string>& what) {
    const auto r = sample(dir.string(), cond, tmp / "x.glb");
    EXPECT_NE(r.exit_code, 0) << r.all();
    EXPECT_LT(r.exit_code, 128) << "a crash: " << r.all();
    for (const auto& w : what) EXPECT_TRUE(contains(r.all(), w)) << w << "\n" << r.all();
    EXPECT_FALSE(fs::exists(tmp / "x.glb"));
  };

  // A parameter the checkpoint's shapes depend on is missing from config.yaml.
  const auto no_depth = tmp / "no-depth";
  ASSERT_NO_FATAL_FAILURE(write_release(no_depth, repo));
  write_file(no_depth / "config.yaml", release_yaml(repo, "depth"));
  expect_refused(no_depth, {(no_depth / "config.yaml").string(), "'model.params.depth' is missing"});

  // A parameter of the wrong type: the section is named.
  const auto bad_heads = tmp / "bad-heads";
  ASSERT_NO_FATAL_FAILURE(write_release(bad_heads, repo));
  std::string yaml = release_yaml(repo);
  const auto at = yaml.find("num_heads: 2");
  ASSERT_NE(at, std::string::npos) << yaml;
  yaml.replace(at, 12, "num_heads: 'two'");
  write_file(bad_heads / "config.yaml", yaml);
  expect_refused(bad_heads, {(bad_heads / "config.yaml").string(), "model.params", "num_heads"});

  // No checkpoint next to config.yaml.
  const auto no_ckpt = tmp / "no-ckpt";
  write_file(no_ckpt / "config.yaml", release_yaml(repo));
  expect_refused(no_ckpt, {no_ckpt.string(), "model.fp16.safetensors", "model.fp16.ckpt"});

  // A tensor of the wrong shape, and a missing one: named with their prefixed keys.
  auto state = release_state(repo);
  state["model"]["x_embedder.weight"] = torch::zeros({3, 3});
  state["vae"].erase("post_kl.weight");
  const auto bad_shape = tmp / "bad-shape";
  write_file(bad_shape / "config.yaml", release_yaml(repo));
  write_safetensors_checkpoint(bad_shape / "model.fp16.safetensors", state);
  expect_refused(bad_shape, {"shape mismatch for model.x_embedder.weight (checkpoint [3, 3]", "model.fp16.safetensors"});
  state = release_state(repo);
  state["vae"].erase("post_kl.weight");
  write_safetensors_checkpoint(bad_shape / "model.fp16.safetensors", state);
  expect_refused(bad_shape, {"missing vae.post_kl.weight"});

  // The same through the torch.save archive; and an archive that is not one.
  const auto bad_ckpt = tmp / "bad-ckpt";
  write_file(bad_ckpt / "config.yaml", release_yaml(repo));
  ASSERT_NO_FATAL_FAILURE(write_ckpt(bad_ckpt / "model.fp16.ckpt", state));
  expect_refused(bad_ckpt, {"missing vae.post_kl.weight", "model.fp16.ckpt"});
  write_file(bad_ckpt / "model.fp16.ckpt", "not a zip archive");
  expect_refused(bad_ckpt, {"model.fp16.ckpt"});

  // A directory in neither layout.
  const auto empty = tmp / "empty";
  fs::create_directories(empty);
  expect_refused(empty, {"no config.yaml"});
}
