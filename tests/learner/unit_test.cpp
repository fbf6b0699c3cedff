// Learner building blocks on tiny tensors: settings and the loss-name check, learning-rate
// schedules, timestep densities, loss weighting for every target type (hand-computed),
// multi-denoiser routing, AdamW and clipping, micro-batch probing, run control, checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <cmath>
#include <fstream>
#include <numbers>

#include "config/config.hpp"
#include "core/error.hpp"
#include "learner/adamw.hpp"
#include "learner/checkpoint.hpp"
#include "learner/loss.hpp"
#include "learner/micro_batch.hpp"
#include "learner/routing.hpp"
#include "learner/run_control.hpp"
#include "learner/settings.hpp"
#include "learner/timesteps.hpp"
#include "plugin/host_api.hpp"
#include "schedulers/scheduler.hpp"
#include "support/temp_dir.hpp"

namespace yeto::learner {
namespace {

namespace fs = std::filesystem;
using schedulers::Prediction;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

config::Config config_with(const std::vector<config::Override>& overrides) {
  return config::Config::resolve(std::nullopt, overrides);
}

// ---- settings --------------------------------------------------------------------------------

TEST(LearnerSettings, OnlyFlowMatchingIsAcceptedAndTheErrorListsTheNames) {
  EXPECT_NO_THROW(check_loss_name("flow_matching"));
  try {
    check_loss_name("mse");
    FAIL() << "mse accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "'mse'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "accepted: flow_matching")) << e.what();
    EXPECT_EQ(e.code(), ExitCode::usage);
  }
  try {
    read_settings(config_with({{"diffusion.loss", "l2", "--set"}}));
    FAIL() << "l2 accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "diffusion.loss")) << e.what();
    EXPECT_TRUE(contains(e.what(), "flow_matching")) << e.what();
  }
}

TEST(LearnerSettings, ReadsTheSchemaKeys) {
  const auto s = read_settings(config_with({{"diffusion.seed", "7", "--set"},
                                            {"diffusion.timestep_sampling", "mode", "--set"},
                                            {"diffusion.mode_scale", "0.5", "--set"},
                                            {"diffusion.loss_weighting", "min-snr", "--set"},
                                            {"diffusion.min_snr_gamma", "3", "--set"},
                                            {"train.micro_batch_size", "auto", "--set"},
                                            {"optimizer.schedule", "cosine", "--set"},
                                            {"train.max_steps", "20", "--set"}}));
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.density.kind, TimestepSampling::mode);
  EXPECT_DOUBLE_EQ(s.density.mode_scale, 0.5);
  EXPECT_EQ(s.weighting, LossWeighting::min_snr);
  EXPECT_DOUBLE_EQ(s.min_snr_gamma, 3.0);
  EXPECT_FALSE(s.micro_batch_size.has_value());
  EXPECT_EQ(s.optimizer.schedule, LrSchedule::cosine);
  EXPECT_EQ(s.optimizer.total_steps, 20);
  EXPECT_THROW(read_settings(config_with({{"optimizer.warmup_steps", "30", "--set"}, {"train.max_steps", "20", "--set"}})),
               UsageError);
}

TEST(LearnerSettings, LearningRateSchedules) {
  OptimizerSettings o;
  o.learning_rate = 1.0;
  o.warmup_steps = 4;
  o.total_steps = 14;
  o.schedule = LrSchedule::constant;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 1), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 2), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 14), 1.0);
  o.schedule = LrSchedule::linear;  // decay over the 10 steps after warm-up
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 3), 0.75);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 5), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 10), 0.5);
  EXPECT_NEAR(learning_rate_at(o, 14), 0.1, 1e-12);
  o.schedule = LrSchedule::cosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 5), 1.0);
  EXPECT_NEAR(learning_rate_at(o, 10), 0.5, 1e-12);  // half-way: cos(pi/2) = 0
  EXPECT_NEAR(learning_rate_at(o, 14), 0.5 * (1 + std::cos(std::numbers::pi * 0.9)), 1e-12);
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 1), 1.0);
}

