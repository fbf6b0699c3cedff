// HunYuanDiTPlain in process against the hy3dshape-recorded hunyuan3d-dit case: the checkpoint's
// names load strictly, eval and train mode agree on the output, the LoRA target sets (auto, the
// to_q,to_k,to_v,out_proj,proj,net.2 list, all-linear) adapt the expected layers and train through
// the interleaved heads, and bad configs and inputs are refused naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "hunyuan3d_calls.hpp"
#include "hunyuan3d_dinov2.hpp"
#include "hunyuan3d_dit.hpp"
#include "hunyuan3d_family.hpp"
#include "hunyuan3d_shapevae.hpp"
#include "io/tensors.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace h3d = yeto::hunyuan3d;

namespace {

const fs::path kCase = fs::path(YETO_TEST_FIXTURES) / "parity" / "hunyuan3d-dit";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

h3d::HunYuanDiTPlain load_model() {
  auto model = h3d::HunYuanDiTPlain(h3d::DiTConfig::from_json(read_json(kCase / "config.json")));
  yeto::nn::load_named_tensors(*model, yeto::io::load_safetensors(kCase / "model.safetensors"));
  model->eval();
  return model;
}

struct Inputs {
  std::map<std::string, at::Tensor> in = yeto::io::load_safetensors(kCase / "inputs.safetensors");
  at::Tensor run(h3d::HunYuanDiTPlain& m) const { return m->forward(in.at("x"), in.at("t"), in.at("contexts.main")); }
};

}  // namespace

TEST(HunYuanDiTPlain, CheckpointNamesAreTheUpstreamStateDict) {
  auto model = h3d::HunYuanDiTPlain(h3d::DiTConfig::from_json(read_json(kCase / "config.json")));
  const auto weights = yeto::io::load_safetensors(kCase / "model.safetensors");
  std::set<std::string> ours;
  for (const auto& p : model->named_parameters()) ours.insert(p.key());
  std::set<std::string> theirs;
  for (const auto& [n, t] : weights) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
  // Blocks 2 and 3 are MoE (depth - i <= num_moe_layers), block 3 has the U-Net skip.
  EXPECT_TRUE(ours.count("blocks.2.moe.gate.weight"));
  EXPECT_TRUE(ours.count("blocks.1.mlp.fc1.weight"));
  EXPECT_TRUE(ours.count("blocks.3.skip_linear.weight"));
  EXPECT_FALSE(ours.count("blocks.2.skip_linear.weight"));
}

TEST(HunYuanDiTPlain, ForwardMatchesInEvalAndTrainModeAndTrainRecordsAuxLosses) {
  auto model = load_model();
  const Inputs in;
  const auto expected = yeto::io::load_safetensors(kCase / "expected.safetensors");
  torch::NoGradGuard ng;
  const auto eval_out = in.run(model);
  EXPECT_TRUE(at::allclose(eval_out, expected.at("sample"), 1e-4, 1.85e-4));
  EXPECT_TRUE(model->moe_aux_losses().empty());
  model->train();
  const auto train_out = in.run(model);
  EXPECT_TRUE(at::allclose(train_out, expected.at("train.sample"), 1e-4, 1.85e-4));
  const auto aux = model->moe_aux_losses();
  ASSERT_EQ(aux.size(), 2u);
  EXPECT_EQ(aux[0].first, "blocks.2.moe.gate");
  EXPECT_NEAR(aux[0].second.item<double>(), expected.at("train.moe_aux_loss.blocks.2.moe.gate").item<double>(), 1e-6);
  EXPECT_NEAR(aux[1].second.item<double>(), expected.at("train.moe_aux_loss.blocks.3.moe.gate").item<double>(), 1e-6);
}

