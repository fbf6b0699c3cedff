// SD3Transformer2DModel and the SD3.5 family helpers against the Diffusers-recorded fixtures:
// forward output, loss and named gradients within case.json's tolerances, the position table,
// checkpoint names, config errors, the plan, LoRA targets, requests and presets.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/checkpointing_check.hpp"
#include "support/parity_check.hpp"
#include "sd35_family.hpp"
#include "sd35_transformer.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }
const fs::path kTiny = fs::path(YETO_TEST_FIXTURES) / "repos" / "sd35-tiny";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

struct ModelCase : yeto::test::ParityCase {
  yeto::sd35::SD3Transformer2DModel model{nullptr};
};

ModelCase load_case(const std::string& name) {
  ModelCase c;
  const auto dir = case_dir(name);
  static_cast<yeto::test::ParityCase&>(c) = yeto::test::load_parity_case(dir);
  c.model = yeto::sd35::SD3Transformer2DModel(yeto::sd35::SD3TransformerConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*c.model, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  c.model->eval();
  return c;
}

at::Tensor run(ModelCase& c) {
  auto& in = c.inputs;
  return c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("pooled_projections"),
                          in.at("timestep"));
}

}  // namespace

TEST(SD3Transformer, ParityForwardBackwardDualAttentionQkNorm) {
  ModelCase c = load_case("sd35-transformer");
  std::size_t checked = 0;
  ASSERT_NO_FATAL_FAILURE(
      yeto::test::expect_forward_loss_and_grads(*c.model, [&] { return run(c); }, c, "sd35-transformer", &checked, 58));
  EXPECT_EQ(checked, 6u);
}

TEST(SD3Transformer, ActivationCheckpointingKeepsTheGradients) {
  // The last joint block is context_pre_only: its undefined text output must not shift the
  // gradient of the image stream.
  using Model = yeto::sd35::SD3Transformer2DModel;
  ModelCase c = load_case("sd35-transformer");
  const auto blocks = c.model->transformer_blocks->size();
  ASSERT_GE(blocks, 2u);
  yeto::test::expect_checkpointing_keeps_gradients<Model>(
      "sd35", [] { return load_case("sd35-transformer").model; },
      [&](Model& m) {
        c.model = m;
        return run(c);
      },
      c.expected.at("loss_target"), yeto::sd35::description().lora_targets("auto").patterns, blocks);
}

TEST(SD3Transformer, CheckpointNamesMatchDiffusersExactly) {
  // Every tensor of the Diffusers files (the parity case and the sharded tiny repository, the
  // persistent pos_embed buffer included) has a parameter or buffer of the same name and shape,
  // and back.
  for (const auto& dir : {case_dir("sd35-transformer"), kTiny / "transformer"}) {
    std::map<std::string, at::Tensor> weights;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors" && e.path().filename().string().rfind("diffusion_pytorch_model", 0) == 0)
        for (auto& [n, t] : yeto::io::load_safetensors(e.path())) weights.emplace(n, t);
    yeto::sd35::SD3Transformer2DModel m(yeto::sd35::SD3TransformerConfig::from_json(read_json(dir / "config.json")));
    const auto named = yeto::nn::named_tensors(*m);
    EXPECT_EQ(named.size(), weights.size()) << dir;
    for (const auto& [k, v] : weights) {
      ASSERT_TRUE(named.count(k)) << dir << ": model lacks " << k;
      EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
    }
  }
}

TEST(SD3Transformer, PositionTableIsDiffusersSinCos) {
  // The stored pos_embed buffers are Diffusers' get_2d_sincos_pos_embed at construction (the
  // fixtures perturbed only the listed norm weights), so a freshly built model has them too.
  for (const auto& dir : {case_dir("sd35-transformer"), kTiny / "transformer"}) {
    std::map<std::string, at::Tensor> weights;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors" && e.path().filename().string().rfind("diffusion_pytorch_model", 0) == 0)
        for (auto& [n, t] : yeto::io::load_safetensors(e.path())) weights.emplace(n, t);
    yeto::sd35::SD3Transformer2DModel m(yeto::sd35::SD3TransformerConfig::from_json(read_json(dir / "config.json")));
    const auto diff = (m->pos_embed->pos_embed - weights.at("pos_embed.pos_embed")).abs().max().item<double>();
    std::printf("  %s pos_embed max abs diff %.3g\n", dir.filename().c_str(), diff);
    EXPECT_LE(diff, 1e-6) << dir;
  }
  // The centre crop: for a 2x2 patch grid of a 6x6 table, rows/columns 2..3.
  const auto t = yeto::sd35::sincos_pos_embed_2d(16, 6, 6, 4.0);
  yeto::sd35::PatchEmbed pe(8, 2, 16, 16, 6);
  const auto crop = pe->positions(2, 2);
  EXPECT_TRUE(at::equal(crop[0][0], t[2 * 6 + 2]));
  EXPECT_TRUE(at::equal(crop[0][3], t[3 * 6 + 3]));
  EXPECT_THROW(pe->positions(7, 2), std::invalid_argument);
  // Without pos_embed_max_size nothing is stored and other grids are computed on the fly.
  yeto::sd35::PatchEmbed free_pe(8, 2, 16, 16, 0);
  EXPECT_TRUE(yeto::nn::named_tensors(*free_pe).count("pos_embed") == 0);
  EXPECT_EQ(free_pe->positions(3, 5).sizes(), at::IntArrayRef({1, 15, 16}));
}