// ---- timesteps --------------------------------------------------------------------------------

std::shared_ptr<schedulers::Scheduler> flow_scheduler(double shift = 1.0) {
  return schedulers::make_scheduler("FlowMatchEulerDiscreteScheduler",
                                    {{"num_train_timesteps", 1000}, {"shift", shift}});
}

TEST(LearnerTimesteps, DensitiesFollowDiffusersFormulas) {
  TimestepDensity d;
  auto g1 = make_generator(42);
  auto g2 = make_generator(42);
  d.kind = TimestepSampling::uniform;
  EXPECT_TRUE(torch::equal(sample_density(d, 16, g1), torch::rand({16}, g2)));

  d.kind = TimestepSampling::logit_normal;
  d.logit_mean = 0.5;
  d.logit_std = 2.0;
  EXPECT_TRUE(torch::allclose(sample_density(d, 16, g1), torch::sigmoid(torch::normal(0.5, 2.0, {16}, g2))));

  d.kind = TimestepSampling::mode;
  d.mode_scale = 1.29;
  const auto u = sample_density(d, 16, g1);
  const auto v = torch::rand({16}, g2);
  const auto c = torch::cos(v * (std::numbers::pi / 2));
  EXPECT_TRUE(torch::allclose(u, 1 - v - 1.29 * (c * c - 1 + v)));
  d.mode_scale = 0.0;  // no scale: u = 1 - v
  EXPECT_TRUE(torch::allclose(sample_density(d, 16, g1), 1 - torch::rand({16}, g2)));

  // The logit-normal mean moves the mass: mean 3 puts most samples at high noise.
  d.kind = TimestepSampling::logit_normal;
  d.logit_mean = 3.0;
  d.logit_std = 1.0;
  EXPECT_GT(sample_density(d, 2000, g1).gt(0.5).to(torch::kFloat).mean().item<double>(), 0.95);
}

TEST(LearnerTimesteps, IndicesAreTheSchedulersPositionsAndSeeded) {
  const auto sched = flow_scheduler();
  TimestepDensity d;
  d.kind = TimestepSampling::uniform;
  auto g1 = make_generator(3);
  auto g2 = make_generator(3);
  const auto idx = sample_indices(d, *sched, 64, g1);
  EXPECT_EQ(idx.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(idx, (torch::rand({64}, g2) * 1000).floor().to(torch::kLong)));
  EXPECT_GE(idx.min().item<std::int64_t>(), 0);
  EXPECT_LT(idx.max().item<std::int64_t>(), 1000);
  auto g3 = make_generator(4);
  EXPECT_FALSE(torch::equal(idx, sample_indices(d, *sched, 64, g3)));
}

TEST(LearnerTimesteps, StreamsAreKeyedBySeedRankAndName) {
  EXPECT_EQ(plugin::stream_seed(1, 0, "noise:1:0"), plugin::stream_seed(1, 0, "noise:1:0"));
  EXPECT_NE(plugin::stream_seed(1, 0, "noise:1:0"), plugin::stream_seed(1, 1, "noise:1:0"));
  EXPECT_NE(plugin::stream_seed(1, 0, "noise:1:0"), plugin::stream_seed(2, 0, "noise:1:0"));
  EXPECT_NE(plugin::stream_seed(1, 0, "noise:1:0"), plugin::stream_seed(1, 0, "noise:2:0"));
}

// ---- loss weighting ---------------------------------------------------------------------------

// Two samples: sigma 0.5 and 0.25, alpha 0.5 and 0.75 (flow: alpha = 1 - sigma), so snr = 1 and 9.
schedulers::TrainingBatch tiny_batch(Prediction p) {
  schedulers::TrainingBatch b;
  b.sigma_t = torch::tensor({0.5f, 0.25f});
  b.alpha_t = torch::tensor({0.5f, 0.75f});
  b.snr = torch::tensor({1.0f, 9.0f});
  b.prediction = p;
  return b;
}

