// Schedulers: the training-side interface against hand-computed values on tiny tensors, config
// reading (Diffusers defaults, unknown keys, Python's -Infinity), factory and registry errors,
// and a few sampling invariants the parity cases do not pin down. Fixtures are read from
// YETO_SOURCE_DIR/tests/fixtures (YETO_TEST_FIXTURES points at the calling test directory).
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include "core/error.hpp"
#include "io/component_registry.hpp"
#include "schedulers/ddpm.hpp"
#include "schedulers/flow_match_euler.hpp"
#include "schedulers/multistep.hpp"
#include "schedulers/scheduler.hpp"
#include "schedulers/scheduler_config.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto;
using namespace yeto::schedulers;

namespace {

fs::path fixture(const std::string& name) { return fs::path(YETO_SOURCE_DIR) / "tests" / "fixtures" / "parity" / name; }

void expect_close(const at::Tensor& a, std::vector<double> e, double tol = 1e-6) {
  const at::Tensor flat = a.to(at::kDouble).reshape({-1});
  ASSERT_EQ(flat.numel(), static_cast<std::int64_t>(e.size()));
  for (std::size_t i = 0; i < e.size(); ++i)
    EXPECT_NEAR(flat[static_cast<std::int64_t>(i)].item<double>(), e[i], tol) << "entry " << i;
}

// A 4-step DDPM schedule with betas 0.1..0.4: alphas_cumprod = 0.9, 0.72, 0.504, 0.3024.
nlohmann::json tiny_ddpm(const std::string& prediction) {
  return {{"num_train_timesteps", 4}, {"trained_betas", {0.1, 0.2, 0.3, 0.4}}, {"prediction_type", prediction}};
}

}  // namespace

TEST(TrainingInterface, FlowMatchNoisyInputAndVelocityTarget) {
  FlowMatchEulerDiscreteScheduler s(nlohmann::json::object());
  const at::Tensor x0 = at::tensor({1.0f, 2.0f, -1.0f, 0.0f}).reshape({2, 2});
  const at::Tensor noise = at::tensor({3.0f, 5.0f, 1.0f, 1.0f}).reshape({2, 2});
  // Index 0 is sigma 1 (timestep 1000); index 500 is sigma 0.5 (timestep 500).
  const TrainingBatch b = s.training_batch(x0, noise, at::tensor({500, 0}, at::kLong));
  EXPECT_EQ(b.prediction, Prediction::flow);
  expect_close(b.sigma_t, {0.5, 1.0});
  expect_close(b.timesteps, {500.0, 1000.0}, 1e-3);
  expect_close(b.noisy, {0.5 * 1 + 0.5 * 3, 0.5 * 2 + 0.5 * 5, 1.0, 1.0});
  expect_close(b.target, {2.0, 3.0, 2.0, 1.0});  // noise - x0
  expect_close(b.alpha_t, {0.5, 0.0});
  expect_close(b.snr, {1.0, 0.0});
}

TEST(TrainingInterface, FlowMatchShiftMovesTheTrainingSigmas) {
  FlowMatchEulerDiscreteScheduler s(nlohmann::json{{"shift", 3.0}});
  const at::Tensor x0 = at::zeros({1, 1});
  const at::Tensor noise = at::ones({1, 1});
  const TrainingBatch b = s.training_batch(x0, noise, at::tensor({500}, at::kLong));
  // 3 * 0.5 / (1 + 2 * 0.5) = 0.75
  expect_close(b.sigma_t, {0.75});
  expect_close(b.timesteps, {750.0}, 1e-3);
  expect_close(b.noisy, {0.75});
  expect_close(b.snr, {(0.25 / 0.75) * (0.25 / 0.75)});
}

