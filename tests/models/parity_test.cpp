// Parity of the shared components against the reference fixtures copied into
// tests/fixtures/parity/: every compared output within the tolerance its case.json declares,
// on CPU float32.
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/tensors.hpp"
#include "models/autoencoder_kl.hpp"
#include "models/clip_text.hpp"
#include "models/ltx2_audio.hpp"
#include "models/model_components.hpp"
#include "models/model_parity.hpp"
#include "parity/parity.hpp"
#include "models/t5_encoder.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"
#include "yeto/torch_compat.hpp"

namespace {

namespace fs = std::filesystem;
using yeto::models::AutoencoderKL;
using yeto::models::AutoencoderKLConfig;

struct Case {
  std::string name;
  fs::path dir;
  nlohmann::json case_json;
  nlohmann::json config;
  std::map<std::string, at::Tensor> weights;
  std::map<std::string, at::Tensor> inputs;
  std::map<std::string, at::Tensor> expected;
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return nlohmann::json::parse(in);
}

Case load_case(const std::string& name) {
  Case c;
  c.name = name;
  // YETO_SOURCE_DIR rather than YETO_TEST_FIXTURES: the latter is set per test directory.
  c.dir = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity" / name;
  c.case_json = read_json(c.dir / "case.json");
  c.config = read_json(c.dir / "config.json");
  const auto weights = fs::exists(c.dir / "model.safetensors") ? c.dir / "model.safetensors"
                                                               : c.dir / "diffusion_pytorch_model.safetensors";
  c.weights = yeto::io::load_safetensors(weights);
  c.inputs = yeto::io::load_safetensors(c.dir / "inputs.safetensors");
  c.expected = yeto::io::load_safetensors(c.dir / "expected.safetensors");
  return c;
}

// allclose under the case's tolerance for `key`; records and prints the measured errors.
void expect_close(const Case& c, const std::string& key, const at::Tensor& actual) {
  ASSERT_TRUE(c.expected.count(key)) << c.name << ": no expected tensor " << key;
  ASSERT_TRUE(c.case_json["compare"].contains(key)) << c.name << ": no tolerance for " << key;
  const auto& tol = c.case_json["compare"][key];
  const double rtol = tol["rtol"].get<double>();
  const double atol = tol["atol"].get<double>();
  const auto expected = c.expected.at(key).to(at::kDouble);
  ASSERT_TRUE(actual.defined()) << c.name << ": " << key << " not produced";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << c.name << ": " << key;
  const auto a = actual.detach().to(at::kDouble);
  const auto diff = (a - expected).abs();
  const double max_abs = diff.max().item<double>();
  const auto nz = expected.abs() > 0;
  const double max_rel = nz.any().item<bool>() ? (diff.masked_select(nz) / expected.abs().masked_select(nz)).max().item<double>() : 0.0;
  const bool ok = (diff <= atol + rtol * expected.abs()).all().item<bool>();
  std::printf("[parity] %-22s %-28s max_abs %.3e  max_rel %.3e  (atol %.2e rtol %.0e) %s\n", c.name.c_str(),
              key.c_str(), max_abs, max_rel, atol, rtol, ok ? "PASS" : "FAIL");
  EXPECT_TRUE(ok) << c.name << ": " << key << " max_abs " << max_abs << " beyond atol " << atol;
}

// ---- AutoencoderKL -----------------------------------------------------------------------------

AutoencoderKL make_vae(const Case& c) {
  AutoencoderKL vae(AutoencoderKLConfig::from_json(c.config));
  yeto::nn::LoadOptions opt;
  opt.rename = yeto::models::autoencoder_kl_rename;
  auto report = yeto::nn::load_named_tensors(*vae, c.weights, opt);
  EXPECT_EQ(report.loaded.size(), c.weights.size());
  vae->eval();
  return vae;
}

TEST(AutoencoderKLParity, Vae16ChannelEncodeDecode) {
  auto c = load_case("vae-kl-16ch");
  auto vae = make_vae(c);
  // named_parameters() is the Diffusers state-dict naming.
  EXPECT_TRUE(vae->named_parameters().contains("encoder.down_blocks.0.resnets.0.conv1.weight"));
  EXPECT_TRUE(vae->named_parameters().contains("decoder.mid_block.attentions.0.to_out.0.weight"));
  EXPECT_FALSE(vae->quant_conv);
  EXPECT_FALSE(vae->post_quant_conv);
  at::NoGradGuard no_grad;
  auto dist = vae->encode(c.inputs.at("x"));
  expect_close(c, "encode.latent_dist.mean", dist.mean);
  expect_close(c, "encode.latent_dist.std", dist.std);
  expect_close(c, "encode.latent_dist.logvar", dist.logvar);
  expect_close(c, "decode.sample", vae->decode(c.inputs.at("z")));
}

TEST(AutoencoderKL, SamplingUsesTheSeededStream) {
  auto c = load_case("vae-kl-16ch");
  auto vae = make_vae(c);
  at::NoGradGuard no_grad;
  auto dist = vae->encode(c.inputs.at("x"));
  auto a = dist.sample(yeto::compat::make_cpu_generator(7));
  auto b = dist.sample(yeto::compat::make_cpu_generator(7));
  auto other = dist.sample(yeto::compat::make_cpu_generator(8));
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(other));
  auto eps = at::randn(dist.mean.sizes(), yeto::compat::make_cpu_generator(7), dist.mean.options());
  EXPECT_TRUE(at::allclose(a, dist.mean + dist.std * eps));
  // Latent scaling as the SD3 / Flux pipelines use it.
  const auto& cfg = vae->config();
  ASSERT_TRUE(cfg.shift_factor.has_value());
  auto z = vae->scale_latents(a);
  EXPECT_TRUE(at::allclose(z, (a - *cfg.shift_factor) * cfg.scaling_factor));
  EXPECT_TRUE(at::allclose(vae->unscale_latents(z), a, 1e-5, 1e-6));
}