TEST(HunYuanDiTPlain, LoraTargetSets) {
  const auto& d = h3d::description();
  const auto count = [&](const nlohmann::json& targets) {
    auto model = load_model();
    const auto t = d.lora_targets(targets);
    yeto::nn::LoraConfig lc;
    lc.r = 2;
    if (t.all_linear) {
      std::size_t n = 0;
      for (const auto& [path, layer] : yeto::nn::lora_capable_layers(*model)) n += path != "final_layer.linear";
      return n;
    }
    return yeto::nn::add_lora(*model, t.patterns, lc).size();
  };
  // auto = attention: attn1 and attn2 to_q, to_k, to_v, out_proj of 4 blocks.
  EXPECT_EQ(count("auto"), 32u);
  EXPECT_EQ(count("attention"), 32u);
  // The community list: the 32 attention projections, plus net.0.proj ("proj") and net.2 of the
  // 4 experts and the shared expert in each of the 2 MoE blocks (out_proj does not end in ".proj").
  EXPECT_EQ(count(nlohmann::json::array({"to_q", "to_k", "to_v", "out_proj", "proj", "net.2"})), 52u);
  // all-linear: every Linear but the output layer: x_embedder, t_embedder.mlp.{0,2}, 8 attention
  // projections per block, mlp.fc1/fc2 in blocks 0-1, 10 expert projections in blocks 2-3, skip_linear.
  EXPECT_EQ(count("all-linear"), 3u + 32u + 4u + 20u + 1u);
}

TEST(HunYuanDiTPlain, LoraStartsAsTheBaseAndTrainsThroughTheInterleavedHeads) {
  auto model = load_model();
  const Inputs in;
  at::Tensor before;
  {
    torch::NoGradGuard ng;
    before = in.run(model);
  }
  for (auto& p : model->parameters()) p.set_requires_grad(false);  // as prepare freezes the base
  yeto::nn::LoraConfig lc;
  lc.r = 2;
  lc.alpha = 2;
  const auto paths = yeto::nn::add_lora(*model, h3d::description().lora_targets("auto").patterns, lc);
  EXPECT_EQ(paths.size(), 32u);
  {
    torch::NoGradGuard ng;
    EXPECT_TRUE(at::equal(in.run(model), before));  // B = 0
  }
  std::vector<at::Tensor> trainable;
  for (auto& p : model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  EXPECT_EQ(trainable.size(), 64u);  // lora_A and lora_B of each adapted layer
  model->train();
  torch::optim::SGD opt(trainable, torch::optim::SGDOptions(0.05));
  const auto target = at::zeros_like(before);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    const auto loss = (in.run(model) - target).pow(2).mean();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first);
}

TEST(HunYuanDiTPlain, RefusesBadConfigsAndInputsNamingTheKey) {
  const auto base = read_json(kCase / "config.json");
  const auto refused = [&](const char* key, const nlohmann::json& value, const std::string& says) {
    auto j = base;
    j[key] = value;
    try {
      h3d::DiTConfig::from_json(j);
      ADD_FAILURE() << key << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(key), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  };
  refused("use_pos_emb", true, "Hunyuan3D-2.1");
  refused("with_decoupled_ca", true, "Hunyuan3D-2.1");
  refused("num_heads", 5, "multiple");
  refused("qk_norm_type", "l2", "supported");
  refused("moe_top_k", 9, "num_experts");
  refused("depth", 0, "positive");

  auto model = load_model();
  const Inputs in;
  torch::NoGradGuard ng;
  EXPECT_THROW(model->forward(in.in.at("x").narrow(2, 0, 4), in.in.at("t"), in.in.at("contexts.main")),
               std::invalid_argument);
  EXPECT_THROW(model->forward(in.in.at("x"), in.in.at("t"), in.in.at("contexts.main").narrow(2, 0, 8)),
               std::invalid_argument);
  EXPECT_THROW(model->forward(in.in.at("x"), at::zeros({3}), in.in.at("contexts.main")), std::invalid_argument);
}

TEST(ShapeVAE, DenseGridIsIjWithZFastestAndConfigErrorsNameTheKey) {
  const auto p = h3d::dense_grid_points(1.0, 2);  // 3 points per axis: -1, 0, 1
  ASSERT_EQ(p.sizes(), (std::vector<int64_t>{27, 3}));
  EXPECT_TRUE(at::equal(p[0], at::tensor({-1.f, -1.f, -1.f})));
  EXPECT_TRUE(at::equal(p[1], at::tensor({-1.f, -1.f, 0.f})));   // z fastest
  EXPECT_TRUE(at::equal(p[3], at::tensor({-1.f, 0.f, -1.f})));   // then y
  EXPECT_TRUE(at::equal(p[9], at::tensor({0.f, -1.f, -1.f})));   // x slowest
  EXPECT_THROW(h3d::dense_grid_points(1.0, 0), std::invalid_argument);
  auto j = read_json(fs::path(YETO_TEST_FIXTURES) / "parity" / "hunyuan3d-shapevae-decode" / "config.json");
  j["geo_decoder_downsample_ratio"] = 2;
  try {
    h3d::ShapeVAEConfig::from_json(j);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("geo_decoder_downsample_ratio"), std::string::npos) << e.what();
  }
}

