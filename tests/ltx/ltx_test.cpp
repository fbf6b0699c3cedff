// LTXVideoTransformer3DModel, AutoencoderKLLTXVideo and the LTXPipeline helpers against the
// Diffusers-recorded fixtures (forward output, loss and named gradients within each case.json's
// tolerances), plus the torch-free family rules: plan, presets, frame rule, requests.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/checkpointing_check.hpp"
#include "support/parity_check.hpp"
#include "ltx_family.hpp"
#include "ltx_latents.hpp"
#include "ltx_transformer.hpp"
#include "ltx_vae.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace ltx = yeto::ltx;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }
fs::path repo_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "repos" / name; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// allclose with the case's tolerance for `key` (key column 56 wide).
void expect_close(const at::Tensor& actual, const at::Tensor& expected, const nlohmann::json& tol,
                  const std::string& key) {
  yeto::test::expect_close(actual, expected, tol, key, 56);
}

std::array<double, 3> scale_of(const nlohmann::json& scalar_args) {
  const auto& s = scalar_args.at("rope_interpolation_scale");
  return {s[0].get<double>(), s[1].get<double>(), s[2].get<double>()};
}

ltx::LtxVideoTransformer3DModel load_transformer(const fs::path& dir) {
  ltx::LtxVideoTransformer3DModel m(ltx::LtxTransformerConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*m, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  m->eval();
  return m;
}

ltx::AutoencoderKLLTXVideo load_vae(const fs::path& dir) {
  ltx::AutoencoderKLLTXVideo m(ltx::LtxVaeConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*m, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  m->eval();
  return m;
}

void expect_same_names(torch::nn::Module& m, const fs::path& weights_file) {
  const auto weights = yeto::io::load_safetensors(weights_file);
  const auto named = yeto::nn::named_tensors(m);
  EXPECT_EQ(named.size(), weights.size()) << weights_file;
  for (const auto& [k, v] : weights) {
    ASSERT_TRUE(named.count(k)) << "model lacks " << k;
    EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
  }
}

void check_vae_case(const std::string& name) {
  const auto dir = case_dir(name);
  const auto info = read_json(dir / "case.json");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  auto vae = load_vae(dir);
  torch::NoGradGuard ng;
  const auto d = vae->encode(in.at("x"));
  const auto& cmp = info.at("compare");
  expect_close(d.mean, ex.at("encode.latent_dist.mean"), cmp.at("encode.latent_dist.mean"), name + " mean");
  expect_close(d.logvar, ex.at("encode.latent_dist.logvar"), cmp.at("encode.latent_dist.logvar"), name + " logvar");
  expect_close(at::exp(0.5 * d.logvar), ex.at("encode.latent_dist.std"), cmp.at("encode.latent_dist.std"),
               name + " std");
  const at::Tensor temb = in.count("temb") ? in.at("temb") : at::Tensor();
  expect_close(vae->decode(in.at("z"), temb), ex.at("decode.sample"), cmp.at("decode.sample"), name + " decode");
}

}  // namespace

TEST(LtxTransformer, ParityForwardBackward) {
  const auto dir = case_dir("ltx-transformer");
  const auto c = yeto::test::load_parity_case(dir);
  const auto& in = c.inputs;
  auto m = load_transformer(dir);
  const auto& sa = c.info.at("call").at("scalar_args");
  auto run = [&] {
    return m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                      in.at("encoder_attention_mask"), sa.at("num_frames").get<std::int64_t>(),
                      sa.at("height").get<std::int64_t>(), sa.at("width").get<std::int64_t>(), scale_of(sa));
  };
  std::size_t checked = 0;
  ASSERT_NO_FATAL_FAILURE(yeto::test::expect_forward_loss_and_grads(*m, run, c, "ltx-transformer", &checked, 56));
  EXPECT_EQ(checked, 6u);
}

TEST(LtxTransformer, ActivationCheckpointingKeepsTheGradients) {
  // The parity case has one block; the ltx-tiny repository's transformer has two (random inputs
  // of its shapes: 2 x 3 x 4 latent tokens, 6 caption tokens with the last two masked).
  using Model = ltx::LtxVideoTransformer3DModel;
  const auto dir = repo_dir("ltx-tiny") / "transformer";
  auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model-00001-of-00002.safetensors");
  weights.merge(yeto::io::load_safetensors(dir / "diffusion_pytorch_model-00002-of-00002.safetensors"));
  const auto make = [&] {
    Model m(ltx::LtxTransformerConfig::from_json(read_json(dir / "config.json")));
    yeto::nn::load_named_tensors(*m, weights);
    return m;
  };
  const auto blocks = make()->transformer_blocks->size();
  ASSERT_GE(blocks, 2u);
  torch::manual_seed(4);
  const auto x = torch::randn({1, 24, 16}), text = torch::randn({1, 6, 32}), t = torch::full({1}, 600.0);
  const auto mask = torch::tensor({{1, 1, 1, 1, 0, 0}});
  const auto target = torch::randn({1, 24, 16});
  yeto::test::expect_checkpointing_keeps_gradients<Model>(
      "ltx", make, [&](Model& m) { return m->forward(x, text, t, mask, 2, 3, 4, {1.0, 1.0, 1.0}); }, target,
      ltx::description().lora_targets("auto").patterns, blocks);
}