// A bf16 VAE (model.precision = bf16 converts every component) encodes close to its float32
// self. Its mid block's attention hands back a channels-last tensor, whose GroupNorms LibTorch
// 1.13's bf16 CPU kernel computed 8-12 % off: this layout (the SD3.5 `mid` preset's VAE at
// 256 px, batch 2: with batch 1 the kernel stayed close) encoded 16 % off float32 and moved
// SD3.5 mid's bf16 first-step loss 4 %; nn::group_norm runs the norms in float32 (2.4 %, the
// rounding of 20 bf16 convolutions).
TEST(AutoencoderKL, Bf16EncodeTracksFloat32) {
  const auto cfg = AutoencoderKLConfig::from_json(
      {{"block_out_channels", {32, 64, 128, 128}},
       {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"}},
       {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"}},
       {"norm_num_groups", 32},
       {"layers_per_block", 2},
       {"latent_channels", 16},
       {"sample_size", 256},
       {"use_quant_conv", false},
       {"use_post_quant_conv", false}});
  at::manual_seed(0);
  AutoencoderKL f32(cfg);
  at::manual_seed(0);
  AutoencoderKL b16(cfg);
  b16->to(at::kBFloat16);
  at::NoGradGuard no_grad;
  const auto x = at::rand({2, 3, 256, 256}, yeto::compat::make_cpu_generator(3)) * 2 - 1;
  const auto ref = f32->encode(x).mean;
  const auto got = b16->encode(x.to(at::kBFloat16)).mean.to(at::kFloat);
  const double rel = ((got - ref).norm() / ref.norm()).item<double>();
  EXPECT_LT(rel, 0.05) << "bf16 latents " << rel << " relative to float32";
  // The spread too, not only the direction: the channels-last kernel inflated it by 12 %.
  EXPECT_NEAR(got.std().item<double>() / ref.std().item<double>(), 1.0, 0.02);
}

TEST(AutoencoderKL, TiledEncodeDecode) {
  auto c = load_case("vae-kl-16ch");
  auto vae = make_vae(c);
  at::NoGradGuard no_grad;
  auto x = c.inputs.at("x");
  auto full = vae->encode(x).mean;
  // One tile covering the whole image is the untiled computation.
  vae->enable_tiling({true, 16, 0.25});
  EXPECT_TRUE(vae->encode(x).mean.equal(full));
  // 4x4 latent tiles with overlap on a 32x32 image: the blended result has the full size and
  // agrees with the untiled encoder away from the seams' context loss.
  auto big = at::cat({at::cat({x, x.flip(3)}, 3), at::cat({x.flip(2), x}, 3)}, 2);
  vae->enable_tiling({true, 8, 0.25});
  auto tiled = vae->encode(big);
  vae->disable_tiling();
  auto untiled = vae->encode(big);
  ASSERT_EQ(tiled.mean.sizes(), untiled.mean.sizes());
  EXPECT_TRUE(tiled.mean.isfinite().all().item<bool>());
  EXPECT_FALSE(tiled.mean.equal(untiled.mean));
  vae->enable_tiling({true, 8, 0.25});
  auto dec = vae->decode(untiled.mean);
  EXPECT_EQ(dec.sizes(), big.sizes());
  EXPECT_TRUE(dec.isfinite().all().item<bool>());
}

TEST(AutoencoderKL, ConfigErrorsNameTheKey) {
  auto cfg = load_case("vae-kl-16ch").config;
  cfg["down_block_types"] = {"DownEncoderBlock2D", "CrossAttnDownBlock2D"};
  try {
    (void)AutoencoderKLConfig::from_json(cfg, "vae/config.json");
    FAIL() << "expected an error";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("vae/config.json: key 'down_block_types'"), std::string::npos) << e.what();
  }
}

// The analytic pixel codec: latents are the block means of the image in channels 0-2 (exactly a
// sample: log variance -30), and decoding repeats them over the block -- for the Flux layout
// (16 latent channels, no quant convs, 4 blocks) and an SD-style one (4 channels, quant convs,
// 3 blocks). A random VAE does neither; a config it cannot serve is refused naming the key.
TEST(AutoencoderKL, PixelCodecEncodesBlockMeansAndDecodesBlocks) {
  struct Layout {
    nlohmann::json config;
    std::int64_t factor;
  };
  const std::vector<Layout> layouts = {
      {{{"block_out_channels", {8, 16, 16, 16}}, {"down_block_types", std::vector<std::string>(4, "DownEncoderBlock2D")},
        {"up_block_types", std::vector<std::string>(4, "UpDecoderBlock2D")}, {"layers_per_block", 2},
        {"latent_channels", 16}, {"norm_num_groups", 1}, {"use_quant_conv", false}, {"use_post_quant_conv", false}},
       8},
      {{{"block_out_channels", {8, 12, 12}}, {"down_block_types", std::vector<std::string>(3, "DownEncoderBlock2D")},
        {"up_block_types", std::vector<std::string>(3, "UpDecoderBlock2D")}, {"layers_per_block", 1},
        {"latent_channels", 4}, {"norm_num_groups", 1}},
       4}};
  for (const auto& l : layouts) {
    SCOPED_TRACE(l.config.dump());
    torch::manual_seed(3);
    const auto cfg = AutoencoderKLConfig::from_json(l.config, "vae/config.json");
    AutoencoderKL vae(cfg);
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (const auto& p : vae->named_parameters()) params.emplace_back(p.key(), p.value());
    yeto::models::set_pixel_codec_weights(cfg, params, "vae");
    at::NoGradGuard no_grad;
    const std::int64_t f = l.factor, side = 8 * f;
    // Flat blocks of random colours: encoded to their colours, decoded back to the image.
    const auto colours = at::rand({2, 3, 8, 8}) * 2 - 1;
    const auto blocks = colours.repeat_interleave(f, 2).repeat_interleave(f, 3);
    const auto dist = vae->encode(blocks);
    ASSERT_EQ(dist.mean.sizes(), (at::IntArrayRef{2, cfg.latent_channels, 8, 8}));
    EXPECT_LT((dist.mean.narrow(1, 0, 3) - colours).abs().max().item<double>(), 2e-4);
    EXPECT_EQ(dist.mean.narrow(1, 3, cfg.latent_channels - 3).abs().max().item<double>(), 0.0);
    EXPECT_TRUE((dist.logvar == -30).all().item<bool>());
    EXPECT_LT((vae->decode(dist.mean) - blocks).abs().max().item<double>(), 5e-4);
    // Any image: the latent is the mean of each block.
    const auto noise = at::rand({1, 3, side, side}) * 2 - 1;
    const auto means = at::avg_pool2d(noise, {f, f});
    EXPECT_LT((vae->encode(noise).mean.narrow(1, 0, 3) - means).abs().max().item<double>(), 2e-4);
  }
  auto bad = layouts[0].config;
  bad["norm_num_groups"] = 4;
  const auto cfg = AutoencoderKLConfig::from_json(bad, "vae/config.json");
  AutoencoderKL vae(cfg);
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : vae->named_parameters()) params.emplace_back(p.key(), p.value());
  try {
    yeto::models::set_pixel_codec_weights(cfg, params, "vae/config.json");
    FAIL() << "expected an error";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("vae/config.json: key 'norm_num_groups'"), std::string::npos) << e.what();
  }
}