TEST(TrainingInterface, DdpmEpsilonVAndSampleTargets) {
  const at::Tensor x0 = at::tensor({1.0f, -2.0f}).reshape({2, 1});
  const at::Tensor noise = at::tensor({0.5f, 3.0f}).reshape({2, 1});
  const at::Tensor idx = at::tensor({1, 3}, at::kLong);
  const double a1 = std::sqrt(0.72), s1 = std::sqrt(0.28), a3 = std::sqrt(0.3024), s3 = std::sqrt(1 - 0.3024);
  const std::vector<double> noisy = {a1 * 1.0 + s1 * 0.5, a3 * -2.0 + s3 * 3.0};

  DDPMScheduler eps(tiny_ddpm("epsilon"));
  TrainingBatch b = eps.training_batch(x0, noise, idx);
  EXPECT_EQ(b.prediction, Prediction::epsilon);
  EXPECT_EQ(b.timesteps.scalar_type(), at::kLong);
  expect_close(b.timesteps, {1, 3});
  expect_close(b.noisy, noisy, 1e-6);
  expect_close(b.target, {0.5, 3.0});
  expect_close(b.alpha_t, {a1, a3});
  expect_close(b.sigma_t, {s1, s3});
  expect_close(b.snr, {0.72 / 0.28, 0.3024 / (1 - 0.3024)}, 1e-5);
  // The forward process is the scheduler's add_noise.
  expect_close(eps.add_noise(x0, noise, idx), noisy, 1e-6);

  DDPMScheduler v(tiny_ddpm("v_prediction"));
  b = v.training_batch(x0, noise, idx);
  const std::vector<double> vel = {a1 * 0.5 - s1 * 1.0, a3 * 3.0 - s3 * -2.0};
  expect_close(b.target, vel, 1e-6);
  expect_close(v.get_velocity(x0, noise, idx), vel, 1e-6);

  DDPMScheduler smp(tiny_ddpm("sample"));
  b = smp.training_batch(x0, noise, idx);
  expect_close(b.target, {1.0, -2.0});
}

TEST(TrainingInterface, UniformDrawsMapToScheduleIndices) {
  DDPMScheduler s(nlohmann::json::object());
  const at::Tensor idx = s.indices_from_uniform(at::tensor({0.0, 0.5, 0.9999, 1.0}, at::kDouble));
  EXPECT_EQ(idx.scalar_type(), at::kLong);
  expect_close(idx, {0, 500, 999, 999});
}

TEST(TrainingInterface, FlowUniPCTrainsAsFlowMatchingWithItsShift) {
  auto s = load_scheduler(fixture("scheduler-unipc-wan"));
  EXPECT_EQ(s->prediction(), Prediction::flow);
  const TrainingBatch b = s->training_batch(at::zeros({1, 2}), at::ones({1, 2}), at::tensor({500}, at::kLong));
  expect_close(b.sigma_t, {0.75}, 1e-6);  // flow_shift 3 at s = 0.5
  expect_close(b.target, {1.0, 1.0});
}

TEST(TrainingInterface, BadIndicesAreRejected) {
  DDPMScheduler s(tiny_ddpm("epsilon"));
  EXPECT_THROW(s.training_batch(at::zeros({1, 1}), at::zeros({1, 1}), at::tensor({4}, at::kLong)), Error);
  EXPECT_THROW(s.training_batch(at::zeros({1, 1}), at::zeros({1, 1}), at::tensor({1.0f})), Error);
  EXPECT_THROW(s.training_batch(at::zeros({2, 1}), at::zeros({2, 1}), at::tensor({1}, at::kLong)), Error);
}

TEST(Config, PythonInfinityAndUnknownKeys) {
  test::TempDir tmp;
  tmp.write("scheduler_config.json",
            R"({"_class_name": "DPMSolverMultistepScheduler", "lambda_min_clipped": -Infinity,
                "some_future_option": [1, 2], "variance_type": null})");
  auto s = load_scheduler(tmp.path());
  EXPECT_EQ(s->class_name(), "DPMSolverMultistepScheduler");
  EXPECT_TRUE(std::isinf(s->config()["lambda_min_clipped"].get<double>()));
  // Another class from the same file, as DDPMScheduler.from_pretrained does for PixArt.
  EXPECT_EQ(load_scheduler(tmp.path(), "DDPMScheduler")->class_name(), "DDPMScheduler");
}