TEST(SD3Transformer, RefusesBadInputsAndConfigsNamingTheKey) {
  ModelCase c = load_case("sd35-transformer");
  auto in = c.inputs;
  EXPECT_THROW(c.model->forward(in.at("hidden_states").narrow(3, 0, 7), in.at("encoder_hidden_states"),
                                in.at("pooled_projections"), in.at("timestep")),
               std::invalid_argument);
  EXPECT_THROW(c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states").narrow(2, 0, 20),
                                in.at("pooled_projections"), in.at("timestep")),
               std::invalid_argument);
  auto expect_key = [](nlohmann::json j, const std::string& key) {
    try {
      yeto::sd35::SD3TransformerConfig::from_json(j);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  const auto base = read_json(case_dir("sd35-transformer") / "config.json");
  auto j = base;
  j["dual_attention_layers"] = {0, 5};
  expect_key(j, "dual_attention_layers");
  j = base;
  j["qk_norm"] = "l2";
  expect_key(j, "qk_norm");
  j = base;
  j["caption_projection_dim"] = 24;
  expect_key(j, "caption_projection_dim");
  j = base;
  j["num_layers"] = "two";
  expect_key(j, "num_layers");
  // null keys take the upstream meaning.
  j = base;
  j["out_channels"] = nullptr;
  j["qk_norm"] = nullptr;
  j["pos_embed_max_size"] = nullptr;
  const auto cfg = yeto::sd35::SD3TransformerConfig::from_json(j);
  EXPECT_EQ(cfg.out_channels, cfg.in_channels);
  EXPECT_TRUE(cfg.qk_norm.empty());
  EXPECT_EQ(cfg.pos_embed_max_size, 0);
}

TEST(SD3Transformer, LoraAutoTargetsKeepOutputUntilTrained) {
  ModelCase c = load_case("sd35-transformer");
  torch::NoGradGuard ng;
  const auto before = run(c);
  yeto::nn::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  const auto targets = yeto::sd35::description().lora_targets("auto");
  const auto paths = yeto::nn::add_lora(*c.model, targets.patterns, lc);
  // Block 0: q/k/v/out + 4 added projections; block 1 (context_pre_only): no to_add_out. attn2 is not targeted.
  EXPECT_EQ(paths.size(), 15u);
  for (const auto& p : paths) EXPECT_EQ(p.find("attn2"), std::string::npos) << p;
  EXPECT_TRUE(at::allclose(run(c), before));  // B = 0 at init
}

// ---- the family's torch-free helpers ------------------------------------------------------------

TEST(Sd35Family, PlanFromTheTinyRepository) {
  const auto dir = kTiny.string();
  const auto plan = yeto::sd35::plan_from_model_index(dir, read_json(kTiny / "model_index.json"));
  const auto& comps = plan.at("components");
  EXPECT_EQ(plan.at("family"), "sd35");
  EXPECT_EQ(comps.size(), 9u);
  EXPECT_EQ(comps.at("transformer").at("class"), "SD3Transformer2DModel");
  EXPECT_EQ(comps.at("text_encoder_2").at("class"), "CLIPTextModelWithProjection");
  EXPECT_EQ(comps.at("tokenizer_3").at("class"), "T5TokenizerFast");
  EXPECT_EQ(comps.at("vae").at("dir"), dir + "/vae");
}

TEST(Sd35Family, PlanErrorsNameFileAndKeyAndT5IsOptional) {
  auto index = read_json(kTiny / "model_index.json");
  auto message = [](const nlohmann::json& idx) {
    try {
      yeto::sd35::plan_from_model_index("/m", idx);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto i = index;
  i.erase("text_encoder_2");
  auto m = message(i);
  EXPECT_NE(m.find("/m/model_index.json"), std::string::npos) << m;
  EXPECT_NE(m.find("text_encoder_2"), std::string::npos) << m;
  i = index;
  i["transformer"] = {"diffusers", "FluxTransformer2DModel"};
  m = message(i);
  EXPECT_NE(m.find("FluxTransformer2DModel"), std::string::npos) << m;
  i = index;
  i["tokenizer_3"] = {nullptr, nullptr};
  m = message(i);
  EXPECT_NE(m.find("text_encoder_3 and tokenizer_3"), std::string::npos) << m;
  // SD3 without T5: both [null, null].
  i["text_encoder_3"] = {nullptr, nullptr};
  const auto plan = yeto::sd35::plan_from_model_index("/m", i);
  EXPECT_FALSE(plan.at("components").contains("text_encoder_3"));
  EXPECT_EQ(plan.at("components").size(), 7u);
  // SD3.5 large's IP-adapter components are dropped from the plan.
  i = index;
  i["image_encoder"] = {"transformers", "SiglipVisionModel"};
  EXPECT_TRUE(yeto::sd35::plan_from_model_index("/m", i).at("components").at("image_encoder").is_null());
}

TEST(Sd35Family, LoraTargetsAndRequest) {
  EXPECT_EQ(yeto::sd35::description().lora_targets("auto").patterns.size(), 8u);
  EXPECT_EQ(yeto::sd35::description().lora_targets("attention").patterns.size(), 8u);
  EXPECT_TRUE(yeto::sd35::description().lora_targets("all-linear").all_linear);
  EXPECT_THROW(yeto::sd35::description().lora_targets(nlohmann::json::array({"auto", "to_q"})), std::invalid_argument);
  EXPECT_THROW(yeto::sd35::description().lora_targets(nlohmann::json::array()), std::invalid_argument);

  const auto r = yeto::sd35::parse_generate_request(
      {{"prompts", {"a"}}, {"seed", 42}, {"steps", 4}, {"height", 64}, {"max_sequence_length", 32}, {"negative_prompts", nullptr}});
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.height, 64);
  EXPECT_EQ(r.width, 0);  // the transformer's sample size x 8
  EXPECT_EQ(r.guidance, 7.0);
  EXPECT_EQ(r.negative_prompts, std::vector<std::string>{""});  // one per prompt, "" by default
  EXPECT_THROW(yeto::sd35::parse_generate_request({{"prompts", {"a", "b"}}, {"negative_prompts", {"x"}}}),
               std::invalid_argument);
  EXPECT_THROW(yeto::sd35::parse_generate_request({{"prompts", {"a"}}, {"max_sequence_length", 513}}),
               std::invalid_argument);
  EXPECT_THROW(yeto::sd35::parse_generate_request({{"prompts", nlohmann::json::array()}}), std::invalid_argument);
  EXPECT_EQ(yeto::family::resolve_precision("auto", "cpu"), "fp32");
  EXPECT_THROW(yeto::family::resolve_precision("int8", "cpu"), std::invalid_argument);
}

TEST(Sd35Family, TinyPresetIsTheTinyRepositorysShapes) {
  const auto p = yeto::sd35::description().presets();
  ASSERT_TRUE(p.contains("tiny"));
  ASSERT_TRUE(p.contains("mid"));
  const auto& comps = p.at("tiny").at("components");
  for (const char* name : {"transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"}) {
    auto want = read_json(kTiny / name / "config.json");
    want.erase("_diffusers_version");
    want.erase("output_past");  // generation-only keys of the transformers T5 config
    want.erase("use_cache");
    EXPECT_EQ(comps.at(name).at("config"), want) << name;
  }
  auto sched = read_json(kTiny / "scheduler" / "scheduler_config.json");
  sched.erase("_diffusers_version");
  EXPECT_EQ(comps.at("scheduler").at("config"), sched);
  auto index = read_json(kTiny / "model_index.json");
  EXPECT_EQ(p.at("tiny").at("model_index"), index);
  EXPECT_EQ(comps.at("tokenizer_2").at("config").at("pad_token"), "!");
  // Both presets build.
  for (const char* preset : {"tiny", "mid"}) {
    const auto cfg =
        yeto::sd35::SD3TransformerConfig::from_json(p.at(preset).at("components").at("transformer").at("config"));
    yeto::sd35::SD3Transformer2DModel m(cfg);
    std::int64_t n = 0;
    for (const auto& t : m->parameters()) n += t.numel();
    std::printf("  preset %s: %lld transformer parameters\n", preset, static_cast<long long>(n));
    EXPECT_GT(n, 0);
  }
  // The wide preset has SD3.5 Large's widths (what the training-step benchmark measures); its
  // config is checked, not built (about 190 M parameters).
  const auto& wide = p.at("wide").at("components");
  const auto w = yeto::sd35::SD3TransformerConfig::from_json(wide.at("transformer").at("config"));
  EXPECT_EQ(w.inner_dim(), 2432);
  EXPECT_EQ(w.caption_projection_dim, 2432);
  EXPECT_EQ(w.joint_attention_dim, 4096);
  EXPECT_EQ(w.pos_embed_max_size, 192);
  EXPECT_TRUE(w.dual_attention_layers.empty());
  // The pooled projection is CLIP-L's and CLIP-G's text embeddings side by side.
  EXPECT_EQ(wide.at("text_encoder").at("config").at("projection_dim").get<std::int64_t>() +
                wide.at("text_encoder_2").at("config").at("projection_dim").get<std::int64_t>(),
            w.pooled_projection_dim);
  EXPECT_EQ(wide.at("text_encoder_3").at("config").at("d_model"), w.joint_attention_dim);
}