TEST(AutoencoderKL, LegacyAttentionNamesAreRenamed) {
  EXPECT_EQ(yeto::models::autoencoder_kl_rename("encoder.mid_block.attentions.0.query.weight"),
            "encoder.mid_block.attentions.0.to_q.weight");
  EXPECT_EQ(yeto::models::autoencoder_kl_rename("decoder.mid_block.attentions.0.proj_attn.bias"),
            "decoder.mid_block.attentions.0.to_out.0.bias");
  EXPECT_EQ(yeto::models::autoencoder_kl_rename("encoder.conv_in.weight"), "encoder.conv_in.weight");
}

// ---- CLIP --------------------------------------------------------------------------------------

TEST(CLIPTextParity, WithProjectionAllOutputs) {
  auto c = load_case("clip-text");
  auto cfg = yeto::models::CLIPTextConfig::from_json(c.config);
  yeto::models::CLIPTextModel model(cfg, /*with_projection=*/true);
  yeto::nn::LoadOptions opt;
  opt.ignore_unexpected = model->ignored_checkpoint_names();
  yeto::nn::load_named_tensors(*model, c.weights, opt);
  model->eval();
  at::NoGradGuard no_grad;
  auto out = model->forward(c.inputs.at("input_ids"), {}, true);
  ASSERT_EQ(out.hidden_states.size(), 4u);
  expect_close(c, "last_hidden_state", out.last_hidden_state);
  expect_close(c, "pooler_output", out.pooler_output);
  expect_close(c, "text_embeds", out.text_embeds);
  expect_close(c, "penultimate_hidden_state", out.penultimate());
  for (int i = 0; i < 4; ++i) expect_close(c, "hidden_states." + std::to_string(i), out.hidden_states[i]);
}

TEST(CLIPTextParity, PlainModelReadsTheSameFile) {
  auto c = load_case("clip-text");
  auto cfg = yeto::models::CLIPTextConfig::from_json(c.config);
  yeto::models::CLIPTextModel model(cfg, /*with_projection=*/false);
  yeto::nn::LoadOptions opt;
  opt.ignore_unexpected = model->ignored_checkpoint_names();
  auto report = yeto::nn::load_named_tensors(*model, c.weights, opt);
  EXPECT_EQ(report.loaded.size() + 1, c.weights.size());  // all but text_projection.weight
  model->eval();
  at::NoGradGuard no_grad;
  auto out = model->forward(c.inputs.at("input_ids"));
  expect_close(c, "last_hidden_state", out.last_hidden_state);
  expect_close(c, "pooler_output", out.pooler_output);
  EXPECT_FALSE(out.text_embeds.defined());
}

TEST(CLIPText, PoolingIndexRules) {
  auto ids = torch::tensor({{998, 5, 999, 999}, {998, 7, 8, 999}}, torch::kLong);
  EXPECT_TRUE(yeto::models::clip_pooling_index(ids, 999).to(at::kLong).equal(torch::tensor({2, 3}, torch::kLong)));
  // eos_token_id == 2: transformers' legacy argmax rule.
  auto legacy = torch::tensor({{49406, 5, 49407, 0}}, torch::kLong);
  EXPECT_EQ(yeto::models::clip_pooling_index(legacy, 2).item<std::int64_t>(), 2);
}

// ---- T5 / UMT5 ---------------------------------------------------------------------------------

void run_t5_case(const std::string& name, bool umt5) {
  auto c = load_case(name);
  auto cfg = yeto::models::T5Config::from_json(c.config, umt5);
  yeto::models::T5EncoderModel model(cfg);
  yeto::nn::LoadOptions opt;
  opt.rename = yeto::models::T5EncoderModelImpl::rename;
  opt.ignore_unexpected = model->ignored_checkpoint_names();
  auto report = yeto::nn::load_named_tensors(*model, c.weights, opt);
  EXPECT_EQ(report.loaded.size(), c.weights.size());
  model->eval();
  at::NoGradGuard no_grad;
  const auto& ids = c.inputs.at("input_ids");
  auto out = model->forward(ids, c.inputs.at("attention_mask"), true);
  expect_close(c, "last_hidden_state", out.last_hidden_state);
  ASSERT_EQ(out.hidden_states.size(), static_cast<std::size_t>(cfg.num_layers + 1));
  for (std::size_t i = 0; i < out.hidden_states.size(); ++i) {
    expect_close(c, "hidden_states." + std::to_string(i), out.hidden_states[i]);
  }
  if (umt5) {
    ASSERT_EQ(out.position_bias.size(), static_cast<std::size_t>(cfg.num_layers));
    for (std::size_t i = 0; i < out.position_bias.size(); ++i) {
      expect_close(c, "position_bias." + std::to_string(i), out.position_bias[i]);
    }
  } else {
    ASSERT_EQ(out.position_bias.size(), 1u);
    expect_close(c, "position_bias", out.position_bias[0]);
  }
  auto unmasked = model->forward(ids);
  expect_close(c, "last_hidden_state_unmasked", unmasked.last_hidden_state);
}