// The numbers of recorded Python calls, read as tokens rather than by pattern.
TEST(Hunyuan3DCalls, KeywordAndCallNumbersAreReadAsPythonTokens) {
  using yeto::hunyuan3d::call_number;
  using yeto::hunyuan3d::keyword_number;
  const std::string decoder =
      "grid_logits = vae.volume_decoder(decoded_latents, vae.geo_decoder, bounds=1.01, num_chunks=200, "
      "octree_resolution=7)";
  EXPECT_EQ(keyword_number(decoder, "bounds"), 1.01);
  EXPECT_EQ(keyword_number(decoder, "num_chunks"), 200.0);
  EXPECT_EQ(keyword_number(decoder, "octree_resolution"), 7.0);
  EXPECT_FALSE(keyword_number(decoder, "mc_level"));
  const std::string pipe =
      "Pipeline(vae, FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000), None)(image, num_inference_steps = 3, "
      "guidance_scale=5e0, generator=torch.Generator().manual_seed(4_010), output_type='latent, guidance_scale=9')";
  EXPECT_EQ(keyword_number(pipe, "num_inference_steps"), 3.0);
  EXPECT_EQ(keyword_number(pipe, "guidance_scale"), 5.0);  // not the one inside the string literal
  EXPECT_EQ(keyword_number(pipe, "num_train_timesteps"), 1000.0);
  EXPECT_EQ(call_number(pipe, "manual_seed"), 4010.0);
  // Whole names only, never a comparison, a longer name or an attribute.
  EXPECT_FALSE(keyword_number("f(xbounds=2, y=bounds == 1)", "bounds"));
  EXPECT_FALSE(keyword_number("bounds = 3", "bounds"));  // an assignment, not an argument
  EXPECT_EQ(keyword_number("f(a, bounds=-2.5e-1)", "bounds"), -0.25);
  EXPECT_EQ(keyword_number("f(a, bounds=.5)", "bounds"), 0.5);
  // A value that is no number literal, a name given twice, a seed call with two arguments: refused.
  EXPECT_THROW(keyword_number("f(bounds=b)", "bounds"), std::invalid_argument);
  EXPECT_THROW(keyword_number("f(bounds=1 + 2)", "bounds"), std::invalid_argument);
  EXPECT_THROW(keyword_number("f(bounds=1_)", "bounds"), std::invalid_argument);
  EXPECT_THROW(keyword_number("f(bounds=1, g(bounds=2))", "bounds"), std::invalid_argument);
  EXPECT_THROW(call_number("g.manual_seed(1, 2)", "manual_seed"), std::invalid_argument);
  EXPECT_FALSE(call_number("g.initial_seed()", "manual_seed"));
}

// DINOv2 in process against the dinov2-encoder recording: the native-size forward and the
// interpolated position tables (the whole case runs through check-parity in the host test).
TEST(Dinov2, ForwardAndInterpolatedPositionTablesMatchTheRecording) {
  const auto dir = fs::path(YETO_TEST_FIXTURES) / "parity" / "dinov2-encoder";
  std::ifstream in(dir / "config.json");
  h3d::Dinov2Model model(h3d::Dinov2Config::from_json(nlohmann::json::parse(in)));
  const auto weights = yeto::io::load_safetensors(dir / "model.safetensors");
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    ASSERT_TRUE(weights.count(p.key())) << p.key();
    p.value().copy_(weights.at(p.key()));
  }
  EXPECT_EQ(model->named_parameters().size(), weights.size());
  model->eval();
  const auto inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto expected = yeto::io::load_safetensors(dir / "expected.safetensors");
  const auto out = model->forward(inputs.at("pixel_values"));
  EXPECT_TRUE(torch::allclose(out.last_hidden_state, expected.at("last_hidden_state"), 1e-4, 3e-4));
  const auto up = model->forward(inputs.at("interp_up.pixel_values"));
  EXPECT_TRUE(torch::allclose(up.position_table, expected.at("pos_embed.4x4"), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(up.last_hidden_state, expected.at("interp_up.last_hidden_state"), 1e-4, 3e-4));
}
