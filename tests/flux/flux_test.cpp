// FluxTransformer2DModel and the FLUX.1 latent helpers against the Diffusers-recorded fixtures:
// forward output, loss and named gradients within each case.json's tolerances.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "flux_family.hpp"
#include "flux_latents.hpp"
#include "flux_transformer.hpp"
#include "io/tensors.hpp"
#include "support/checkpointing_check.hpp"
#include "support/parity_check.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// allclose with the case's tolerance for `key` (key column 60 wide).
void expect_close(const at::Tensor& actual, const at::Tensor& expected, const nlohmann::json& tol,
                  const std::string& key) {
  yeto::test::expect_close(actual, expected, tol, key, 60);
}

struct ModelCase : yeto::test::ParityCase {
  yeto::flux::FluxTransformer2DModel model{nullptr};
};

ModelCase load_case(const std::string& name) {
  ModelCase c;
  const auto dir = case_dir(name);
  static_cast<yeto::test::ParityCase&>(c) = yeto::test::load_parity_case(dir);
  c.model = yeto::flux::FluxTransformer2DModel(
      yeto::flux::FluxTransformerConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*c.model, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  c.model->eval();
  return c;
}

at::Tensor run(ModelCase& c) {
  auto& in = c.inputs;
  return c.model->forward(in.at("hidden_states"), in.at("encoder_hidden_states"), in.at("pooled_projections"),
                          in.at("timestep"), in.at("img_ids"), in.at("txt_ids"),
                          in.count("guidance") ? in.at("guidance") : at::Tensor());
}

void check_forward_and_backward(const std::string& name) {
  ModelCase c = load_case(name);
  std::size_t checked = 0;
  ASSERT_NO_FATAL_FAILURE(
      yeto::test::expect_forward_loss_and_grads(*c.model, [&] { return run(c); }, c, name, &checked, 60));
  EXPECT_GE(checked, 5u);
}

}  // namespace

TEST(FluxTransformer, ParityForwardBackwardSchnellStyle) { check_forward_and_backward("flux-transformer"); }

TEST(FluxTransformer, ParityForwardBackwardWithGuidance) { check_forward_and_backward("flux-transformer-guidance"); }

TEST(FluxTransformer, ActivationCheckpointingKeepsTheGradients) {
  using Model = yeto::flux::FluxTransformer2DModel;
  ModelCase c = load_case("flux-transformer-guidance");
  const auto blocks = c.model->transformer_blocks->size() + c.model->single_transformer_blocks->size();
  ASSERT_EQ(blocks, 3u);  // 1 double + 2 single: "every other" recomputes the double and the second single
  yeto::test::expect_checkpointing_keeps_gradients<Model>(
      "flux", [] { return load_case("flux-transformer-guidance").model; },
      [&](Model& m) {
        c.model = m;
        return run(c);
      },
      c.expected.at("loss_target"), yeto::flux::description().lora_targets("auto").patterns, blocks);
}

TEST(FluxTransformer, CheckpointNamesMatchDiffusersExactly) {
  // Every tensor of the Diffusers file has a parameter of the same name and shape, and back.
  const auto dir = case_dir("flux-transformer-guidance");
  const auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors");
  yeto::flux::FluxTransformer2DModel m(yeto::flux::FluxTransformerConfig::from_json(read_json(dir / "config.json")));
  const auto named = yeto::nn::named_tensors(*m);
  EXPECT_EQ(named.size(), weights.size());
  for (const auto& [k, v] : weights) {
    ASSERT_TRUE(named.count(k)) << "model lacks " << k;
    EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
  }
}

TEST(FluxTransformer, GuidanceModelRefusesMissingGuidance) {
  ModelCase c = load_case("flux-transformer-guidance");
  c.inputs.erase("guidance");
  EXPECT_THROW(run(c), std::invalid_argument);
}

TEST(FluxTransformer, ConfigErrorsNameTheKey) {
  auto j = read_json(case_dir("flux-transformer") / "config.json");
  j["axes_dims_rope"] = {4, 6, 7};
  try {
    yeto::flux::FluxTransformerConfig::from_json(j);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("axes_dims_rope"), std::string::npos) << e.what();
  }
  j = read_json(case_dir("flux-transformer") / "config.json");
  j["num_layers"] = "two";
  EXPECT_THROW(yeto::flux::FluxTransformerConfig::from_json(j), std::invalid_argument);
}

TEST(FluxLatents, PipelineHelpersMatchDiffusers) {
  const auto dir = case_dir("flux-pipeline-latents");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  const auto packed = yeto::flux::pack_latents(in.at("latents"));
  EXPECT_TRUE(at::equal(packed, ex.at("packed")));  // pure re-indexing: exact
  EXPECT_TRUE(at::equal(yeto::flux::latent_image_ids(4, 6), ex.at("latent_image_ids")));
  EXPECT_TRUE(at::equal(yeto::flux::unpack_latents(packed, 64, 96, 8), ex.at("unpacked")));
  const double mu = read_json(dir / "case.json").at("calls")[3].at("value").get<double>();
  EXPECT_NEAR(yeto::flux::calculate_shift(packed.size(1)), mu, 1e-12);
  EXPECT_THROW(yeto::flux::pack_latents(at::zeros({1, 16, 3, 4})), std::invalid_argument);
  EXPECT_THROW(yeto::flux::unpack_latents(packed, 64, 64, 8), std::invalid_argument);
}