void expect_weights(LossWeighting w, Prediction p, std::vector<float> expected, double gamma = 5.0) {
  const auto got = loss_weights(w, gamma, tiny_batch(p));
  EXPECT_TRUE(torch::allclose(got, torch::tensor(expected), 1e-6, 1e-7))
      << loss_weighting_name(w) << " / " << schedulers::prediction_name(p) << ": " << got;
}

TEST(LearnerLoss, WeightingsByHand) {
  for (auto p : {Prediction::flow, Prediction::epsilon, Prediction::sample, Prediction::v_prediction}) {
    expect_weights(LossWeighting::none, p, {1.0f, 1.0f});
    expect_weights(LossWeighting::linear, p, {0.5f, 0.25f});
    expect_weights(LossWeighting::sigma, p, {4.0f, 16.0f});
    expect_weights(LossWeighting::snr, p, {1.0f, 9.0f});
  }
  // min(snr, 5) = [1, 5], carried into each target's space.
  expect_weights(LossWeighting::min_snr, Prediction::epsilon, {1.0f, 5.0f / 9.0f});
  expect_weights(LossWeighting::min_snr, Prediction::v_prediction, {0.5f, 0.5f});
  expect_weights(LossWeighting::min_snr, Prediction::sample, {1.0f, 5.0f});
  expect_weights(LossWeighting::min_snr, Prediction::flow, {0.25f, 0.3125f});
  expect_weights(LossWeighting::min_snr, Prediction::epsilon, {1.0f, 1.0f}, 100.0);  // gamma above every snr
}

TEST(LearnerLoss, ElementNormalisedWeightedMse) {
  const auto pred = torch::tensor({1.0f, 2.0f, 0.0f, 0.0f}).view({2, 1, 2});
  const auto target = torch::tensor({0.0f, 0.0f, 1.0f, 1.0f}).view({2, 1, 2});
  EXPECT_TRUE(torch::allclose(per_sample_mse(pred, target), torch::tensor({2.5f, 1.0f})));
  const auto loss = weighted_loss(pred, target, torch::tensor({2.0f, 4.0f}));
  EXPECT_FLOAT_EQ(loss.item<float>(), (2.5f * 2 + 1.0f * 4) / 2);
  EXPECT_THROW(per_sample_mse(pred, target.view({2, 2})), Error);
}

// Each target type through the real schedulers: the target the loss regresses on, by hand.
TEST(LearnerLoss, TargetTypesFromTheSchedulers) {
  torch::manual_seed(5);
  const auto x0 = torch::randn({2, 1, 2, 2});
  const auto noise = torch::randn({2, 1, 2, 2});
  const auto idx = torch::tensor({100, 700}, torch::kLong);
  struct Case {
    std::string cls;
    nlohmann::json cfg;
    Prediction p;
  };
  const std::vector<Case> cases = {
      {"FlowMatchEulerDiscreteScheduler", {{"num_train_timesteps", 1000}, {"shift", 1.0}}, Prediction::flow},
      {"DDPMScheduler", {{"num_train_timesteps", 1000}, {"prediction_type", "epsilon"}}, Prediction::epsilon},
      {"DDPMScheduler", {{"num_train_timesteps", 1000}, {"prediction_type", "sample"}}, Prediction::sample},
      {"DDPMScheduler", {{"num_train_timesteps", 1000}, {"prediction_type", "v_prediction"}}, Prediction::v_prediction},
  };
  for (const auto& c : cases) {
    const auto sched = schedulers::make_scheduler(c.cls, c.cfg);
    const auto tb = sched->training_batch(x0, noise, idx);
    ASSERT_EQ(tb.prediction, c.p) << c.cls;
    const auto a = tb.alpha_t.view({-1, 1, 1, 1});
    const auto s = tb.sigma_t.view({-1, 1, 1, 1});
    EXPECT_TRUE(torch::allclose(tb.noisy, a * x0 + s * noise, 1e-5, 1e-6)) << c.cls;
    torch::Tensor expected;
    switch (c.p) {
      case Prediction::flow: expected = noise - x0; break;
      case Prediction::epsilon: expected = noise; break;
      case Prediction::sample: expected = x0; break;
      case Prediction::v_prediction: expected = a * noise - s * x0; break;
    }
    EXPECT_TRUE(torch::allclose(tb.target, expected, 1e-5, 1e-6)) << c.cls;
    EXPECT_TRUE(torch::allclose(tb.snr, (tb.alpha_t / tb.sigma_t).pow(2), 1e-4, 1e-6)) << c.cls;
    // With a zero prediction and snr weighting, the loss is mean_b snr_b * mean(target_b^2).
    const auto w = loss_weights(LossWeighting::snr, 5.0, tb);
    const auto got = weighted_loss(torch::zeros_like(tb.target), tb.target, w).item<double>();
    const auto per = expected.pow(2).view({2, -1}).mean(1);
    EXPECT_NEAR(got, (per * tb.snr).mean().item<double>(), 1e-4 * std::abs(got) + 1e-7) << c.cls;
  }
}

