// Adapter layouts, export and merge: the flux-lora fixture's three saved layouts reproduce its
// recorded outputs; an export from a syncer checkpoint reloads through every layout with the
// trained model's forward; merging folds the adapter into sharded weights that give the same
// forward; settings and bases that do not match are refused by name.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "artifacts/adapter.hpp"
#include "artifacts/export.hpp"
#include "artifacts/export_settings.hpp"
#include "artifacts/merge.hpp"
#include "artifacts/shards.hpp"
#include "core/error.hpp"
#include "flux_transformer.hpp"
#include "io/aliases.hpp"
#include "io/repository.hpp"
#include "io/safetensors.hpp"
#include "io/tensors.hpp"
#include "io/weight_source.hpp"
#include "support/temp_dir.hpp"
#include "sync/layout.hpp"
#include "sync/state.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace yeto::artifacts;
using yeto::flux::FluxTransformer2DModel;
using yeto::flux::FluxTransformerConfig;

namespace {

const fs::path kLoraCase = fs::path(YETO_TEST_FIXTURES) / "parity" / "flux-lora";
const fs::path kFluxTiny = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

FluxTransformer2DModel load_model(const fs::path& dir) {
  FluxTransformer2DModel m(FluxTransformerConfig::from_json(read_json(dir / "config.json")));
  std::map<std::string, at::Tensor> w;
  const auto ws = yeto::io::WeightSource::open(dir);
  for (const auto& n : ws.names()) {
    const auto loc = ws.locate(n);
    w.emplace(n, yeto::io::to_tensor(loc.file, *loc.info));
  }
  yeto::nn::load_named_tensors(*m, w);
  m->eval();
  return m;
}

using Inputs = std::map<std::string, at::Tensor>;

at::Tensor forward(FluxTransformer2DModel& m, const Inputs& in) {
  torch::NoGradGuard ng;
  return m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("pooled_projections"),
                    in.at("timestep"), in.at("img_ids"), in.at("txt_ids"), in.at("guidance"));
}

// Random inputs for a model of this config (batch 2, 4x4 latent tokens, 5 text tokens).
Inputs random_inputs(const FluxTransformerConfig& c, std::uint64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  Inputs in;
  in["hidden_states"] = at::randn({2, 16, c.in_channels}, g);
  in["encoder_hidden_states"] = at::randn({2, 5, c.joint_attention_dim}, g);
  in["pooled_projections"] = at::randn({2, c.pooled_projection_dim}, g);
  in["timestep"] = at::tensor({0.3f, 0.8f});
  in["guidance"] = at::tensor({3.5f, 2.0f});
  auto img = at::zeros({16, 3});
  for (int i = 0; i < 16; ++i) {
    img[i][1] = i / 4;
    img[i][2] = i % 4;
  }
  in["img_ids"] = img;
  in["txt_ids"] = at::zeros({5, 3});
  return in;
}