TEST(FluxTransformer, LoraOnAttentionKeepsOutputUntilTrained) {
  ModelCase c = load_case("flux-transformer");
  torch::NoGradGuard ng;
  const auto before = run(c);
  yeto::nn::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  const auto paths = yeto::nn::add_lora(*c.model, {"to_q", "to_k", "to_v", "to_out.0"}, lc);
  EXPECT_EQ(paths.size(), 7u);  // double block: to_q/k/v/out.0; single block: to_q/k/v
  EXPECT_TRUE(at::allclose(run(c), before));  // B = 0 at init
}

// ---- LoRA parity: Diffusers and PEFT adapter files on the transformer ------------------------

namespace {

void check_lora_file(const std::string& file, const std::string& prefix, double alpha, const std::string& expected) {
  ModelCase c = load_case("flux-lora");
  yeto::nn::LoraConfig lc;
  lc.r = 4;
  lc.alpha = alpha;
  lc.init = "zeros";
  const auto tensors = yeto::io::load_safetensors(case_dir("flux-lora") / file);
  const auto paths = yeto::nn::load_lora_state_dict(*c.model, tensors, lc, "default", prefix);
  EXPECT_EQ(paths.size(), 7u) << file;
  torch::NoGradGuard ng;
  expect_close(run(c), c.expected.at(expected), c.info.at("compare").at(expected), "flux-lora " + file);
}

}  // namespace

TEST(FluxLora, BaseModelMatches) {
  ModelCase c = load_case("flux-lora");
  torch::NoGradGuard ng;
  expect_close(run(c), c.expected.at("sample_base"), c.info.at("compare").at("sample_base"), "flux-lora base");
}

TEST(FluxLora, DiffusersFileWithAdapterAlpha) {
  check_lora_file("lora_diffusers/pytorch_lora_weights.safetensors", "transformer.", 8.0, "sample_lora");
}

TEST(FluxLora, DiffusersFileWithoutAlphaIsScaleOne) {
  check_lora_file("lora_diffusers/pytorch_lora_weights.safetensors", "transformer.", 4.0, "sample_lora_alpha_eq_rank");
}

TEST(FluxLora, ModelLevelAndPeftFiles) {
  check_lora_file("lora_model_level/pytorch_lora_weights.safetensors", "", 8.0, "sample_lora");
  check_lora_file("lora_peft/adapter_model.safetensors", "base_model.model.", 8.0, "sample_lora");
}

// ---- the family's torch-free helpers ------------------------------------------------------------

