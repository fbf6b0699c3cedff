// FluxTransformer2DModel and the FLUX.1 latent helpers against the Diffusers-recorded fixtures:
// forward output, loss and named gradients within each case.json's tolerances.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "flux_latents.hpp"
#include "flux_transformer.hpp"
#include "io/tensors.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// allclose with the case's tolerance for `key`; reports the worst element.
void expect_close(const at::Tensor& actual, const at::Tensor& expected, const nlohmann::json& tol,
                  const std::string& key) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << key;
  const double rtol = tol.at("rtol").get<double>(), atol = tol.at("atol").get<double>();
  const auto a = actual.detach().to(at::kDouble), e = expected.to(at::kDouble);
  const auto err = (a - e).abs();
  const auto bound = atol + rtol * e.abs();
  const double worst = (err - bound).max().item<double>();
  std::printf("  %-60s max abs err %.3g (atol %.3g, rtol %.3g)\n", key.c_str(), err.max().item<double>(), atol, rtol);
  EXPECT_LE(worst, 0.0) << key << ": max abs error " << err.max().item<double>() << " (atol " << atol << ", rtol "
                        << rtol << ")";
}

struct ModelCase {
  nlohmann::json info;
  std::map<std::string, at::Tensor> inputs, expected;
  yeto::flux::FluxTransformer2DModel model{nullptr};
};

ModelCase load_case(const std::string& name) {
  ModelCase c;
  const auto dir = case_dir(name);
  c.info = read_json(dir / "case.json");
  c.inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  c.expected = yeto::io::load_safetensors(dir / "expected.safetensors");
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
  const auto& compare = c.info.at("compare");
  {
    torch::NoGradGuard ng;
    expect_close(run(c), c.expected.at("sample"), compare.at("sample"), name + " sample");
  }
  for (auto& p : c.model->parameters()) p.mutable_grad() = at::Tensor();
  const auto sample = run(c);
  const auto loss = (sample - c.expected.at("loss_target")).pow(2).mean();
  expect_close(loss, c.expected.at("loss"), compare.at("loss"), name + " loss");
  loss.backward();
  const auto params = c.model->named_parameters();
  std::size_t checked = 0;
  for (const auto& [grad_key, param_name] : c.info.at("backward").at("grad_keys").items()) {
    const auto* p = params.find(param_name.get<std::string>());
    ASSERT_NE(p, nullptr) << "no parameter " << param_name;
    ASSERT_TRUE(p->grad().defined()) << param_name;
    expect_close(p->grad(), c.expected.at(grad_key), compare.at(grad_key), name + " " + grad_key);
    ++checked;
  }
  EXPECT_GE(checked, 5u);
}

}  // namespace

TEST(FluxTransformer, ParityForwardBackwardSchnellStyle) { check_forward_and_backward("flux-transformer"); }

TEST(FluxTransformer, ParityForwardBackwardWithGuidance) { check_forward_and_backward("flux-transformer-guidance"); }

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