TEST(T5EncoderParity, Relu) { run_t5_case("t5-encoder-relu", false); }
TEST(T5EncoderParity, GatedGelu) { run_t5_case("t5-encoder-gated-gelu", false); }
TEST(UMT5EncoderParity, PerLayerPositionBias) { run_t5_case("umt5-encoder", true); }

TEST(T5Encoder, TiedEmbeddingNameIsAccepted) {
  auto c = load_case("t5-encoder-relu");
  auto cfg = yeto::models::T5Config::from_json(c.config, false);
  yeto::models::T5EncoderModel model(cfg);
  auto weights = c.weights;
  weights["encoder.embed_tokens.weight"] = weights.at("shared.weight");
  weights.erase("shared.weight");
  yeto::nn::LoadOptions opt;
  opt.rename = yeto::models::T5EncoderModelImpl::rename;
  yeto::nn::load_named_tensors(*model, weights, opt);
  EXPECT_TRUE(model->shared->weight.equal(c.weights.at("shared.weight")));
}

TEST(T5Encoder, BucketsClampBeyondMaxDistance) {
  auto b = yeto::models::t5_relative_position_bucket(140, 140, 32, 128, at::kCPU);
  EXPECT_EQ(b.max().item<std::int64_t>(), 31);
  EXPECT_EQ(b[0][0].item<std::int64_t>(), 0);
  EXPECT_EQ(b[0][139].item<std::int64_t>(), 31);   // far right: last bucket of the positive half
  EXPECT_EQ(b[139][0].item<std::int64_t>(), 15);   // far left: last bucket of the negative half
  EXPECT_EQ(b[0][1].item<std::int64_t>(), 17);     // +1
  EXPECT_EQ(b[1][0].item<std::int64_t>(), 1);      // -1
}

TEST(T5Encoder, FeedForwardFromConfig) {
  nlohmann::json j = {{"feed_forward_proj", "gated-gelu"}, {"num_layers", 1}};
  auto c = yeto::models::T5Config::from_json(j, false);
  EXPECT_TRUE(c.is_gated_act);
  EXPECT_EQ(c.dense_act_fn, "gelu_new");
  j["feed_forward_proj"] = "gated-silu";
  EXPECT_EQ(yeto::models::T5Config::from_json(j, false).dense_act_fn, "silu");
  j["feed_forward_proj"] = "tanh-gelu";
  EXPECT_THROW(yeto::models::T5Config::from_json(j, false), yeto::Error);
}

// ---- the same cases through check-parity and the component registry ---------------------------

class CheckParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckParity, EveryComparisonPasses) {
  yeto::models::register_model_parity_kinds();
  const auto dir = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity" / GetParam();
  auto result = yeto::parity::run_case(dir);
  ASSERT_TRUE(result.supported) << result.error;
  ASSERT_TRUE(result.error.empty()) << result.error;
  // Every compared key except the loss's target (an input of the backward call).
  const auto compare = load_case(GetParam()).case_json["compare"];
  EXPECT_EQ(result.comparisons.size(), compare.size() - (compare.contains("loss_target") ? 1 : 0));
  double worst = 0;
  std::string worst_name;
  for (const auto& c : result.comparisons)
    if (c.atol > 0 && c.max_abs / c.atol >= worst) {
      worst = c.max_abs / c.atol;
      worst_name = c.name + " (max abs " + std::to_string(c.max_abs) + ")";
    }
  std::printf("  %-22s %zu comparisons, closest to its tolerance: %s, %.3g of atol\n", GetParam().c_str(),
              result.comparisons.size(), worst_name.c_str(), worst);
  for (const auto& c : result.comparisons) {
    EXPECT_TRUE(c.pass) << GetParam() << " " << c.name << " max_abs " << c.max_abs << " " << c.note;
  }
  EXPECT_TRUE(result.pass());
}

INSTANTIATE_TEST_SUITE_P(Models, CheckParity,
                         ::testing::Values("vae-kl-16ch", "clip-text", "t5-encoder-relu", "t5-encoder-gated-gelu",
                                           "umt5-encoder", "ltx2-audio-vae", "ltx2-vocoder", "ltx2-vocoder-bwe"));

TEST(CheckParityKinds, UnknownClassOfAKnownKindIsUnsupported) {
  yeto::models::register_model_parity_kinds();
  EXPECT_TRUE(yeto::parity::has_kind("autoencoder"));
  EXPECT_TRUE(yeto::parity::has_kind("text_encoder"));
  const auto dir = fs::temp_directory_path() / ("yeto-models-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "case.json") << R"({"case": "x", "kind": "autoencoder", "class_name": "AutoencoderKLFancy",
                                         "calls": [], "compare": {}})";
  auto result = yeto::parity::run_case(dir);
  fs::remove_all(dir);
  EXPECT_FALSE(result.supported);
  EXPECT_NE(result.error.find("AutoencoderKLFancy"), std::string::npos) << result.error;
  EXPECT_FALSE(result.pass());
}

TEST(ModelComponents, RegistryBuildsAndLoadsEachClass) {
  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  EXPECT_EQ(registry.kind("AutoencoderKL"), "vae");
  EXPECT_EQ(registry.kind("UMT5EncoderModel"), "text_encoder");
  const std::pair<const char*, const char*> cases[] = {{"vae-kl-16ch", "AutoencoderKL"},
                                                       {"clip-text", "CLIPTextModelWithProjection"},
                                                       {"clip-text", "CLIPTextModel"},
                                                       {"t5-encoder-relu", "T5EncoderModel"},
                                                       {"umt5-encoder", "UMT5EncoderModel"}};
  for (const auto& [name, cls] : cases) {
    auto c = load_case(name);
    yeto::io::ComponentSource src{cls, c.dir, c.config, ""};
    auto comp = std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
    ASSERT_TRUE(comp) << cls;
    EXPECT_EQ(comp->class_name(), cls);
    // Every stored tensor was loaded, bit for bit.
    auto params = comp->module().named_parameters();
    for (const auto& [key, t] : c.weights) {
      if (std::string(cls) == "CLIPTextModel" && key == "text_projection.weight") continue;
      ASSERT_TRUE(params.contains(key)) << cls << " " << key;
      EXPECT_TRUE(params[key].equal(t)) << cls << " " << key;
    }
  }
  // A config that does not fit the weights is refused, naming the tensor.
  auto c = load_case("t5-encoder-relu");
  auto cfg = c.config;
  cfg["d_ff"] = 100;
  yeto::io::ComponentSource bad{"T5EncoderModel", c.dir, cfg, ""};
  try {
    registry.create(bad);
    FAIL() << "expected a shape error";
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DenseReluDense.wi.weight (checkpoint [192, 64], module [100, 64])"),
              std::string::npos)
        << e.what();
  }
}