TEST(FluxFamily, PlanFromTheTinyRepository) {
  const auto dir = (fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny").string();
  const auto plan = yeto::flux::description().plan(dir, read_json(fs::path(dir) / "model_index.json"));
  const auto& comps = plan.at("components");
  EXPECT_EQ(comps.size(), 7u);
  EXPECT_EQ(comps.at("transformer").at("class"), "FluxTransformer2DModel");
  EXPECT_EQ(comps.at("tokenizer_2").at("class"), "T5TokenizerFast");
  EXPECT_EQ(comps.at("vae").at("dir"), dir + "/vae");
}

TEST(FluxFamily, PlanErrorsNameFileAndKey) {
  auto index = read_json(fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny" / "model_index.json");
  index.erase("text_encoder_2");
  try {
    yeto::flux::description().plan("/m", index);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/m/model_index.json"), std::string::npos) << m;
    EXPECT_NE(m.find("text_encoder_2"), std::string::npos) << m;
  }
  index = read_json(fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny" / "model_index.json");
  index["transformer"] = {"diffusers", "SD3Transformer2DModel"};
  try {
    yeto::flux::description().plan("/m", index);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("SD3Transformer2DModel"), std::string::npos) << e.what();
  }
}

TEST(FluxFamily, NullComponentsArePlannedAbsentButNotTheDenoiser) {
  auto index = read_json(fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny" / "model_index.json");
  for (const char* c : {"vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"})
    index[c] = nlohmann::json::array({nullptr, nullptr});
  const auto plan = yeto::flux::description().plan("/m", index);
  const auto& comps = plan.at("components");
  EXPECT_EQ(comps.size(), 7u);
  EXPECT_TRUE(comps.at("vae").is_null());
  EXPECT_TRUE(comps.at("tokenizer_2").is_null());
  EXPECT_EQ(comps.at("transformer").at("dir"), "/m/transformer");
  for (const char* needed : {"transformer", "scheduler"}) {
    auto i = index;
    i[needed] = nlohmann::json::array({nullptr, nullptr});
    try {
      yeto::flux::description().plan("/m", i);
      FAIL() << needed;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("/m/model_index.json: '" + std::string(needed) + "' is null"),
                std::string::npos)
          << e.what();
    }
  }
  index["vae"] = nlohmann::json::array({"diffusers", nullptr});
  EXPECT_THROW(yeto::flux::description().plan("/m", index), std::invalid_argument);
}

TEST(FluxFamily, LinspaceIsNumpys) {
  // np.linspace(1, 1/4, 4) and np.linspace(1, 1/28, 28)[[1, 27]] (values printed by NumPy 1.24).
  const auto s4 = yeto::flux::linspace(1.0, 0.25, 4);
  ASSERT_EQ(s4.size(), 4u);
  EXPECT_EQ(s4[0], 1.0);
  EXPECT_EQ(s4[1], 0.75);
  EXPECT_EQ(s4[2], 0.5);
  EXPECT_EQ(s4[3], 0.25);
  const auto s28 = yeto::flux::linspace(1.0, 1.0 / 28, 28);
  EXPECT_EQ(s28.back(), 1.0 / 28);
  EXPECT_EQ(s28[1], 0.9642857142857143);
  EXPECT_EQ(s28[13], 0.53571428571428581);
  EXPECT_EQ(s28[26], 0.071428571428571508);
  EXPECT_EQ(yeto::flux::linspace(1.0, 1.0, 1), std::vector<double>{1.0});
}

TEST(FluxFamily, LoraTargetsAndRequest) {
  EXPECT_EQ(yeto::flux::description().lora_targets("attention").patterns.size(), 8u);
  EXPECT_EQ(yeto::flux::description().lora_targets("auto").patterns.size(), 12u);
  EXPECT_TRUE(yeto::flux::description().lora_targets("all-linear").all_linear);
  EXPECT_EQ(yeto::flux::description().lora_targets(nlohmann::json::array({"to_q", "proj_mlp"})).patterns,
            (std::vector<std::string>{"to_q", "proj_mlp"}));
  EXPECT_THROW(yeto::flux::description().lora_targets(nlohmann::json::array({"auto", "to_q"})), std::invalid_argument);
  EXPECT_THROW(yeto::flux::description().lora_targets(nlohmann::json::array()), std::invalid_argument);

  const auto r = yeto::flux::parse_generate_request(
      {{"prompts", {"a"}}, {"seed", 42}, {"steps", 4}, {"height", 64}, {"width", 96}, {"max_sequence_length", 32}});
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.width, 96);
  EXPECT_EQ(r.max_sequence_length, 32);
  EXPECT_THROW(yeto::flux::parse_generate_request({{"prompts", nlohmann::json::array()}}), std::invalid_argument);
  EXPECT_THROW(yeto::flux::parse_generate_request({{"prompts", {"a"}}, {"steps", 0}}), std::invalid_argument);
  EXPECT_THROW(yeto::flux::parse_generate_request({{"prompts", {"a"}}, {"max_sequence_length", 513}}),
               std::invalid_argument);
  EXPECT_EQ(yeto::family::resolve_precision("auto", "cpu"), "fp32");
  EXPECT_EQ(yeto::family::resolve_precision("auto", "cuda:0"), "bf16");
  EXPECT_THROW(yeto::family::resolve_precision("int8", "cpu"), std::invalid_argument);
}

TEST(FluxFamily, TinyPresetIsTheTinyRepositorysShapes) {
  const auto p = yeto::flux::description().presets();
  ASSERT_TRUE(p.contains("tiny"));
  ASSERT_TRUE(p.contains("mid"));
  const auto repo = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";
  const auto& comps = p.at("tiny").at("components");
  for (const char* name : {"transformer", "vae"}) {
    auto want = read_json(repo / name / "config.json");
    auto got = comps.at(name).at("config");
    want.erase("_diffusers_version");
    EXPECT_EQ(got, want) << name;
  }
  for (const char* name : {"text_encoder", "text_encoder_2"}) {
    auto want = read_json(repo / name / "config.json");
    want.erase("output_past");  // generation-only keys of the transformers T5 config
    want.erase("use_cache");
    EXPECT_EQ(comps.at(name).at("config"), want) << name;
  }
  auto sched = read_json(repo / "scheduler" / "scheduler_config.json");
  sched.erase("_diffusers_version");
  EXPECT_EQ(comps.at("scheduler").at("config"), sched);
  // Both presets build: the mid transformer's config is consistent.
  const auto mid = yeto::flux::FluxTransformerConfig::from_json(p.at("mid").at("components").at("transformer").at("config"));
  EXPECT_EQ(mid.inner_dim(), 384);
  // The wide preset has FLUX.1's real widths (what the loading benchmark measures).
  const auto& wide = p.at("wide").at("components");
  const auto w = yeto::flux::FluxTransformerConfig::from_json(wide.at("transformer").at("config"));
  EXPECT_EQ(w.inner_dim(), 3072);
  EXPECT_EQ(w.joint_attention_dim, 4096);
  EXPECT_EQ(w.pooled_projection_dim, 768);
  EXPECT_EQ(wide.at("text_encoder").at("config").at("hidden_size"), 768);
  EXPECT_EQ(wide.at("text_encoder_2").at("config").at("d_model"), 4096);
}
