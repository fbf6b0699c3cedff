// PixArtTransformer2DModel against the Diffusers-recorded fixture (forward output, loss and named
// gradients within case.json's tolerances), checkpoint naming, config validation and the family's
// torch-free helpers (plan, presets, LoRA targets, generation requests, caption preprocessing).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/checkpointing_check.hpp"
#include "support/parity_check.hpp"
#include "pixart_family.hpp"
#include "pixart_transformer.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }
const fs::path kTiny = fs::path(YETO_TEST_FIXTURES) / "repos" / "pixart-tiny";

// Reads a Diffusers JSON file; Python's bare -Infinity (scheduler configs) becomes a string
// marker so nlohmann can parse it.
nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (auto pos = text.find("-Infinity"); pos != std::string::npos; pos = text.find("-Infinity", pos + 11))
    text.replace(pos, 9, "\"-Infinity\"");
  return nlohmann::json::parse(text);
}

struct ModelCase : yeto::test::ParityCase {
  yeto::pixart::PixArtTransformer2DModel model{nullptr};
};

ModelCase load_case(const std::string& name) {
  ModelCase c;
  const auto dir = case_dir(name);
  static_cast<yeto::test::ParityCase&>(c) = yeto::test::load_parity_case(dir);
  c.model = yeto::pixart::PixArtTransformer2DModel(
      yeto::pixart::PixArtTransformerConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*c.model, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  c.model->eval();
  return c;
}

at::Tensor run(ModelCase& c) {
  auto& in = c.inputs;
  return c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                          in.at("encoder_attention_mask"), in.at("added_cond_kwargs.resolution"),
                          in.at("added_cond_kwargs.aspect_ratio"));
}

}  // namespace

TEST(PixArtTransformer, ParityForwardBackwardWithMicroConditionsAndMask) {
  ModelCase c = load_case("pixart-transformer");
  ASSERT_TRUE(c.model->config().use_additional_conditions);
  ASSERT_TRUE(c.model->config().learned_sigma());
  std::size_t checked = 0;
  ASSERT_NO_FATAL_FAILURE(
      yeto::test::expect_forward_loss_and_grads(*c.model, [&] { return run(c); }, c, "pixart-transformer", &checked, 50));
  EXPECT_EQ(checked, 6u);
}

TEST(PixArtTransformer, ActivationCheckpointingKeepsTheGradients) {
  using Model = yeto::pixart::PixArtTransformer2DModel;
  ModelCase c = load_case("pixart-transformer");
  const auto blocks = c.model->transformer_blocks->size();
  ASSERT_GE(blocks, 2u);
  yeto::test::expect_checkpointing_keeps_gradients<Model>(
      "pixart", [] { return load_case("pixart-transformer").model; },
      [&](Model& m) {
        c.model = m;
        return run(c);
      },
      c.expected.at("loss_target"), yeto::pixart::description().lora_targets("auto").patterns, blocks);
}

TEST(PixArtTransformer, TheMaskAndTheMicroConditionsMatter) {
  // Sensitivity: dropping the padding mask, or changing the resolution condition, changes the
  // output by far more than the tolerance (so the parity test cannot pass with them ignored).
  ModelCase c = load_case("pixart-transformer");
  torch::NoGradGuard ng;
  const auto ref = run(c);
  auto& in = c.inputs;
  ASSERT_GT((in.at("encoder_attention_mask") == 0).sum().item<std::int64_t>(), 0) << "the case has padding";
  const auto unmasked = c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                                         at::Tensor(), in.at("added_cond_kwargs.resolution"),
                                         in.at("added_cond_kwargs.aspect_ratio"));
  EXPECT_GT((unmasked - ref).abs().max().item<double>(), 1e-2);
  const auto other_res = c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                                          in.at("encoder_attention_mask"), in.at("added_cond_kwargs.resolution") * 2,
                                          in.at("added_cond_kwargs.aspect_ratio"));
  EXPECT_GT((other_res - ref).abs().max().item<double>(), 1e-2);
  // Without the conditions the micro-conditioned model refuses rather than guessing.
  EXPECT_THROW(c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("timestep"),
                                in.at("encoder_attention_mask")),
               std::invalid_argument);
}