// ---- LTX-2's audio VAE and vocoders ---------------------------------------------------------------

TEST(LTX2Audio, RegistryBuildsAndLoadsEachClass) {
  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  EXPECT_EQ(registry.kind("AutoencoderKLLTX2Audio"), "audio_vae");
  EXPECT_EQ(registry.kind("LTX2Vocoder"), "vocoder");
  EXPECT_EQ(registry.kind("LTX2VocoderWithBWE"), "vocoder");
  for (const auto& [name, cls] : {std::pair{"ltx2-audio-vae", "AutoencoderKLLTX2Audio"},
                                  std::pair{"ltx2-vocoder", "LTX2Vocoder"},
                                  std::pair{"ltx2-vocoder-bwe", "LTX2VocoderWithBWE"}}) {
    auto c = load_case(name);
    yeto::io::ComponentSource src{cls, c.dir, c.config, ""};
    auto comp = std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
    ASSERT_TRUE(comp) << cls;
    EXPECT_EQ(comp->class_name(), cls);
    // Every stored tensor (parameters and the filter / basis / statistics buffers), bit for bit.
    const auto named = yeto::nn::named_tensors(comp->module());
    EXPECT_EQ(named.size(), c.weights.size()) << cls;
    for (const auto& [key, t] : c.weights) {
      ASSERT_TRUE(named.count(key)) << cls << " " << key;
      EXPECT_TRUE(named.at(key).equal(t)) << cls << " " << key;
    }
  }
}

// The three cases chain: packed latents -> denormalize -> unpack -> decode is the mel both
// vocoders were recorded on; the BWE vocoder's 48 kHz output is 3 x 160 samples per mel frame.
TEST(LTX2Audio, PipelineChainFromPackedLatentsToWaveforms) {
  auto vae_case = load_case("ltx2-audio-vae");
  yeto::models::AutoencoderKLLTX2Audio vae(yeto::models::LTX2AudioVaeConfig::from_json(vae_case.config));
  yeto::nn::load_named_tensors(*vae, vae_case.weights);
  torch::NoGradGuard ng;
  const auto& in = vae_case.inputs;
  const auto packed = in.at("pipeline.packed_latents");
  const auto z = yeto::models::ltx2_unpack_audio_latents(
      yeto::models::ltx2_denormalize_audio_latents(packed, in.at("pipeline.latents_mean"), in.at("pipeline.latents_std")),
      16);
  EXPECT_TRUE(z.equal(in.at("z")));
  EXPECT_TRUE(yeto::models::ltx2_pack_audio_latents(z).equal(
      yeto::models::ltx2_denormalize_audio_latents(packed, in.at("pipeline.latents_mean"), in.at("pipeline.latents_std"))));
  const auto mel = vae->decode(z);
  EXPECT_EQ(mel.sizes(), (std::vector<std::int64_t>{2, 2, 4 * 4 - 3, 64}));
  for (const char* name : {"ltx2-vocoder", "ltx2-vocoder-bwe"}) {
    auto c = load_case(name);
    const auto& mel_in = c.inputs.begin()->second;
    EXPECT_LE((mel - mel_in).abs().max().item<double>(), 1e-5) << name;
  }
  auto bwe_case = load_case("ltx2-vocoder-bwe");
  yeto::models::LTX2VocoderWithBWE bwe(yeto::models::LTX2VocoderBweConfig::from_json(bwe_case.config));
  yeto::nn::load_named_tensors(*bwe, bwe_case.weights);
  const auto wave = bwe->forward(mel);
  EXPECT_EQ(wave.size(2), 3 * 160 * mel.size(2));
  EXPECT_LE((wave - bwe_case.expected.at("sample")).abs().max().item<double>(), 1e-4);
  EXPECT_LE(wave.abs().max().item<double>(), 1.0);
}

// Both vocoders in bfloat16 on the CPU (a joint audio-video family sampling in bf16): their
// transposed convolutions run, and the waveform stays within bf16 rounding of float32's.
TEST(LTX2Audio, VocodersRunInBfloat16) {
  for (const char* name : {"ltx2-vocoder", "ltx2-vocoder-bwe"}) {
    auto c = load_case(name);
    const auto& mel = c.inputs.begin()->second;
    auto run = [&](at::ScalarType dtype) {
      torch::NoGradGuard no_grad;
      if (std::string(name) == "ltx2-vocoder") {
        yeto::models::LTX2Vocoder voc(yeto::models::LTX2VocoderConfig::from_json(c.config));
        yeto::nn::load_named_tensors(*voc, c.weights);
        voc->to(dtype);
        return voc->forward(mel.to(dtype)).to(at::kFloat);
      }
      yeto::models::LTX2VocoderWithBWE voc(yeto::models::LTX2VocoderBweConfig::from_json(c.config));
      yeto::nn::load_named_tensors(*voc, c.weights);
      voc->to(dtype);
      return voc->forward(mel.to(dtype)).to(at::kFloat);
    };
    const auto f32 = run(at::kFloat);
    at::Tensor bf16;
    try {
      bf16 = run(at::kBFloat16);
    } catch (const std::exception& e) {
      FAIL() << name << ": " << e.what();
    }
    ASSERT_EQ(bf16.sizes(), f32.sizes()) << name;
    EXPECT_TRUE(torch::isfinite(bf16).all().item<bool>()) << name;
    const double scale = f32.abs().max().item<double>();
    EXPECT_LE((bf16 - f32).abs().max().item<double>(), 0.1 * scale) << name;
  }
}