TEST(Config, InvalidValuesNameTheKey) {
  try {
    DDPMScheduler s(nlohmann::json{{"prediction_type", "epsilom"}}, "x/scheduler_config.json");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("x/scheduler_config.json"), std::string::npos) << m;
    EXPECT_NE(m.find("prediction_type"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'epsilon'"), std::string::npos) << m;
  }
  EXPECT_THROW(FlowMatchEulerDiscreteScheduler(nlohmann::json{{"shift", "three"}}), Error);
  EXPECT_THROW(UniPCMultistepScheduler(nlohmann::json{{"prediction_type", "flow_prediction"}}), Error);  // needs use_flow_sigmas
  EXPECT_THROW(make_scheduler("EulerDiscreteScheduler", nlohmann::json::object()), Error);
}

TEST(Registry, EverySchedulerClassIsRegisteredAsAScheduler) {
  io::ComponentRegistry reg;
  register_scheduler_components(reg);
  for (const char* c : {"FlowMatchEulerDiscreteScheduler", "DDPMScheduler", "DPMSolverMultistepScheduler",
                        "UniPCMultistepScheduler"}) {
    EXPECT_TRUE(reg.has(c)) << c;
    EXPECT_EQ(reg.kind(c), "scheduler");
  }
  io::ComponentSource src;
  src.class_name = "UniPCMultistepScheduler";
  src.dir = fixture("scheduler-unipc-wan");
  auto comp = reg.create(src);
  ASSERT_TRUE(comp);
  auto sched = std::dynamic_pointer_cast<Scheduler>(comp);
  ASSERT_TRUE(sched);
  sched->set_timesteps(4);
  EXPECT_EQ(sched->timesteps().size(0), 4);
}

TEST(Sampling, FlowMatchDynamicShiftingNeedsMu) {
  FlowMatchEulerDiscreteScheduler s(nlohmann::json{{"use_dynamic_shifting", true}});
  EXPECT_THROW(s.set_timesteps(4), Error);
  // With the same input sigmas (the Flux pipeline form), e^mu = 3 is a static shift of 3.
  SetTimestepsArgs a;
  a.sigmas = std::vector<double>{1.0, 0.75, 0.5, 0.25};
  a.mu = std::log(3.0);
  s.set_timesteps(a);
  FlowMatchEulerDiscreteScheduler shifted(nlohmann::json{{"shift", 3.0}});
  a.mu.reset();
  shifted.set_timesteps(a);
  expect_close(shifted.sigmas(), {1.0, 2.25 / 2.5, 1.5 / 2.0, 0.75 / 1.5, 0.0}, 1e-6);
  EXPECT_TRUE(at::allclose(s.sigmas(), shifted.sigmas(), 1e-6, 1e-7));
  EXPECT_EQ(s.sigmas().size(0), 5);
  EXPECT_EQ(s.sigmas()[-1].item<float>(), 0.0f);
}

TEST(Sampling, FlowMatchEulerStepIsExactForAConstantVelocity) {
  FlowMatchEulerDiscreteScheduler s(nlohmann::json::object());
  s.set_timesteps(4);
  const at::Tensor x0 = at::tensor({0.25f, -1.0f});
  const at::Tensor noise = at::tensor({1.0f, 2.0f});
  at::Tensor x = noise.clone();
  for (std::int64_t i = 0; i < 4; ++i) x = s.step(noise - x0, s.timesteps()[i], x);
  expect_close(x, {0.25, -1.0}, 1e-5);  // the straight path ends at x0
  EXPECT_THROW(s.step(noise - x0, s.timesteps()[0], x), Error);  // past the last step
  EXPECT_THROW(FlowMatchEulerDiscreteScheduler(nlohmann::json::object()).step(x, at::scalar_tensor(3, at::kLong), x),
               Error);  // integer index instead of a timestep
}

TEST(Sampling, DdpmLastStepReturnsTheClippedX0) {
  DDPMScheduler s(tiny_ddpm("epsilon"));
  const at::Tensor sample = at::tensor({0.5f, 4.0f});
  const at::Tensor eps = at::tensor({0.1f, 0.1f});
  // t = 0: prev = clip((x - sqrt(0.1) eps) / sqrt(0.9), -1, 1), no noise.
  const at::Tensor prev = s.step_with_noise(eps, at::scalar_tensor(0, at::kLong), sample, at::Tensor());
  expect_close(prev, {(0.5 - std::sqrt(0.1) * 0.1) / std::sqrt(0.9), 1.0}, 1e-6);
  s.set_timesteps(2);
  expect_close(s.timesteps(), {2, 0});  // leading spacing (the DDPM default): ratio 2
}

TEST(Sampling, MultistepStateResetsOnSetTimesteps) {
  auto s = load_scheduler(fixture("scheduler-unipc-default"));
  s->set_timesteps(3);
  const at::Tensor x = at::ones({1, 2});
  at::Tensor a = x;
  for (std::int64_t i = 0; i < 3; ++i) a = s->step(at::full({1, 2}, 0.1f), s->timesteps()[i], a);
  s->set_timesteps(3);
  at::Tensor b = x;
  for (std::int64_t i = 0; i < 3; ++i) b = s->step(at::full({1, 2}, 0.1f), s->timesteps()[i], b);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_EQ(s->attribute("this_order").item<std::int64_t>(), 1);  // lower_order_final at the last step
}

TEST(PipelineHelpers, CalculateShiftInterpolatesLinearly) {
  EXPECT_DOUBLE_EQ(calculate_shift(256), 0.5);
  EXPECT_NEAR(calculate_shift(4096), 1.15, 1e-12);
  EXPECT_NEAR(calculate_shift(24), 0.4607291666666667, 1e-15);  // flux-pipeline-latents: 24 packed tokens
}