// ---- routing ---------------------------------------------------------------------------------

TEST(LearnerRouting, SamplesGoToTheirExpertAndComeBackInBatchOrder) {
  const auto ts = torch::tensor({900.0f, 100.0f, 875.0f, 874.0f});
  const auto routes = route_by_boundary(ts, {"transformer", "transformer_2"}, 875.0);
  ASSERT_EQ(routes.size(), 2u);
  EXPECT_EQ(routes[0].denoiser, "transformer");
  EXPECT_TRUE(torch::equal(routes[0].rows, torch::tensor({0, 2}, torch::kLong)));
  EXPECT_EQ(routes[1].denoiser, "transformer_2");
  EXPECT_TRUE(torch::equal(routes[1].rows, torch::tensor({1, 3}, torch::kLong)));

  // Each expert adds its own offset; the result is in batch order and keeps gradients.
  auto x = torch::arange(4, torch::kFloat).view({4, 1}).requires_grad_(true);
  const auto out = predict_routed(routes, 4, [&](const std::string& d, const torch::Tensor& rows) {
    return x.index_select(0, rows) + (d == "transformer" ? 100.0 : 200.0);
  });
  EXPECT_TRUE(torch::equal(out.detach(), torch::tensor({100.0f, 201.0f, 102.0f, 203.0f}).view({4, 1})));
  out.sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::ones({4, 1})));

  // One denoiser or no boundary: everything to the first.
  EXPECT_EQ(route_by_boundary(ts, {"transformer"}, 500.0).size(), 1u);
  EXPECT_EQ(route_by_boundary(ts, {"transformer", "transformer_2"}, std::nullopt).size(), 1u);
  // All high-noise: one route.
  EXPECT_EQ(route_by_boundary(torch::tensor({990.0f, 999.0f}), {"transformer", "transformer_2"}, 875.0).size(), 1u);
}

// ---- AdamW -----------------------------------------------------------------------------------

TEST(LearnerAdamW, OneStepByHand) {
  auto p = torch::ones({1}).requires_grad_(true);
  OptimizerSettings o;
  o.weight_decay = 0.01;
  AdamW adam({{"p", p}}, o);
  p.mutable_grad() = torch::full({1}, 0.5f);
  adam.step(0.1);
  // decay: 1 * (1 - 0.001); m = 0.05, v = 0.00025; m_hat / (sqrt(v_hat) + eps) = 0.1 / (0.5 + 1e-8) * 0.5
  const double expected = 0.999 - 0.1 * (0.05 / 0.1) / (std::sqrt(0.00025 / 0.001) + 1e-8);
  EXPECT_NEAR(p.item<double>(), expected, 1e-6);
  EXPECT_EQ(adam.steps(), 1);
}