TEST(LtxTransformer, MaskAndRopeScaleMatter) {
  // The recorded output depends on the caption mask and the rotary scale (the pipeline's frame
  // rate): dropping either moves the output well beyond the tolerance.
  const auto dir = case_dir("ltx-transformer");
  const auto info = read_json(dir / "case.json");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  auto m = load_transformer(dir);
  const auto& sa = info.at("call").at("scalar_args");
  torch::NoGradGuard ng;
  const auto no_mask = m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"), {}, 3, 4,
                                  6, scale_of(sa));
  const double atol = info.at("compare").at("sample").at("atol").get<double>();
  const double d_mask = (no_mask - ex.at("sample")).abs().max().item<double>();
  std::printf("  without the caption mask: max abs change %.3g (atol %.3g)\n", d_mask, atol);
  EXPECT_GT(d_mask, 10 * atol);
  const auto other_rate = m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                                     in.at("encoder_attention_mask"), 3, 4, 6, ltx::rope_interpolation_scale(8, 32, 24));
  const double d_rate = (other_rate - ex.at("sample")).abs().max().item<double>();
  std::printf("  frame rate 24 instead of 25 in the rotary scale: max abs change %.3g\n", d_rate);
  EXPECT_GT(d_rate, atol);
  EXPECT_THROW(m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"), {}, 3, 4, 5,
                          scale_of(sa)),
               std::invalid_argument);
}

TEST(LtxTransformer, RotaryTablePadsAndScales) {
  const auto s = ltx::rope_interpolation_scale(8, 32, 25.0);
  EXPECT_DOUBLE_EQ(s[0], 0.32);
  EXPECT_DOUBLE_EQ(s[1], 32.0);
  const auto r = ltx::ltx_rope(32, 2, 2, 3, s, 1, 1);
  ASSERT_EQ(r.cos.sizes(), at::IntArrayRef({12, 32}));
  // inner 32: 5 frequencies x 3 axes x 2 = 30 channels, the first 2 are cos 1 / sin 0.
  EXPECT_TRUE(at::equal(r.cos.narrow(1, 0, 2), at::ones({12, 2})));
  EXPECT_TRUE(at::equal(r.sin.narrow(1, 0, 2), at::zeros({12, 2})));
  EXPECT_TRUE(at::allclose(r.cos.pow(2) + r.sin.pow(2), at::ones({12, 32}), 1e-6, 1e-6));
}

TEST(LtxTransformer, CheckpointNamesMatchDiffusersExactly) {
  auto a = load_transformer(case_dir("ltx-transformer"));
  expect_same_names(*a, case_dir("ltx-transformer") / "diffusion_pytorch_model.safetensors");
  ltx::AutoencoderKLLTXVideo tc(ltx::LtxVaeConfig::from_json(read_json(case_dir("ltx-vae-tc") / "config.json")));
  expect_same_names(*tc, case_dir("ltx-vae-tc") / "diffusion_pytorch_model.safetensors");
  ltx::AutoencoderKLLTXVideo tiny(ltx::LtxVaeConfig::from_json(read_json(repo_dir("ltx-tiny") / "vae/config.json")));
  expect_same_names(*tiny, repo_dir("ltx-tiny") / "vae/diffusion_pytorch_model.safetensors");
  EXPECT_EQ(tiny->config().spatial_ratio(), 32);
  EXPECT_EQ(tiny->config().temporal_ratio(), 8);
}

TEST(LtxTransformer, ConfigErrorsNameTheKey) {
  auto j = read_json(case_dir("ltx-transformer") / "config.json");
  j["qk_norm"] = "rms_norm";
  try {
    ltx::LtxTransformerConfig::from_json(j);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("qk_norm"), std::string::npos) << e.what();
  }
  j = read_json(case_dir("ltx-transformer") / "config.json");
  j["num_layers"] = "two";
  EXPECT_THROW(ltx::LtxTransformerConfig::from_json(j), std::invalid_argument);
  auto v = read_json(case_dir("ltx-vae") / "config.json");
  v["down_block_types"][3] = "LTXVideo095DownBlock3D";
  try {
    ltx::LtxVaeConfig::from_json(v);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("down_block_types[3]"), std::string::npos) << e.what();
  }
  v = read_json(case_dir("ltx-vae") / "config.json");
  v["decoder_layers_per_block"] = {1, 1};
  EXPECT_THROW(ltx::LtxVaeConfig::from_json(v), std::invalid_argument);
}