TEST(PixArtTransformer, CheckpointNamesMatchDiffusersExactly) {
  // Every tensor of each Diffusers file has a parameter of the same name and shape, and back
  // (the 2-D position table is computed, not stored, in both).
  for (const auto& [config, weights_file] :
       std::vector<std::pair<fs::path, fs::path>>{
           {case_dir("pixart-transformer") / "config.json", case_dir("pixart-transformer") / "diffusion_pytorch_model.safetensors"},
           {kTiny / "transformer/config.json", kTiny / "transformer/diffusion_pytorch_model.safetensors"}}) {
    const auto weights = yeto::io::load_safetensors(weights_file);
    yeto::pixart::PixArtTransformer2DModel m(yeto::pixart::PixArtTransformerConfig::from_json(read_json(config)));
    const auto named = yeto::nn::named_tensors(*m);
    EXPECT_EQ(named.size(), weights.size()) << weights_file;
    for (const auto& [k, v] : weights) {
      ASSERT_TRUE(named.count(k)) << "model lacks " << k;
      EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
    }
  }
  // The tiny repository is the 512 px layout: no micro-condition embedders.
  const auto cfg = yeto::pixart::PixArtTransformerConfig::from_json(read_json(kTiny / "transformer/config.json"));
  EXPECT_FALSE(cfg.use_additional_conditions);
  EXPECT_EQ(cfg.interpolation_scale, 1.0);
  EXPECT_EQ(yeto::io::load_safetensors(kTiny / "transformer/diffusion_pytorch_model.safetensors").size(), 57u);
}

TEST(PixArtTransformer, SinCosTableIsDiffusersGrid) {
  // get_2d_sincos_pos_embed(8, (2, 3), base_size=2, interpolation_scale=1): the first half encodes
  // the column coordinate (arange(3) / (3 / 2)), the second the row (arange(2) / (2 / 2)).
  const auto t = yeto::pixart::sincos_pos_embed_2d(8, 2, 3, 2, 1.0);
  ASSERT_EQ(t.sizes(), at::IntArrayRef({6, 8}));
  const double col = 2.0 * 2.0 / 3.0, row = 1.0;  // token 5: row 1, column 2
  const double omega1 = 1.0 / 100.0;               // 1 / 10000^(1/2) for the quarter dim 2
  EXPECT_NEAR(t[5][0].item<double>(), std::sin(col), 1e-6);
  EXPECT_NEAR(t[5][1].item<double>(), std::sin(col * omega1), 1e-6);
  EXPECT_NEAR(t[5][2].item<double>(), std::cos(col), 1e-6);
  EXPECT_NEAR(t[5][4].item<double>(), std::sin(row), 1e-6);
  EXPECT_NEAR(t[5][7].item<double>(), std::cos(row * omega1), 1e-6);
}