// The waveform -> log-mel front end against torchaudio's MelSpectrogram with ltx-core's settings
// (tests/fixtures/audio/README.md): the Slaney filter bank and the log-mel of tones and noise.
TEST(LTX2Audio, LogMelMatchesTorchaudio) {
  const auto ref = yeto::io::load_safetensors(fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "audio" /
                                              "ltx2-log-mel.safetensors");
  const auto fb = yeto::models::slaney_mel_filterbank(513, 0.0, 8000.0, 64, 16000);
  const double fb_err = (fb - ref.at("mel_filters")).abs().max().item<double>();
  EXPECT_LE(fb_err, 1e-7);
  auto vae_case = load_case("ltx2-audio-vae");
  yeto::models::AutoencoderKLLTX2Audio vae(yeto::models::LTX2AudioVaeConfig::from_json(vae_case.config));
  const auto mel = vae->log_mel(ref.at("waveform"));
  const auto& want = ref.at("log_mel");
  ASSERT_EQ(mel.sizes(), want.sizes());
  const double err = (mel - want).abs().max().item<double>();
  const double atol = 1e-4 * std::max(1.0, want.abs().max().item<double>());
  std::printf("  log-mel max abs err %.3g (atol %.3g), filter bank %.3g\n", err, atol, fb_err);
  EXPECT_TRUE(torch::allclose(mel, want, 1e-4, atol));
  // The frames the VAE encodes: 4000 samples -> 1 + 4000 / 160 = 26 frames -> 7 latent frames.
  EXPECT_EQ(vae->encode(mel).mean.size(2), 7);
  // Too short for the centred window, or mono for a stereo VAE: refused, saying why.
  EXPECT_THROW(vae->log_mel(torch::zeros({1, 2, 400})), yeto::Error);
  EXPECT_THROW(vae->log_mel(torch::zeros({1, 1, 4000})), yeto::Error);
}

// Checkpoints written with ltx-core's names (LTX-2's release: the audio VAE with its
// per_channel_statistics under `audio_vae.`, the vocoders with ups / resblocks / conv_pre /
// conv_post / act_post / downsample.lowpass under `vocoder.`) load through the registry into the
// same tensors as the Diffusers files.
TEST(LTX2Audio, LtxCoreReleaseNamesLoad) {
  auto replace_all = [](std::string s, const std::string& a, const std::string& b) {
    for (auto p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size())) s.replace(p, a.size(), b);
    return s;
  };
  auto ltx_core_vocoder_name = [&](const std::string& d, bool prefixed) {
    std::string s = d;
    s = replace_all(s, "upsamplers.", "ups.");
    s = replace_all(s, "resnets.", "resblocks.");
    s = replace_all(s, "conv_in.", "conv_pre.");
    s = replace_all(s, "conv_out.", "conv_post.");
    s = replace_all(s, "act_out.", "act_post.");
    s = replace_all(s, ".downsample.filter", ".downsample.lowpass.filter");
    return prefixed ? "vocoder." + s : s;
  };
  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  const auto tmp = fs::temp_directory_path() / ("yeto-ltx2-names-" + std::to_string(::getpid()));
  struct Variant {
    const char* name;
    const char* cls;
    std::function<std::string(const std::string&)> original;
  };
  const std::vector<Variant> variants = {
      {"ltx2-audio-vae", "AutoencoderKLLTX2Audio",
       [](const std::string& d) {
         if (d == "latents_mean") return std::string("audio_vae.per_channel_statistics.mean-of-means");
         if (d == "latents_std") return std::string("audio_vae.per_channel_statistics.std-of-means");
         return "audio_vae." + d;
       }},
      {"ltx2-vocoder", "LTX2Vocoder", [&](const std::string& d) { return ltx_core_vocoder_name(d, false); }},
      {"ltx2-vocoder-bwe", "LTX2VocoderWithBWE", [&](const std::string& d) { return ltx_core_vocoder_name(d, true); }}};
  for (const auto& v : variants) {
    auto c = load_case(v.name);
    fs::create_directories(tmp / v.name);
    std::ofstream(tmp / v.name / "config.json") << c.config.dump();
    std::vector<std::pair<std::string, at::Tensor>> original;
    for (const auto& [k, t] : c.weights) {
      original.emplace_back(v.original(k), t);
      EXPECT_NE(original.back().first, k) << v.name;
    }
    if (std::string(v.cls) == "AutoencoderKLLTX2Audio")  // kept by ltx-core, dropped by Diffusers
      original.emplace_back("audio_vae.per_channel_statistics.channel", torch::arange(8));
    yeto::io::save_safetensors(tmp / v.name / "diffusion_pytorch_model.safetensors", original);
    yeto::io::ComponentSource src{v.cls, tmp / v.name, c.config, ""};
    auto comp = std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
    ASSERT_TRUE(comp) << v.cls;
    const auto named = yeto::nn::named_tensors(comp->module());
    for (const auto& [key, t] : c.weights) {
      ASSERT_TRUE(named.count(key)) << v.cls << " " << key;
      EXPECT_TRUE(named.at(key).equal(t)) << v.cls << " " << key;
    }
  }
  fs::remove_all(tmp);
  // Diffusers names pass through; a standalone BWE file's stage-1 `vocoder.` is not a prefix.
  EXPECT_EQ(yeto::models::ltx2_vocoder_diffusers_name("vocoder.resnets.0.acts1.0.upsample.filter", true),
            "vocoder.resnets.0.acts1.0.upsample.filter");
  EXPECT_EQ(yeto::models::ltx2_vocoder_diffusers_name("vocoder.conv_pre.weight", true), "vocoder.conv_in.weight");
  EXPECT_EQ(yeto::models::ltx2_vocoder_diffusers_name("vocoder.conv_pre.weight", false), "conv_in.weight");
}