TEST(LtxTransformer, LoraKeepsOutputUntilTrained) {
  const auto dir = case_dir("ltx-transformer");
  const auto info = read_json(dir / "case.json");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  auto m = load_transformer(dir);
  const auto& sa = info.at("call").at("scalar_args");
  auto run = [&] {
    return m->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                      in.at("encoder_attention_mask"), 3, 4, 6, scale_of(sa));
  };
  torch::NoGradGuard ng;
  const auto before = run();
  yeto::nn::LoraConfig cfg;
  cfg.r = 2;
  cfg.alpha = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto t = ltx::description().lora_targets("auto");
  const auto paths = yeto::nn::add_lora(*m, t.patterns, cfg, "default", gen);
  EXPECT_EQ(paths.size(), 8u);  // q/k/v/out of attn1 and attn2 in the one block
  EXPECT_TRUE(at::equal(run(), before));  // B = 0: a fresh adapter changes nothing
  for (const auto& [path, layer] : yeto::nn::lora_capable_layers(*m))
    if (layer->has_adapter("default")) layer->lora_B("default").fill_(0.01);
  EXPECT_GT((run() - before).abs().max().item<double>(), 1e-5);
}

TEST(LtxVae, ParityCausalVideoVae) { check_vae_case("ltx-vae"); }

TEST(LtxVae, ParityTimestepConditionedDecoderWithResidualUpsampling) {
  check_vae_case("ltx-vae-tc");
  // The decoder needs its decode timestep.
  auto vae = load_vae(case_dir("ltx-vae-tc"));
  const auto in = yeto::io::load_safetensors(case_dir("ltx-vae-tc") / "inputs.safetensors");
  torch::NoGradGuard ng;
  EXPECT_THROW(vae->decode(in.at("z")), std::invalid_argument);
}

TEST(LtxVae, DecodedFramesFollowTheTemporalRule) {
  auto vae = load_vae(repo_dir("ltx-tiny") / "vae");
  torch::NoGradGuard ng;
  for (std::int64_t lf : {1, 2, 3}) {
    const auto video = vae->decode(at::randn({1, 16, lf, 1, 2}));
    EXPECT_EQ(video.sizes(), at::IntArrayRef({1, 3, 1 + 8 * (lf - 1), 32, 64}));
  }
  const auto d = vae->encode(at::rand({1, 3, 17, 64, 32}) * 2 - 1);
  EXPECT_EQ(d.mean.sizes(), at::IntArrayRef({1, 16, 3, 2, 1}));
  EXPECT_THROW(vae->encode(at::zeros({1, 3, 9, 30, 32})), std::invalid_argument);
}

TEST(LtxLatents, PipelineHelpersMatchDiffusers) {
  const auto dir = case_dir("ltx-pipeline-latents");
  const auto info = read_json(dir / "case.json");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  const auto& latents = in.at("latents");
  const auto packed = ltx::pack_latents(latents, 1, 1);
  EXPECT_TRUE(at::equal(packed, ex.at("packed")));  // pure re-indexing: exact
  EXPECT_TRUE(at::equal(ltx::unpack_latents(packed, 3, 4, 6, 1, 1), ex.at("unpacked")));
  const auto packed2 = ltx::pack_latents(latents, 2, 1);
  EXPECT_TRUE(at::equal(packed2, ex.at("packed_p2")));
  EXPECT_TRUE(at::equal(ltx::unpack_latents(packed2, 3, 2, 3, 2, 1), ex.at("unpacked_p2")));
  const auto& cmp = info.at("compare");
  expect_close(ltx::normalize_latents(latents, in.at("latents_mean"), in.at("latents_std"), 1.0), ex.at("normalized"),
               cmp.at("normalized"), "normalized");
  expect_close(ltx::denormalize_latents(latents, in.at("latents_mean"), in.at("latents_std"), 1.0),
               ex.at("denormalized"), cmp.at("denormalized"), "denormalized");
  EXPECT_NEAR(ltx::calculate_shift(72, 256, 4096, 0.5, 1.15), ex.at("calculate_shift_mu").item<double>(), 1e-12);
  EXPECT_THROW(ltx::pack_latents(latents, 5, 1), std::invalid_argument);
}