TEST(PixArtTransformer, ConfigErrorsNameTheKey) {
  auto expect_key = [](nlohmann::json j, const std::string& key) {
    try {
      yeto::pixart::PixArtTransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << key;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  const auto base = read_json(kTiny / "transformer/config.json");
  auto j = base;
  j["norm_type"] = "ada_norm_zero";
  expect_key(j, "norm_type");
  j = base;
  j["activation_fn"] = "geglu";
  expect_key(j, "activation_fn");
  j = base;
  j["num_layers"] = "two";
  expect_key(j, "num_layers");
  j = base;
  j["cross_attention_dim"] = 24;
  expect_key(j, "cross_attention_dim");
  j = base;
  j["use_additional_conditions"] = true;  // inner 16 is not divisible by 3
  expect_key(j, "use_additional_conditions");
  j = base;
  j.erase("sample_size");
  expect_key(j, "sample_size");
  // The legacy Transformer2DModel key set (no interpolation_scale / use_additional_conditions, extra keys) loads.
  j = base;
  j.erase("interpolation_scale");
  j.erase("use_additional_conditions");
  j["double_self_attention"] = false;
  j["num_vector_embeds"] = nullptr;
  j["use_linear_projection"] = false;
  EXPECT_FALSE(yeto::pixart::PixArtTransformerConfig::from_json(j).use_additional_conditions);
  j["sample_size"] = 128;  // resolves use_additional_conditions on, which inner 16 cannot carry
  expect_key(j, "use_additional_conditions");
}

TEST(PixArtTransformer, LoraOnAttentionKeepsOutputUntilTrained) {
  ModelCase c = load_case("pixart-transformer");
  torch::NoGradGuard ng;
  const auto before = run(c);
  yeto::nn::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  const auto targets = yeto::pixart::description().lora_targets("auto").patterns;
  const auto paths = yeto::nn::add_lora(*c.model, targets, lc);
  EXPECT_EQ(paths.size(), 20u);  // 2 blocks x (8 attention projections + 2 feed-forward layers)
  EXPECT_TRUE(at::allclose(run(c), before));  // B = 0 at init
}

// ---- the family's torch-free helpers ------------------------------------------------------------

TEST(PixArtFamily, PlanFromTheTinyRepositoryAndTheLegacyClass) {
  const auto dir = kTiny.string();
  const auto tcfg = read_json(kTiny / "transformer/config.json");
  const auto plan = yeto::pixart::plan_from_model_index(dir, read_json(kTiny / "model_index.json"), tcfg);
  const auto& comps = plan.at("components");
  EXPECT_EQ(comps.size(), 5u);
  EXPECT_EQ(comps.at("transformer").at("class"), "PixArtTransformer2DModel");
  EXPECT_EQ(comps.at("scheduler").at("class"), "DPMSolverMultistepScheduler");
  EXPECT_EQ(comps.at("vae").at("dir"), dir + "/vae");
  EXPECT_EQ(plan.at("family"), "pixart");

  // PixArt-XL-2 snapshots name the legacy class; it is served as PixArtTransformer2DModel.
  auto index = read_json(kTiny / "model_index.json");
  index["transformer"] = {"diffusers", "Transformer2DModel"};
  EXPECT_EQ(yeto::pixart::plan_from_model_index(dir, index, tcfg).at("components").at("transformer").at("class"),
            "PixArtTransformer2DModel");
  auto other = tcfg;
  other["norm_type"] = "layer_norm";
  EXPECT_THROW(yeto::pixart::plan_from_model_index(dir, index, other), std::invalid_argument);

  EXPECT_EQ(yeto::pixart::default_max_sequence_length("PixArtAlphaPipeline", "x"), 120);
  EXPECT_EQ(yeto::pixart::default_max_sequence_length("PixArtSigmaPipeline", "x"), 300);
}

TEST(PixArtFamily, PlanErrorsNameFileAndKey) {
  const auto tcfg = read_json(kTiny / "transformer/config.json");
  auto index = read_json(kTiny / "model_index.json");
  index.erase("text_encoder");
  try {
    yeto::pixart::plan_from_model_index("/m", index, tcfg);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/m/model_index.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("text_encoder"), std::string::npos) << e.what();
  }
  index = read_json(kTiny / "model_index.json");
  index["_class_name"] = "FluxPipeline";
  EXPECT_THROW(yeto::pixart::plan_from_model_index("/m", index, tcfg), std::invalid_argument);
  index = read_json(kTiny / "model_index.json");
  index["scheduler"] = {"diffusers", "FlowMatchEulerDiscreteScheduler"};
  try {
    yeto::pixart::plan_from_model_index("/m", index, tcfg);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FlowMatchEulerDiscreteScheduler"), std::string::npos) << e.what();
  }
}

TEST(PixArtFamily, TinyPresetIsTheTinyRepositorysShapes) {
  const auto p = yeto::pixart::description().presets();
  ASSERT_TRUE(p.contains("tiny"));
  ASSERT_TRUE(p.contains("tiny-ms"));
  const auto& comps = p.at("tiny").at("components");
  for (const char* name : {"transformer", "vae"}) {
    auto want = read_json(kTiny / name / "config.json");
    want.erase("_diffusers_version");
    EXPECT_EQ(comps.at(name).at("config"), want) << name;
  }
  auto t5 = read_json(kTiny / "text_encoder/config.json");
  t5.erase("output_past");  // generation-only keys of the transformers T5 config
  t5.erase("use_cache");
  EXPECT_EQ(comps.at("text_encoder").at("config"), t5);
  auto sched = read_json(kTiny / "scheduler/scheduler_config.json");
  sched.erase("_diffusers_version");
  ASSERT_EQ(sched.at("lambda_min_clipped"), "-Infinity");
  sched.erase("lambda_min_clipped");  // left out of the preset: absent is the same -inf default
  EXPECT_EQ(comps.at("scheduler").at("config"), sched);
  EXPECT_EQ(p.at("tiny").at("model_index"), read_json(kTiny / "model_index.json"));
  const auto ms = yeto::pixart::PixArtTransformerConfig::from_json(
      p.at("tiny-ms").at("components").at("transformer").at("config"));
  EXPECT_TRUE(ms.use_additional_conditions);
  EXPECT_EQ(ms.inner_dim(), 24);
  // The wide preset has PixArt-Sigma's widths (what the training-step benchmark measures); its
  // config is checked, not built.
  const auto& wide = p.at("wide").at("components");
  const auto w = yeto::pixart::PixArtTransformerConfig::from_json(wide.at("transformer").at("config"));
  EXPECT_EQ(w.inner_dim(), 1152);
  EXPECT_EQ(w.cross_attention_dim, 1152);
  EXPECT_EQ(w.caption_channels, 4096);
  EXPECT_EQ(w.sample_size, 128);
  EXPECT_EQ(w.interpolation_scale, 2.0);
  EXPECT_FALSE(w.use_additional_conditions);
  EXPECT_EQ(wide.at("text_encoder").at("config").at("d_model"), w.caption_channels);
  EXPECT_EQ(wide.at("vae").at("config").at("latent_channels"), w.in_channels);
}

TEST(PixArtFamily, LoraTargetsRequestAndCaptions) {
  EXPECT_EQ(yeto::pixart::description().lora_targets("attention").patterns.size(), 8u);
  EXPECT_EQ(yeto::pixart::description().lora_targets("auto").patterns.size(), 10u);
  EXPECT_TRUE(yeto::pixart::description().lora_targets("all-linear").all_linear);
  EXPECT_THROW(yeto::pixart::description().lora_targets(nlohmann::json::array({"auto", "to_q"})),
               std::invalid_argument);
  EXPECT_THROW(yeto::pixart::description().lora_targets(nlohmann::json::array()), std::invalid_argument);

  const auto r = yeto::pixart::parse_generate_request(
      {{"prompts", {"a", "b"}}, {"seed", 42}, {"steps", 4}, {"height", 64}, {"width", 96}, {"max_sequence_length", 32}});
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.width, 96);
  EXPECT_EQ(r.guidance, 4.5);  // PixArtAlphaPipeline's default
  EXPECT_EQ(r.negative_prompts, (std::vector<std::string>{"", ""}));
  const auto n = yeto::pixart::parse_generate_request({{"prompts", {"a", "b"}}, {"negative_prompts", {"blurry"}}});
  EXPECT_EQ(n.negative_prompts, (std::vector<std::string>{"blurry", "blurry"}));
  EXPECT_THROW(yeto::pixart::parse_generate_request({{"prompts", {"a", "b", "c"}}, {"negative_prompts", {"x", "y"}}}),
               std::invalid_argument);
  EXPECT_THROW(yeto::pixart::parse_generate_request({{"prompts", nlohmann::json::array()}}), std::invalid_argument);
  EXPECT_THROW(yeto::pixart::parse_generate_request({{"prompts", {"a"}}, {"steps", 0}}), std::invalid_argument);

  EXPECT_EQ(yeto::pixart::preprocess_caption("  A Red CIRCLE\t\n"), "a red circle");
  EXPECT_EQ(yeto::pixart::preprocess_caption(""), "");
  EXPECT_EQ(yeto::family::resolve_precision("auto", "cpu"), "fp32");
  EXPECT_THROW(yeto::family::resolve_precision("int8", "cpu"), std::invalid_argument);
}