TEST(LTX2Audio, ConfigErrorsNameTheKey) {
  auto expect_refused = [](const char* case_name, const char* key, const nlohmann::json& value) {
    auto j = load_case(case_name).config;
    j[key] = value;
    try {
      if (std::string(case_name) == "ltx2-audio-vae") yeto::models::LTX2AudioVaeConfig::from_json(j);
      else if (std::string(case_name) == "ltx2-vocoder") yeto::models::LTX2VocoderConfig::from_json(j);
      else yeto::models::LTX2VocoderBweConfig::from_json(j);
      ADD_FAILURE() << case_name << ": accepted " << key << " = " << value.dump();
    } catch (const yeto::Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_refused("ltx2-audio-vae", "norm_type", "group");
  expect_refused("ltx2-audio-vae", "causality_axis", "width");
  expect_refused("ltx2-audio-vae", "mid_block_add_attention", true);
  expect_refused("ltx2-vocoder", "act_fn", "gelu");
  expect_refused("ltx2-vocoder", "final_act_fn", "sigmoid");
  expect_refused("ltx2-vocoder", "upsample_factors", nlohmann::json::array({6, 5}));
  expect_refused("ltx2-vocoder-bwe", "bwe_in_channels", 64);
  expect_refused("ltx2-vocoder-bwe", "bwe_upsample_factors", nlohmann::json::array({6, 5, 4}));
  // A mel whose channels x bins is not in_channels is refused, naming the shapes.
  auto c = load_case("ltx2-vocoder");
  yeto::models::LTX2Vocoder voc(yeto::models::LTX2VocoderConfig::from_json(c.config));
  try {
    voc->forward(torch::zeros({1, 2, 5, 32}));
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_NE(std::string(e.what()).find("128"), std::string::npos) << e.what();
  }
}

// ---- a whole repository: the tiny FLUX.1 layout and its recorded pipeline run ------------------

TEST(FluxTinyRepository, SharedComponentsReproduceTheRecordedRun) {
  const auto repos = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "repos";
  const auto repo = repos / "flux-tiny";
  Case ref;
  ref.name = "flux-tiny-reference";
  ref.case_json = read_json(repos / "flux-tiny-reference" / "case.json");
  ref.expected = yeto::io::load_safetensors(repos / "flux-tiny-reference" / "expected.safetensors");
  ref.inputs = yeto::io::load_safetensors(repos / "flux-tiny-reference" / "inputs.safetensors");

  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  auto make = [&](const std::string& folder, const std::string& cls) {
    yeto::io::ComponentSource src{cls, repo / folder, read_json(repo / folder / "config.json"), ""};
    return std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
  };
  // CLIPTextModel with eos_token_id 2 (legacy argmax pooling) from one file.
  auto clip = std::dynamic_pointer_cast<yeto::models::CLIPTextComponent>(make("text_encoder", "CLIPTextModel"));
  // T5 from two shards with only shared.weight stored.
  auto t5 = std::dynamic_pointer_cast<yeto::models::T5EncoderComponent>(make("text_encoder_2", "T5EncoderModel"));
  auto vae = std::dynamic_pointer_cast<yeto::models::AutoencoderKLComponent>(make("vae", "AutoencoderKL"));
  ASSERT_TRUE(clip && t5 && vae);
  at::NoGradGuard no_grad;
  expect_close(ref, "pooled_prompt_embeds", clip->model->forward(ref.inputs.at("clip_input_ids")).pooler_output);
  expect_close(ref, "prompt_embeds", t5->model->forward(ref.inputs.at("t5_input_ids")).last_hidden_state);
  expect_close(ref, "vae_input", vae->vae->unscale_latents(ref.expected.at("final_latents_unpacked")));
  expect_close(ref, "image", vae->vae->decode(ref.expected.at("vae_input")));
}

TEST(SD35TinyRepository, ThreeTextEncodersAndVaeReproduceTheRecordedRun) {
  const auto repos = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "repos";
  const auto repo = repos / "sd35-tiny";
  Case ref;
  ref.name = "sd35-tiny-reference";
  ref.case_json = read_json(repos / "sd35-tiny-reference" / "case.json");
  ref.expected = yeto::io::load_safetensors(repos / "sd35-tiny-reference" / "expected.safetensors");
  ref.inputs = yeto::io::load_safetensors(repos / "sd35-tiny-reference" / "inputs.safetensors");

  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  auto make = [&](const std::string& folder, const std::string& cls) {
    yeto::io::ComponentSource src{cls, repo / folder, read_json(repo / folder / "config.json"), ""};
    return std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
  };
  // CLIP-L (quick_gelu, eos-padded) and CLIP-G (exact gelu, padded with id 0), both with projection.
  auto clip_l =
      std::dynamic_pointer_cast<yeto::models::CLIPTextComponent>(make("text_encoder", "CLIPTextModelWithProjection"));
  auto clip_g =
      std::dynamic_pointer_cast<yeto::models::CLIPTextComponent>(make("text_encoder_2", "CLIPTextModelWithProjection"));
  auto t5 = std::dynamic_pointer_cast<yeto::models::T5EncoderComponent>(make("text_encoder_3", "T5EncoderModel"));
  auto vae = std::dynamic_pointer_cast<yeto::models::AutoencoderKLComponent>(make("vae", "AutoencoderKL"));
  ASSERT_TRUE(clip_l && clip_g && t5 && vae);
  at::NoGradGuard no_grad;
  for (const std::string prefix : {"", "negative_"}) {
    auto l = clip_l->model->forward(ref.inputs.at(prefix + "clip_l_input_ids"), {}, true);
    expect_close(ref, prefix + "clip_l_penultimate", l.penultimate());
    expect_close(ref, prefix + "clip_l_text_embeds", l.text_embeds);
    auto g = clip_g->model->forward(ref.inputs.at(prefix + "clip_g_input_ids"), {}, true);
    expect_close(ref, prefix + "clip_g_penultimate", g.penultimate());
    expect_close(ref, prefix + "clip_g_text_embeds", g.text_embeds);
    expect_close(ref, prefix + "t5_last_hidden_state",
                 t5->model->forward(ref.inputs.at(prefix + "t5_input_ids")).last_hidden_state);
  }
  expect_close(ref, "vae_input", vae->vae->unscale_latents(ref.expected.at("final_latents")));
  expect_close(ref, "image", vae->vae->decode(ref.expected.at("vae_input")));
}

TEST(Wan21TinyRepository, UMT5MatchesTheRecordedRun) {
  const auto repos = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "repos";
  const auto dir = repos / "wan21-tiny" / "text_encoder";
  Case ref;
  ref.name = "wan21-tiny-reference";
  ref.case_json = read_json(repos / "wan21-tiny-reference" / "case.json");
  ref.expected = yeto::io::load_safetensors(repos / "wan21-tiny-reference" / "expected.safetensors");
  ref.inputs = yeto::io::load_safetensors(repos / "wan21-tiny-reference" / "inputs.safetensors");
  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  yeto::io::ComponentSource src{"UMT5EncoderModel", dir, read_json(dir / "config.json"), ""};
  auto umt5 = std::dynamic_pointer_cast<yeto::models::T5EncoderComponent>(registry.create(src));
  ASSERT_TRUE(umt5);
  at::NoGradGuard no_grad;
  for (const std::string prefix : {"", "negative_"}) {
    const auto& mask = ref.inputs.at(prefix + "attention_mask");
    auto h = umt5->model->forward(ref.inputs.at(prefix + "input_ids"), mask).last_hidden_state;
    expect_close(ref, prefix + "text_encoder_last_hidden_state", h);
    // WanPipeline zeroes the rows past the real tokens.
    expect_close(ref, prefix + "prompt_embeds", h * mask.unsqueeze(-1).to(h.scalar_type()));
  }
}

TEST(PixArtTinyRepository, T5AndQuantConvVaeMatchTheRecordedRun) {
  const auto repos = fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "repos";
  const auto repo = repos / "pixart-tiny";
  Case ref;
  ref.name = "pixart-tiny-reference";
  ref.case_json = read_json(repos / "pixart-tiny-reference" / "case.json");
  ref.expected = yeto::io::load_safetensors(repos / "pixart-tiny-reference" / "expected.safetensors");
  ref.inputs = yeto::io::load_safetensors(repos / "pixart-tiny-reference" / "inputs.safetensors");
  yeto::io::ComponentRegistry registry;
  yeto::models::register_model_components(registry);
  auto make = [&](const std::string& folder, const std::string& cls) {
    yeto::io::ComponentSource src{cls, repo / folder, read_json(repo / folder / "config.json"), ""};
    return std::dynamic_pointer_cast<yeto::io::ModuleComponent>(registry.create(src));
  };
  auto t5 = std::dynamic_pointer_cast<yeto::models::T5EncoderComponent>(make("text_encoder", "T5EncoderModel"));
  auto vae = std::dynamic_pointer_cast<yeto::models::AutoencoderKLComponent>(make("vae", "AutoencoderKL"));
  ASSERT_TRUE(t5 && vae);
  ASSERT_TRUE(vae->vae->quant_conv && vae->vae->post_quant_conv);  // SD-style VAE
  at::NoGradGuard no_grad;
  for (const std::string prefix : {"", "negative_"}) {
    expect_close(ref, prefix + "prompt_embeds",
                 t5->model->forward(ref.inputs.at(prefix + "input_ids"), ref.inputs.at(prefix + "attention_mask"))
                     .last_hidden_state);
  }
  expect_close(ref, "vae_input", vae->vae->unscale_latents(ref.expected.at("final_latents")));
  expect_close(ref, "image", vae->vae->decode(ref.expected.at("vae_input")));
}

TEST(T5Encoder, TakesLoraAdaptersOnItsProjections) {
  auto c = load_case("t5-encoder-relu");
  yeto::models::T5EncoderModel model(yeto::models::T5Config::from_json(c.config, false));
  yeto::nn::LoadOptions opt;
  opt.rename = yeto::models::T5EncoderModelImpl::rename;
  yeto::nn::load_named_tensors(*model, c.weights, opt);
  model->eval();
  const auto& ids = c.inputs.at("input_ids");
  at::Tensor base;
  {
    at::NoGradGuard g;
    base = model->forward(ids).last_hidden_state;
  }
  auto layers = yeto::nn::add_lora(*model, {"q", "v"}, yeto::nn::LoraConfig{4, 8.0}, "default",
                                   yeto::compat::make_cpu_generator(3));
  EXPECT_EQ(layers.size(), 4u);  // q and v of two blocks
  EXPECT_TRUE(model->named_parameters().contains("encoder.block.1.layer.0.SelfAttention.v.lora_B.default.weight"));
  at::NoGradGuard g;
  EXPECT_TRUE(model->forward(ids).last_hidden_state.equal(base));  // B = 0
  for (auto& [path, layer] : yeto::nn::lora_capable_layers(*model)) {
    if (layer->has_adapter("default")) layer->lora_B("default").normal_(0.0, 0.1);
  }
  auto adapted = model->forward(ids).last_hidden_state;
  EXPECT_GT((adapted - base).abs().max().item<double>(), 1e-3);
  for (auto& [path, layer] : yeto::nn::lora_capable_layers(*model)) layer->merge();
  EXPECT_TRUE(at::allclose(model->forward(ids).last_hidden_state, adapted, 1e-4, 1e-4));
}

}  // namespace