double max_abs(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

void expect_within(const at::Tensor& actual, const at::Tensor& expected, const json& tol, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double rtol = tol.at("rtol").get<double>(), atol = tol.at("atol").get<double>();
  const auto a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  const double worst = ((a - e).abs() - (atol + rtol * e.abs())).max().item<double>();
  std::printf("  %-58s max abs err %.3g (atol %.3g)\n", what.c_str(), max_abs(a, e), atol);
  EXPECT_LE(worst, 0.0) << what << ": max abs err " << max_abs(a, e);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const yeto::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A trained-like LoRA on the model: targets as given, A and B both random.
std::vector<std::string> train_like_lora(FluxTransformer2DModel& m, std::int64_t r, double alpha,
                                         const std::vector<std::string>& targets, std::uint64_t seed) {
  yeto::nn::LoraConfig lc;
  lc.r = r;
  lc.alpha = alpha;
  const auto paths = yeto::nn::add_lora(*m, targets, lc);
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard ng;
  for (auto& [path, layer] : yeto::nn::lora_capable_layers(*m)) {
    if (!layer->has_adapter("default")) continue;
    layer->lora_A("default").copy_(at::randn(layer->lora_A("default").sizes(), g) * 0.3);
    layer->lora_B("default").copy_(at::randn(layer->lora_B("default").sizes(), g) * 0.3);
  }
  return paths;
}

// The trainable layout as the plugin reports it: "transformer.<module>.lora_{A,B}.weight", sorted.
std::vector<TrainableTensor> trainable_of(FluxTransformer2DModel& m) {
  std::vector<TrainableTensor> out;
  for (const auto& [k, t] : yeto::nn::lora_state_dict(*m, "default", "transformer."))
    out.push_back({k, t.sizes().vec()});
  return out;
}

// What the syncer leaves behind: the trainable tensors in its exact float32 checkpoint.
void write_syncer_checkpoint(const fs::path& file, FluxTransformer2DModel& m, std::uint32_t fragments,
                             yeto::sync::FragmentPattern pattern) {
  const auto sd = yeto::nn::lora_state_dict(*m, "default", "transformer.");
  std::vector<yeto::sync::TensorSpec> specs;
  std::vector<std::vector<float>> values;
  for (const auto& [k, t] : sd) {
    specs.push_back({k, static_cast<std::uint64_t>(t.numel())});
    const auto c = t.contiguous();
    values.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  yeto::sync::SyncerState s;
  s.initialised = true;
  s.layout = yeto::sync::build_layout(specs, fragments, pattern);
  std::vector<std::span<const float>> spans(values.begin(), values.end());
  for (std::uint32_t p = 0; p < fragments; ++p) {
    yeto::sync::FragmentState f;
    f.version = 3;
    f.params = yeto::sync::make_floats(yeto::sync::pack_fragment(s.layout, p, spans));
    f.momentum = yeto::sync::make_floats(std::vector<float>(f.params->size(), 0.0f));
    s.fragments.push_back(std::move(f));
  }
  s.outer_steps = 3 * fragments;
  yeto::sync::save_checkpoint(file, s);
}

ExportSettings settings_for(std::int64_t r, double alpha, std::uint32_t fragments, const std::string& pattern) {
  ExportSettings s;
  s.model = kFluxTiny.string();
  s.r = r;
  s.alpha = alpha;
  s.targets = {"to_q", "to_k", "to_v", "to_out.0"};
  s.fragments = fragments;
  s.fragment_pattern = pattern;
  return s;
}

}  // namespace

TEST(AdapterLayouts, FixtureLayoutsReproduceRecordedSamples) {
  const json info = read_json(kLoraCase / "case.json");
  const auto inputs = yeto::io::load_safetensors(kLoraCase / "inputs.safetensors");
  const auto expected = yeto::io::load_safetensors(kLoraCase / "expected.safetensors");
  const json& cmp = info.at("compare");

  struct Case {
    std::string dir;
    Layout layout;
    std::optional<double> alpha;
    double scale;
    std::string output;
  };
  const std::vector<Case> cases = {
      {"lora_peft", Layout::peft, std::nullopt, 2.0, "sample_lora"},
      {"lora_diffusers", Layout::diffusers, std::nullopt, 1.0, "sample_lora_alpha_eq_rank"},
      {"lora_model_level", Layout::diffusers_model, std::nullopt, 1.0, "sample_lora_alpha_eq_rank"},
      {"lora_model_level", Layout::diffusers_model, 8.0, 2.0, "sample_lora"},
  };
  for (const auto& c : cases) {
    ReadOptions ro;
    ro.alpha = c.alpha;
    const Adapter a = read_adapter(kLoraCase / c.dir, ro);
    EXPECT_EQ(a.layout, c.layout) << c.dir;
    ASSERT_EQ(a.modules.size(), 7u) << c.dir;
    EXPECT_EQ(a.components(), std::vector<std::string>{"transformer"});
    for (const auto& [name, m] : a.modules) {
      EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name;
      EXPECT_EQ(m.rank(), 4);
      EXPECT_DOUBLE_EQ(m.scale, c.scale) << c.dir << " " << name;
    }
    auto model = load_model(kLoraCase);
    const auto base = forward(model, inputs);
    EXPECT_EQ(apply_adapter(*model, a, "transformer").size(), 7u);
    const auto out = forward(model, inputs);
    expect_within(out, expected.at(c.output), cmp.at(c.output),
                  c.dir + (c.alpha ? " (alpha 8)" : "") + " -> " + c.output);
    EXPECT_GT(max_abs(out, base), 0.05) << "the adapter must change the output";
  }
  // The PEFT directory's canonical tensors are the Diffusers ones (both unscaled in the fixture).
  const auto peft = read_adapter(kLoraCase / "lora_peft").canonical_tensors();
  const auto diff = read_adapter(kLoraCase / "lora_diffusers").canonical_tensors();
  ASSERT_EQ(peft.size(), diff.size());
  for (const auto& [k, t] : peft) EXPECT_TRUE(t.equal(diff.at(k))) << k;
}

TEST(AdapterLayouts, ExportFromSyncerCheckpointReloadsThroughEveryLayout) {
  yeto::test::TempDir tmp;
  auto trained = load_model(kFluxTiny / "transformer");
  const std::vector<std::string> targets = {"to_q", "to_k", "to_v", "to_out.0"};
  const auto adapted = train_like_lora(trained, 4, 6.0, targets, 77);
  ASSERT_EQ(adapted.size(), 2 * 4 + 2 * 3u);  // double blocks have to_out.0, single blocks do not
  const Inputs in = random_inputs(trained->config(), 5);
  const at::Tensor y_trained = forward(trained, in);

  write_syncer_checkpoint(tmp / "state" / "checkpoint.bin", trained, 3, yeto::sync::FragmentPattern::strided);
  ExportRequest rq;
  rq.checkpoint = tmp / "state";
  rq.expected = trainable_of(trained);
  for (const auto& p : lora_capable_paths(*trained)) rq.candidate_modules.push_back("transformer." + p);
  rq.settings = settings_for(4, 6.0, 3, "strided");
  rq.base_model_class = "FluxTransformer2DModel";
  rq.record = {{"plugin", {{"name", "flux"}, {"version", "test"}}}};
  rq.output_dir = tmp / "adapter";
  rq.comfyui = true;
  const ExportReport rep = export_adapter(rq);
  EXPECT_EQ(rep.component, "transformer");
  EXPECT_EQ(rep.modules, adapted.size());

  // PEFT config: PEFT's fields, short targets that select exactly the adapted layers.
  const json cfg = read_json(rq.output_dir / kPeftConfigFile);
  EXPECT_EQ(cfg.at("peft_type"), "LORA");
  EXPECT_EQ(cfg.at("r"), 4);
  EXPECT_EQ(cfg.at("lora_alpha"), 6);
  EXPECT_EQ(cfg.at("target_modules"), json({"to_k", "to_out.0", "to_q", "to_v"}));
  EXPECT_EQ(cfg.at("auto_mapping").at("base_model_class"), "FluxTransformer2DModel");
  const json fixture_cfg = read_json(kLoraCase / "lora_peft" / kPeftConfigFile);
  for (const auto& [k, _] : fixture_cfg.items()) EXPECT_TRUE(cfg.contains(k)) << "PEFT field " << k << " missing";
  const json record = read_json(rq.output_dir / kRecordFile);
  EXPECT_EQ(record.at("format"), kRecordFormat);
  EXPECT_EQ(record.at("trainable_modules").size(), adapted.size());
  EXPECT_EQ(record.at("plugin").at("name"), "flux");
  EXPECT_DOUBLE_EQ(record.at("lora").at("scale").get<double>(), 1.5);

  // Diffusers file: prefixed keys, alpha/r folded into lora_B; PEFT file unscaled.
  const auto dfile = yeto::io::load_safetensors(rq.output_dir / kDiffusersFile);
  const auto pfile = yeto::io::load_safetensors(rq.output_dir / kPeftWeightsFile);
  const std::string q = "transformer_blocks.0.attn.to_q";
  ASSERT_TRUE(dfile.count("transformer." + q + ".lora_B.weight"));
  ASSERT_TRUE(pfile.count("base_model.model." + q + ".lora_B.weight"));
  const auto B = yeto::nn::lora_state_dict(*trained).at(q + ".lora_B.weight");
  EXPECT_TRUE(pfile.at("base_model.model." + q + ".lora_B.weight").equal(B));
  EXPECT_LE(max_abs(dfile.at("transformer." + q + ".lora_B.weight"), B * 1.5), 1e-7);
  const auto folded = read_adapter(rq.output_dir).folded_tensors();
  EXPECT_LE(max_abs(folded.at("transformer." + q + ".lora_B.weight"), dfile.at("transformer." + q + ".lora_B.weight")),
            1e-7);
  EXPECT_TRUE(folded.at("transformer." + q + ".lora_A.weight").equal(dfile.at("transformer." + q + ".lora_A.weight")));
  const auto cfile = yeto::io::load_safetensors(rq.output_dir / kComfyFile);
  ASSERT_TRUE(cfile.count("lora_transformer_transformer_blocks_0_attn_to_q.lora_down.weight"));
  EXPECT_FLOAT_EQ(cfile.at("lora_transformer_transformer_blocks_0_attn_to_out_0.alpha").item<float>(), 6.0f);
  EXPECT_EQ(cfile.size(), 3 * adapted.size());

  const std::vector<std::pair<std::optional<Layout>, Layout>> layouts = {
      {std::nullopt, Layout::yeto},
      {Layout::peft, Layout::peft},
      {Layout::diffusers, Layout::diffusers},
      {Layout::comfyui, Layout::comfyui},
  };
  for (const auto& [ask, got] : layouts) {
    ReadOptions ro;
    ro.layout = ask;
    const Adapter a = read_adapter(rq.output_dir, ro);
    EXPECT_EQ(a.layout, got);
    auto fresh = load_model(kFluxTiny / "transformer");
    EXPECT_EQ(apply_adapter(*fresh, a, "transformer").size(), adapted.size());
    const double err = max_abs(forward(fresh, in), y_trained);
    std::printf("  export -> %-16s -> forward max abs err vs trained %.3g\n", layout_name(got).c_str(), err);
    EXPECT_LE(err, 1e-5) << layout_name(got);
  }
  // The files alone (no record): ComfyUI names map back given the model's module names.
  {
    yeto::test::TempDir solo;
    fs::copy_file(rq.output_dir / kComfyFile, solo / "my_lora.safetensors");
    ReadOptions ro;
    EXPECT_NE(error_of([&] { read_adapter(solo / "my_lora.safetensors", ro); }).find("cannot be mapped back"),
              std::string::npos);
    for (const auto& p : lora_capable_paths(*trained)) ro.known_modules.push_back("transformer." + p);
    const Adapter a = read_adapter(solo / "my_lora.safetensors", ro);
    EXPECT_EQ(a.layout, Layout::comfyui);
    auto fresh = load_model(kFluxTiny / "transformer");
    apply_adapter(*fresh, a, "transformer");
    EXPECT_LE(max_abs(forward(fresh, in), y_trained), 1e-5);
  }
}

TEST(AdapterLayouts, ExportRefusesSettingsThatDoNotRebuildTheCheckpoint) {
  yeto::test::TempDir tmp;
  auto trained = load_model(kFluxTiny / "transformer");
  train_like_lora(trained, 4, 4.0, {"to_q", "to_k", "to_v", "to_out.0"}, 3);
  write_syncer_checkpoint(tmp / "checkpoint.bin", trained, 2, yeto::sync::FragmentPattern::binpack);
  ExportRequest rq;
  rq.checkpoint = tmp / "checkpoint.bin";
  rq.expected = trainable_of(trained);
  rq.settings = settings_for(4, 4.0, 2, "binpack");
  rq.output_dir = tmp / "out";

  auto fragments = rq;
  fragments.settings.fragments = 3;
  EXPECT_NE(error_of([&] { export_adapter(fragments); }).find("sync.fragments (--fragments)"), std::string::npos);
  auto pattern = rq;
  pattern.settings.fragment_pattern = "strided";
  EXPECT_NE(error_of([&] { export_adapter(pattern); }).find("sync.fragment_pattern"), std::string::npos);

  auto other_rank = load_model(kFluxTiny / "transformer");
  train_like_lora(other_rank, 8, 8.0, {"to_q", "to_k", "to_v", "to_out.0"}, 3);
  auto rank = rq;
  rank.expected = trainable_of(other_rank);
  rank.settings.r = 8;
  const std::string rank_err = error_of([&] { export_adapter(rank); });
  EXPECT_NE(rank_err.find("lora.r (--lora-r)"), std::string::npos) << rank_err;
  EXPECT_NE(rank_err.find("rank 4"), std::string::npos) << rank_err;

  auto fewer = load_model(kFluxTiny / "transformer");
  train_like_lora(fewer, 4, 4.0, {"to_q", "to_k", "to_v"}, 3);
  auto targets = rq;
  targets.expected = trainable_of(fewer);
  const std::string t_err = error_of([&] { export_adapter(targets); });
  EXPECT_NE(t_err.find("lora.targets (--lora-targets)"), std::string::npos) << t_err;
  EXPECT_NE(t_err.find("to_out.0"), std::string::npos) << t_err;
  EXPECT_FALSE(fs::exists(rq.output_dir)) << "nothing is written for a refused export";

  EXPECT_EQ(export_adapter(rq).modules, 14u);
}

TEST(AdapterLayouts, UnreadableFilesAreRefusedNamingTheTensor) {
  yeto::test::TempDir tmp;
  yeto::io::save_safetensors(tmp / "half.safetensors",
                             {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", at::zeros({4, 32})}});
  const std::string half = error_of([&] { read_adapter(tmp / "half.safetensors"); });
  EXPECT_NE(half.find("transformer.transformer_blocks.0.attn.to_q"), std::string::npos) << half;
  EXPECT_NE(half.find("only lora_A"), std::string::npos) << half;
  yeto::io::save_safetensors(tmp / "dora.safetensors",
                             {{"transformer.x.lora_A.weight", at::zeros({4, 32})},
                              {"transformer.x.lora_B.weight", at::zeros({32, 4})},
                              {"transformer.x.lora_magnitude_vector", at::zeros({32})}});
  EXPECT_NE(error_of([&] { read_adapter(tmp / "dora.safetensors"); }).find("lora_magnitude_vector"), std::string::npos);
  EXPECT_NE(error_of([&] { read_adapter(tmp / "missing"); }).find("no such adapter"), std::string::npos);
  // A module the model does not have.
  yeto::io::save_safetensors(tmp / "other.safetensors", {{"transformer.blocks.9.to_q.lora_A.weight", at::zeros({4, 32})},
                                                         {"transformer.blocks.9.to_q.lora_B.weight", at::zeros({32, 4})}});
  auto model = load_model(kLoraCase);
  const std::string other = error_of([&] { apply_adapter(*model, read_adapter(tmp / "other.safetensors"), "transformer"); });
  EXPECT_NE(other.find("transformer.blocks.9.to_q.lora_A.weight"), std::string::npos) << other;
}

TEST(AdapterLayouts, ScalesFollowPeftPatternsAndDiffusersMetadata) {
  yeto::test::TempDir tmp;
  // PEFT: alpha_pattern / rank_pattern per module (PEFT's "(.*\.)?(key)$" rule), rsLoRA.
  fs::create_directories(tmp / "peft");
  json cfg = read_json(kLoraCase / "lora_peft" / kPeftConfigFile);
  cfg["alpha_pattern"] = {{"transformer_blocks.0.attn.to_q", 16}};
  tmp.write("peft/adapter_config.json", cfg.dump());
  fs::copy_file(kLoraCase / "lora_peft" / kPeftWeightsFile, tmp / "peft" / kPeftWeightsFile);
  Adapter a = read_adapter(tmp / "peft");
  EXPECT_DOUBLE_EQ(a.modules.at("transformer.transformer_blocks.0.attn.to_q").scale, 4.0);
  EXPECT_DOUBLE_EQ(a.modules.at("transformer.single_transformer_blocks.0.attn.to_q").scale, 2.0);
  cfg["alpha_pattern"] = json::object();
  cfg["use_rslora"] = true;
  tmp.write("peft/adapter_config.json", cfg.dump());
  EXPECT_DOUBLE_EQ(read_adapter(tmp / "peft").modules.begin()->second.scale, 4.0);  // 8 / sqrt(4)
  cfg["use_rslora"] = false;
  cfg["r"] = 8;
  tmp.write("peft/adapter_config.json", cfg.dump());
  EXPECT_NE(error_of([&] { read_adapter(tmp / "peft"); }).find("rank 4 but the config says r = 8"), std::string::npos);
  cfg["r"] = 4;
  cfg["use_dora"] = true;
  tmp.write("peft/adapter_config.json", cfg.dump());
  EXPECT_NE(error_of([&] { read_adapter(tmp / "peft"); }).find("DoRA"), std::string::npos);

  // Diffusers >= 0.35 pipeline-level file with the config in its metadata ("transformer." keys).
  const auto t = yeto::io::load_safetensors(kLoraCase / "lora_diffusers" / kDiffusersFile);
  const std::vector<std::pair<std::string, at::Tensor>> v(t.begin(), t.end());
  yeto::io::save_safetensors(tmp / "meta.safetensors", v,
                             {{"format", "pt"},
                              {"lora_adapter_metadata", json({{"transformer.r", 4}, {"transformer.lora_alpha", 8}}).dump()}});
  const Adapter m = read_adapter(tmp / "meta.safetensors");
  EXPECT_EQ(m.layout, Layout::diffusers);
  for (const auto& [k, mod] : m.modules) EXPECT_DOUBLE_EQ(mod.scale, 2.0) << k;
  // Without metadata Diffusers' scale 1; a caller-given alpha replaces it.
  ReadOptions ro;
  ro.alpha = 2.0;
  EXPECT_DOUBLE_EQ(read_adapter(kLoraCase / "lora_diffusers", ro).modules.begin()->second.scale, 0.5);
}

TEST(Shards, SizesParseLikeHuggingFaceAndBadValuesAreRefused) {
  EXPECT_EQ(parse_size("2GB"), 2'000'000'000ull);
  EXPECT_EQ(parse_size("500MB"), 500'000'000ull);
  EXPECT_EQ(parse_size("10KB"), 10'000ull);
  EXPECT_EQ(parse_size("10kb"), 10'000ull);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("1.5GB"), 1'500'000'000ull);
  EXPECT_EQ(parse_size("4096"), 4096ull);
  for (const char* bad : {"", "0", "0MB", "-1GB", "2XB", "GB", "1e3", "1.2.3MB", "99999999999TB"}) {
    const std::string e = error_of([&] { parse_size(bad); });
    EXPECT_NE(e.find("--max-shard-size"), std::string::npos) << "'" << bad << "': " << e;
  }
  EXPECT_EQ(plan_shards({5, 5, 5, 20, 1, 4, 6}, 10),
            (std::vector<std::vector<std::size_t>>{{0, 1}, {2}, {3}, {4, 5}, {6}}));
  EXPECT_EQ(shard_file_name("model", 1, 3), "model-00002-of-00003.safetensors");
  EXPECT_EQ(shard_file_name("diffusion_pytorch_model", 0, 1), "diffusion_pytorch_model.safetensors");
}

TEST(Merge, MergedShardsGiveTheAdaptedForwardAndRespectTheCap) {
  yeto::test::TempDir tmp;
  // An adapter trained on flux-tiny, exported with its base recorded.
  auto trained = load_model(kFluxTiny / "transformer");
  train_like_lora(trained, 4, 8.0, {"to_q", "to_k", "to_v", "to_out.0", "proj_mlp"}, 11);
  const Inputs in = random_inputs(trained->config(), 9);
  const at::Tensor y_adapted = forward(trained, in);
  write_syncer_checkpoint(tmp / "checkpoint.bin", trained, 1, yeto::sync::FragmentPattern::binpack);
  const auto resolved = yeto::io::resolve_model(kFluxTiny.string(), "main", yeto::io::hub_cache());
  const auto repo = yeto::io::DiffusersRepo::open(resolved.repo.path);
  ExportRequest rq;
  rq.checkpoint = tmp / "checkpoint.bin";
  rq.expected = trainable_of(trained);
  rq.settings = settings_for(4, 8.0, 1, "binpack");
  rq.record = {{"base_model", base_model_record(kFluxTiny.string(), resolved.repo, repo, {"transformer"})}};
  rq.output_dir = tmp / "adapter";
  export_adapter(rq);

  MergeOptions mo;
  mo.model = kFluxTiny.string();
  mo.adapter = rq.output_dir;
  mo.max_shard_bytes = parse_size("100KB");
  mo.output_dir = tmp / "merged";
  const MergeReport rep = merge_adapter(mo);
  ASSERT_EQ(rep.components.size(), 1u);
  const auto& mc = rep.components[0];
  EXPECT_EQ(mc.component, "transformer");
  EXPECT_EQ(mc.modules, 2 * 4 + 2 * 4u);
  EXPECT_GE(mc.shards.size(), 5u) << "551 KB of weights under a 100 KB cap";

  // Each shard's tensor bytes stay within the cap (single tensors above it get their own shard).
  const auto ws = yeto::io::WeightSource::open(tmp / "merged" / "transformer");
  ws.validate();
  const json index = read_json(tmp / "merged" / "transformer" / "diffusion_pytorch_model.safetensors.index.json");
  std::uint64_t total = 0;
  for (const auto& shard : mc.shards) {
    const auto f = yeto::io::SafetensorsFile::open(shard);
    EXPECT_TRUE(f.data_size() <= mo.max_shard_bytes || f.tensors().size() == 1) << shard;
    total += f.data_size();
    for (const auto& t : f.tensors()) EXPECT_EQ(index.at("weight_map").at(t.name), shard.filename().string());
  }
  EXPECT_EQ(index.at("metadata").at("total_size").get<std::uint64_t>(), total);
  EXPECT_EQ(index.at("weight_map").size(), ws.names().size());
  // dtype preserved, names complete.
  const auto base_ws = yeto::io::WeightSource::open(kFluxTiny / "transformer");
  EXPECT_EQ(ws.names(), base_ws.names());

  // Merged forward == base + adapter forward.
  auto merged = load_model(tmp / "merged" / "transformer");
  const double err = max_abs(forward(merged, in), y_adapted);
  std::printf("  merged forward max abs err vs base+adapter %.3g\n", err);
  EXPECT_LE(err, 1e-5);
  auto base = load_model(kFluxTiny / "transformer");
  EXPECT_GT(max_abs(forward(base, in), y_adapted), 1e-2) << "the adapter must matter";

  // The rest of the repository is there, byte for byte; the output opens as a Diffusers repo.
  for (const char* f : {"model_index.json", "scheduler/scheduler_config.json", "vae/config.json",
                        "text_encoder_2/model.safetensors.index.json", "tokenizer_2/spiece.model",
                        "transformer/config.json"}) {
    ASSERT_TRUE(fs::exists(tmp / "merged" / f)) << f;
    EXPECT_EQ(yeto::test::read_text(tmp / "merged" / f), yeto::test::read_text(kFluxTiny / f)) << f;
  }
  EXPECT_FALSE(fs::exists(tmp / "merged" / "transformer" / "diffusion_pytorch_model-00001-of-00002.safetensors"));
  const auto out_repo = yeto::io::DiffusersRepo::open(tmp / "merged");
  EXPECT_EQ(out_repo.components().size(), repo.components().size());
  std::size_t others = 0;
  for (const auto& e : fs::recursive_directory_iterator(kFluxTiny))
    if (e.is_regular_file() && e.path().parent_path().filename() != "transformer") ++others;
  EXPECT_EQ(rep.linked + rep.copied, others + 1) << "every other file, plus transformer/config.json";

  // A non-empty output directory is refused.
  EXPECT_NE(error_of([&] { merge_adapter(mo); }).find("not empty"), std::string::npos);

  // Another base (one weight changed) is refused, naming both.
  fs::copy(kFluxTiny, tmp / "other-base", fs::copy_options::recursive);
  {
    const fs::path shard = tmp / "other-base" / "transformer" / "diffusion_pytorch_model-00001-of-00002.safetensors";
    fs::permissions(shard, fs::perms::owner_write, fs::perm_options::add);
    auto t = yeto::io::load_safetensors(shard);
    std::vector<std::pair<std::string, at::Tensor>> v(t.begin(), t.end());
    v.front().second = v.front().second + 1;
    yeto::io::save_safetensors(shard, v, {{"format", "pt"}});
  }
  mo.model = (tmp / "other-base").string();
  mo.output_dir = tmp / "merged-other";
  const std::string refused = error_of([&] { merge_adapter(mo); });
  EXPECT_NE(refused.find("component transformer content"), std::string::npos) << refused;
  EXPECT_NE(refused.find(kFluxTiny.string()), std::string::npos) << refused;
  EXPECT_NE(refused.find("other-base"), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(tmp / "merged-other"));

  // A recorded hub commit that differs from the resolved one is named.
  json rec = {{"base_model", {{"id", "org/flux"}, {"commit", std::string(40, 'a')}}}};
  yeto::io::ResolvedRepo hub;
  hub.id = "org/flux";
  hub.commit = std::string(40, 'b');
  const auto mm = base_mismatches(rec, hub, repo);
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_NE(mm[0].find(std::string(40, 'a')), std::string::npos);
  EXPECT_NE(mm[0].find(std::string(40, 'b')), std::string::npos);
}

TEST(Merge, OneModelDirectoryMergesIntoOneModelDirectory) {
  // The fixture's PEFT adapter (alpha 8) folded into its one-model base reproduces sample_lora.
  yeto::test::TempDir tmp;
  MergeOptions mo;
  mo.model = kLoraCase.string();
  mo.adapter = kLoraCase / "lora_peft";
  mo.max_shard_bytes = parse_size("100KB");
  mo.output_dir = tmp / "o";
  const MergeReport rep = merge_adapter(mo);
  ASSERT_EQ(rep.components.size(), 1u);
  EXPECT_EQ(rep.components[0].component, "");
  EXPECT_EQ(rep.components[0].modules, 7u);
  auto merged = load_model(tmp / "o");
  const auto inputs = yeto::io::load_safetensors(kLoraCase / "inputs.safetensors");
  const auto expected = yeto::io::load_safetensors(kLoraCase / "expected.safetensors");
  expect_within(forward(merged, inputs), expected.at("sample_lora"),
                read_json(kLoraCase / "case.json").at("compare").at("sample_lora"), "merge lora_peft -> sample_lora");
  EXPECT_TRUE(fs::exists(tmp / "o" / "diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(tmp / "o" / "config.json"));
  EXPECT_FALSE(fs::exists(tmp / "o" / "lora_peft")) << "sub-directories of a one-model directory stay behind";
}

TEST(ExportSettings, RecordedRunConfigIsTheDefaultAndContradictionsAreRefused) {
  yeto::test::TempDir tmp;
  using yeto::config::Config;
  using yeto::config::Override;
  const Config trained = Config::resolve(std::nullopt, {{"model.id", kFluxTiny.string(), "--model"},
                                                        {"lora.r", "4", "--lora-r"},
                                                        {"lora.alpha", "6", "--lora-alpha"},
                                                        {"sync.fragments", "3", "--fragments"}});
  tmp.write("run/config.toml", trained.to_toml(true));
  const fs::path ckpt = tmp.write("run/syncer/checkpoint.bin", "x");
  EXPECT_EQ(fs::canonical(find_run_config(ckpt)), fs::canonical(tmp / "run/config.toml"));

  // No flags: the recorded values.
  const auto plain = resolve_export_config(ckpt, std::nullopt, {});
  const ExportSettings s = export_settings(plain.config);
  EXPECT_EQ(s.model, kFluxTiny.string());
  EXPECT_EQ(s.r, 4);
  EXPECT_DOUBLE_EQ(s.alpha, 6.0);
  EXPECT_EQ(s.fragments, 3u);
  // Agreeing and unrelated flags are fine.
  EXPECT_NO_THROW(resolve_export_config(ckpt, std::nullopt,
                                        {{"lora.r", "4", "--lora-r"}, {"log.level", "debug", "--log-level"}}));
  // A contradicting one names the key, the flag, both values and the file.
  const std::string e = error_of([&] {
    resolve_export_config(ckpt, std::nullopt, {{"lora.r", "8", "--lora-r"}, {"sync.fragments", "2", "--fragments"}});
  });
  EXPECT_NE(e.find("lora.r: --lora-r gives 8, the run recorded 4"), std::string::npos) << e;
  EXPECT_NE(e.find("sync.fragments: --fragments gives 2, the run recorded 3"), std::string::npos) << e;
  EXPECT_NE(e.find("config.toml"), std::string::npos) << e;

  // Without a recorded config the flags are the settings.
  const fs::path loose = tmp.write("loose/checkpoint.bin", "x");
  const auto flags = resolve_export_config(loose, std::nullopt, {{"lora.r", "8", "--lora-r"}});
  EXPECT_TRUE(flags.recorded_file.empty());
  EXPECT_NE(error_of([&] { export_settings(flags.config); }).find("--model"), std::string::npos);
  const auto with_model = resolve_export_config(loose, std::nullopt, {{"lora.r", "8", "--lora-r"}, {"model.id", "m", "--model"}});
  EXPECT_EQ(export_settings(with_model.config).r, 8);
}

// Wan 2.2's low-noise expert: the Diffusers file names its keys "transformer." (Diffusers loads
// it with load_into_transformer_2=True) while the record keeps transformer_2, and every reader
// routes it by the record or an explicit DIR:COMPONENT; without either, a two-denoiser read is
// refused saying what to pass.
TEST(AdapterLayouts, SecondExpertUsesDiffusersTransformerKeysAndKeepsItsComponent) {
  yeto::test::TempDir tmp;
  auto g = at::make_generator<at::CPUGeneratorImpl>(7);
  AdapterExport e;
  e.component = "transformer_2";
  e.r = 2;
  e.alpha = 3;
  for (const std::string path : {"blocks.0.attn1.to_q", "blocks.0.ffn.net.2"}) {
    LoraModule m;
    m.A = at::randn({2, 8}, g);
    m.B = at::randn({6, 2}, g);
    e.modules.emplace(path, m);
  }
  e.base_model_class = "WanTransformer3DModel";
  write_adapter_dir(tmp / "low", e);
  EXPECT_EQ(diffusers_key_prefix("transformer_2"), "transformer");
  EXPECT_EQ(diffusers_key_prefix("transformer"), "transformer");
  EXPECT_EQ(diffusers_key_prefix("unet"), "unet");

  const auto file = yeto::io::load_safetensors(tmp / "low" / kDiffusersFile);
  ASSERT_EQ(file.size(), 4u);
  for (const auto& [name, t] : file) EXPECT_EQ(name.rfind("transformer.blocks.0.", 0), 0u) << name;
  const json record = read_json(tmp / "low" / kRecordFile);
  EXPECT_EQ(record.at("lora").at("component"), "transformer_2");
  EXPECT_EQ(record.at("trainable_modules").at(0).get<std::string>().rfind("transformer_2.", 0), 0u);
  EXPECT_NE(record.at("layouts").at("diffusers").at("load").get<std::string>().find("load_into_transformer_2=True"),
            std::string::npos);
  // PEFT names carry no component; its config is the same as for the first expert.
  for (const auto& [name, t] : yeto::io::load_safetensors(tmp / "low" / kPeftWeightsFile))
    EXPECT_EQ(name.rfind("base_model.model.blocks.0.", 0), 0u) << name;

  // The Diffusers file (the directory's, or named directly) reads as transformer_2, alpha/r folded.
  ReadOptions two;
  two.denoisers = {"transformer", "transformer_2"};
  ReadOptions forced = two;
  forced.layout = Layout::diffusers;
  auto expect_low = [&](const Adapter& a, const std::string& what) {
    ASSERT_EQ(a.components(), std::vector<std::string>{"transformer_2"}) << what;
    for (const auto& [path, m] : e.modules) {
      const auto& got = a.modules.at("transformer_2." + path);
      EXPECT_TRUE(at::equal(got.A, m.A)) << what << " " << path;
      EXPECT_LE((got.scale * got.B - 1.5 * m.B).abs().max().item<double>(), 1e-6) << what << " " << path;
    }
  };
  expect_low(read_adapter(tmp / "low", forced), "directory, Diffusers layout");
  expect_low(read_adapter(tmp / "low" / kDiffusersFile, two), "the Diffusers file next to its record");
  expect_low(read_adapter(tmp / "low", two), "directory (PEFT pair)");
  // Choosing the other expert contradicts the record.
  ReadOptions wrong = forced;
  wrong.into = "transformer";
  const std::string contradiction = error_of([&] { read_adapter(tmp / "low", wrong); });
  EXPECT_NE(contradiction.find("records the adapter for transformer_2"), std::string::npos) << contradiction;

  // The same file without our record, as Diffusers users pass it around.
  fs::create_directories(tmp / "bare");
  fs::copy_file(tmp / "low" / kDiffusersFile, tmp / "bare" / kDiffusersFile);
  const std::string ambiguous = error_of([&] { read_adapter(tmp / "bare", two); });
  EXPECT_NE(ambiguous.find("does not say which one it is for"), std::string::npos) << ambiguous;
  EXPECT_NE(ambiguous.find("pass --adapter-dir " + (tmp / "bare").string() + ":transformer or " +
                           (tmp / "bare").string() + ":transformer_2"),
            std::string::npos)
      << ambiguous;
  ReadOptions chosen = two;
  chosen.into = "transformer_2";
  expect_low(read_adapter(tmp / "bare", chosen), "record-less file, DIR:transformer_2");
  chosen.into = "transformer";
  EXPECT_EQ(read_adapter(tmp / "bare", chosen).components(), std::vector<std::string>{"transformer"});
  // One denoiser: "transformer." is simply the transformer.
  EXPECT_EQ(read_adapter(tmp / "bare").components(), std::vector<std::string>{"transformer"});
  // A file with "transformer_2." keys (Yeto's earlier exports) names its expert itself.
  std::vector<std::pair<std::string, at::Tensor>> legacy;
  for (const auto& [name, t] : file) legacy.emplace_back("transformer_2." + name.substr(12), t);
  yeto::io::save_safetensors(tmp / "legacy.safetensors", legacy);
  expect_low(read_adapter(tmp / "legacy.safetensors", two), "transformer_2.-prefixed file");
  ReadOptions other = two;
  other.into = "transformer";
  const std::string mismatch = error_of([&] { read_adapter(tmp / "legacy.safetensors", other); });
  EXPECT_NE(mismatch.find("prefixed 'transformer_2.'"), std::string::npos) << mismatch;

  // --adapter-dir DIR:COMPONENT, and paths that exist as given are never split.
  EXPECT_EQ(parse_adapter_arg("a/b:transformer_2").path, fs::path("a/b"));
  EXPECT_EQ(parse_adapter_arg("a/b:transformer_2").component, "transformer_2");
  EXPECT_EQ(parse_adapter_arg("a/b").component, "");
  EXPECT_EQ(parse_adapter_arg("a/b:x/y").component, "");
  fs::create_directories(tmp / "odd:name");
  EXPECT_EQ(parse_adapter_arg((tmp / "odd:name").string()).path, tmp / "odd:name");
  EXPECT_EQ(parse_adapter_arg((tmp / "odd:name").string()).component, "");
}