TEST(LearnerAdamW, MatchesLibTorchAdamWOverSeveralSteps) {
  torch::manual_seed(1);
  auto a = torch::randn({3, 4}).requires_grad_(true);
  auto b = a.detach().clone().requires_grad_(true);
  OptimizerSettings o;
  o.learning_rate = 0.05;
  o.weight_decay = 0.1;
  AdamW ours({{"a", a}}, o);
  torch::optim::AdamW ref({b}, torch::optim::AdamWOptions(0.05).weight_decay(0.1).betas({0.9, 0.999}).eps(1e-8));
  for (int i = 0; i < 5; ++i) {
    const auto g = torch::randn({3, 4});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.step(0.05);
    ref.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << (a - b).abs().max();
}

TEST(LearnerAdamW, ClipsTheGlobalNorm) {
  auto p = torch::zeros({1}).requires_grad_(true);
  auto q = torch::zeros({1}).requires_grad_(true);
  p.mutable_grad() = torch::full({1}, 3.0f);
  q.mutable_grad() = torch::full({1}, 4.0f);
  const NamedParams params = {{"p", p}, {"q", q}};
  EXPECT_NEAR(clip_grad_norm(params, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(p.grad().item<double>(), 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(q.grad().item<double>(), 4.0 / (5.0 + 1e-6), 1e-6);
  // Below the limit nothing changes; 0 disables clipping.
  p.mutable_grad() = torch::full({1}, 0.3f);
  q.mutable_grad() = torch::full({1}, 0.4f);
  EXPECT_NEAR(clip_grad_norm(params, 1.0), 0.5, 1e-6);
  EXPECT_FLOAT_EQ(p.grad().item<float>(), 0.3f);
  p.mutable_grad() = torch::full({1}, 30.0f);
  EXPECT_NEAR(clip_grad_norm(params, 0.0), std::sqrt(900.0 + 0.16), 1e-4);
  EXPECT_FLOAT_EQ(p.grad().item<float>(), 30.0f);
}

// ---- micro batch = auto ------------------------------------------------------------------------

TEST(LearnerMicroBatch, PicksTheLargestSizeThatFitsEveryShapeAndRebalances) {
  ProbeRequest req;
  req.effective_batch = 8;
  req.budget_mb = 350;
  req.shapes = {{"1x32x32", {0, 1, 2}}, {"1x64x64", {3}}};
  double peak = 0;
  std::vector<std::pair<std::size_t, std::size_t>> probes;  // (rows, first row)
  auto probe = [&](const std::vector<std::size_t>& rows) {
    probes.emplace_back(rows.size(), rows[0]);
    peak = static_cast<double>(rows.size()) * (rows[0] == 3 ? 150.0 : 100.0);
  };
  auto d = choose_micro_batch(req, probe, [&] { return peak; }, [] {});
  EXPECT_EQ(d.micro_batch_size, 2);  // 32x32: 4 needs 400 MiB; 64x64: 2 needs 300
  EXPECT_EQ(d.gradient_accumulation, 4);
  EXPECT_TRUE(contains(d.log, "micro_batch_size 2")) << d.log;
  EXPECT_TRUE(contains(d.log, "1x64x64 x2 ok")) << d.log;

  // A shape with fewer rows than the probe size repeats its rows.
  EXPECT_EQ(probes.back().second, 3u);

  // Out of memory counts as not fitting; other errors propagate.
  auto oom = [&](const std::vector<std::size_t>& rows) {
    if (rows.size() > 1) throw std::runtime_error("CUDA out of memory. Tried to allocate 2 GiB");
    peak = 10;
  };
  d = choose_micro_batch(req, oom, [&] { return peak; }, [] {});
  EXPECT_EQ(d.micro_batch_size, 1);
  EXPECT_EQ(d.gradient_accumulation, 8);
  auto broken = [&](const std::vector<std::size_t>&) { throw Error("shape mismatch"); };
  EXPECT_THROW(choose_micro_batch(req, broken, [&] { return peak; }, [] {}), Error);
}

TEST(LearnerMicroBatch, PeakRssIsMeasurable) {
  reset_peak_rss();
  const double before = peak_rss_since_reset_mb();
  EXPECT_GT(before, 0.0);
  {
    std::vector<char> big(256u << 20, 1);
    volatile char sink = big[12345];
    (void)sink;
  }
  EXPECT_GT(peak_rss_since_reset_mb(), before + 200.0);
  EXPECT_GT(available_memory_mb(), 0.0);
}

// ---- run control -------------------------------------------------------------------------------

TEST(LearnerRunControl, SignalFilesAndSignals) {
  test::TempDir dir;
  RunControl control(dir.path());
  EXPECT_EQ(control.poll(), Request::none);
  dir.write("save", "");
  EXPECT_EQ(control.poll(), Request::save);
  EXPECT_FALSE(fs::exists(dir / "save"));
  EXPECT_EQ(control.poll(), Request::none);
  dir.write("save_quit", "");
  EXPECT_EQ(control.poll(), Request::save_quit);
  EXPECT_FALSE(fs::exists(dir / "save_quit"));
  std::raise(SIGTERM);  // handled: the process keeps running
  EXPECT_EQ(control.poll(), Request::save_quit);
  EXPECT_EQ(control.signal_received(), SIGTERM);
}

// ---- checkpoints -------------------------------------------------------------------------------

TEST(LearnerCheckpoint, RoundTripsBitExactlyAndRefusesDamage) {
  test::TempDir dir;
  torch::manual_seed(2);
  auto w = torch::randn({4, 3}).requires_grad_(true);
  auto v = torch::randn({5}).requires_grad_(true);
  const NamedParams params = {{"transformer.a.lora_A.weight", w}, {"transformer.a.lora_B.weight", v}};
  AdamW adam(params, OptimizerSettings{});
  w.mutable_grad() = torch::randn({4, 3});
  v.mutable_grad() = torch::randn({5});
  adam.step(1e-2);
  TrainState st;
  st.step = 7;
  st.samples = 28;
  st.epoch = 1;
  st.batch_in_epoch = 3;
  st.skipped_rows = 2;
  st.config_hash = "abc";
  save_checkpoint(dir.path(), st, params, adam);
  const auto w0 = w.detach().clone();
  const auto state0 = adam.state();

  auto w2 = torch::zeros({4, 3}).requires_grad_(true);
  auto v2 = torch::zeros({5}).requires_grad_(true);
  const NamedParams params2 = {{"transformer.a.lora_A.weight", w2}, {"transformer.a.lora_B.weight", v2}};
  AdamW adam2(params2, OptimizerSettings{});
  const auto latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->filename(), "step-00000007");
  const auto back = load_checkpoint(*latest, params2, adam2);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.samples, 28);
  EXPECT_EQ(back.epoch, 1);
  EXPECT_EQ(back.batch_in_epoch, 3);
  EXPECT_EQ(back.skipped_rows, 2);
  EXPECT_EQ(adam2.steps(), 1);
  EXPECT_TRUE(torch::equal(w2, w0));
  const auto state2 = adam2.state();
  ASSERT_EQ(state2.size(), state0.size());
  for (std::size_t i = 0; i < state0.size(); ++i) EXPECT_TRUE(torch::equal(state0[i].second, state2[i].second));

  // Older checkpoints are pruned, the newest two stay.
  for (std::int64_t s : {8, 9}) {
    st.step = s;
    save_checkpoint(dir.path(), st, params, adam);
  }
  EXPECT_FALSE(fs::exists(dir / "checkpoints/step-00000007"));
  EXPECT_TRUE(fs::exists(dir / "checkpoints/step-00000008"));
  EXPECT_EQ(latest_checkpoint(dir.path())->filename(), "step-00000009");

  // A damaged tensor file is refused by its hash.
  {
    std::fstream f(dir / "checkpoints/step-00000009/trainable.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  try {
    load_checkpoint(dir / "checkpoints/step-00000009", params2, adam2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::bad_input);
    EXPECT_TRUE(contains(e.what(), "trainable.safetensors")) << e.what();
  }
  // Other trainable tensors than the checkpoint's: the missing name is reported.
  auto u = torch::zeros({2}).requires_grad_(true);
  const NamedParams other = {{"transformer.b.lora_A.weight", u}};
  AdamW adam3(other, OptimizerSettings{});
  try {
    load_checkpoint(dir / "checkpoints/step-00000008", other, adam3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "transformer.b.lora_A.weight")) << e.what();
  }
}

}  // namespace
}  // namespace yeto::learner