TEST(LtxFamily, PlanFromTheTinyRepositoryAndErrors) {
  const auto repo = repo_dir("ltx-tiny");
  const auto plan = ltx::description().plan(repo.string(), read_json(repo / "model_index.json"));
  EXPECT_EQ(plan.at("family"), "ltx");
  EXPECT_EQ(plan.at("components").at("tokenizer").at("class"), "T5Tokenizer");
  EXPECT_EQ(plan.at("components").size(), 5u);
  auto index = read_json(repo / "model_index.json");
  index["tokenizer"] = {"transformers", "T5TokenizerFast"};  // both names serve the same files
  EXPECT_NO_THROW(ltx::description().plan(repo.string(), index));
  index.erase("vae");
  try {
    ltx::description().plan(repo.string(), index);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model_index.json: no 'vae'"), std::string::npos) << e.what();
  }
  index = read_json(repo / "model_index.json");
  index["transformer"] = {"diffusers", "FluxTransformer2DModel"};
  EXPECT_THROW(ltx::description().plan(repo.string(), index), std::invalid_argument);
}

TEST(LtxFamily, FrameRuleRequestsAndTargets) {
  EXPECT_EQ(ltx::decoded_frames(9, 8), 9);
  EXPECT_EQ(ltx::decoded_frames(10, 8), 9);
  EXPECT_EQ(ltx::decoded_frames(16, 8), 9);
  EXPECT_EQ(ltx::decoded_frames(17, 8), 17);
  EXPECT_EQ(ltx::decoded_frames(1, 8), 1);
  EXPECT_EQ(ltx::latent_frames(161, 8), 21);
  const auto r = ltx::parse_generate_request({{"prompts", {"a"}}, {"frame_rate", 24}, {"num_frames", 10}});
  EXPECT_DOUBLE_EQ(r.frame_rate, 24.0);
  EXPECT_EQ(r.num_frames, 10);
  EXPECT_EQ(r.max_sequence_length, 128);
  EXPECT_THROW(ltx::parse_generate_request({{"prompts", {"a"}}, {"fps", 0}}), std::invalid_argument);
  EXPECT_THROW(ltx::parse_generate_request({{"prompts", {"a"}}, {"negative_prompts", {"x", "y"}}}),
               std::invalid_argument);
  EXPECT_THROW(ltx::parse_generate_request({{"prompts", {"a"}}, {"steps", 0}}), std::invalid_argument);
  EXPECT_TRUE(ltx::description().lora_targets("all-linear").all_linear);
  EXPECT_THROW(ltx::description().lora_targets(nlohmann::json::array({"auto", "to_q"})), std::invalid_argument);
  const auto sig = ltx::linspace(1.0, 0.25, 4);
  EXPECT_DOUBLE_EQ(sig[1], 0.75);
  EXPECT_EQ(yeto::family::resolve_precision("auto", "cuda:0"), "bf16");
}

TEST(LtxFamily, TinyPresetIsTheTinyRepositorysShapes) {
  const auto p = ltx::description().presets();
  ASSERT_TRUE(p.contains("tiny"));
  ASSERT_TRUE(p.contains("small"));
  const auto repo = repo_dir("ltx-tiny");
  const auto& comps = p.at("tiny").at("components");
  for (const char* name : {"transformer", "vae", "text_encoder"}) {
    auto want = read_json(repo / name / "config.json");
    want.erase("_diffusers_version");
    EXPECT_EQ(comps.at(name).at("config"), want) << name;
  }
  auto sched = read_json(repo / "scheduler" / "scheduler_config.json");
  sched.erase("_diffusers_version");
  EXPECT_EQ(comps.at("scheduler").at("config"), sched);
  auto index = read_json(repo / "model_index.json");
  EXPECT_EQ(p.at("tiny").at("model_index"), index);
  // The small preset's components build.
  const auto& small = p.at("small").at("components");
  ltx::LtxVideoTransformer3DModel t(ltx::LtxTransformerConfig::from_json(small.at("transformer").at("config")));
  ltx::AutoencoderKLLTXVideo v(ltx::LtxVaeConfig::from_json(small.at("vae").at("config")));
  EXPECT_EQ(t->config().inner_dim(), 128);
  EXPECT_EQ(v->config().spatial_ratio(), 32);
  // The wide preset has LTX-Video's widths (what the training-step benchmark measures); its
  // configs are checked, not built.
  const auto& wide = p.at("wide").at("components");
  const auto wt = ltx::LtxTransformerConfig::from_json(wide.at("transformer").at("config"));
  const auto wv = ltx::LtxVaeConfig::from_json(wide.at("vae").at("config"));
  EXPECT_EQ(wt.inner_dim(), 2048);
  EXPECT_EQ(wt.cross_attention_dim, 2048);
  EXPECT_EQ(wt.caption_channels, 4096);
  EXPECT_EQ(wt.in_channels, 128);
  EXPECT_EQ(wv.latent_channels, wt.in_channels);
  EXPECT_EQ(wv.spatial_ratio(), 32);
  EXPECT_EQ(wide.at("text_encoder").at("config").at("d_model"), wt.caption_channels);
}
