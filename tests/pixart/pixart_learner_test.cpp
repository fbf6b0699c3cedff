// PixArt's family semantics reach the generic learner only through plugin hooks:
//  - the learner and pipeline sources name no family and no learned-sigma / micro-condition rule;
//  - the tinyden test plugin and PixArt are served by the one generic TrainModel implementation;
//  - the hooks themselves: denoiser_kwargs gives resolution / aspect_ratio for a micro-conditioned
//    transformer (and nothing for the 512 px layout), denoise returns the full 8-channel output,
//    align selects its noise half for the epsilon target;
//  - the generic loop trains the micro-conditioned model (denoise refuses to run without the
//    conditions, so a finished run proves the loop passed denoiser_kwargs' tensors on).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <typeinfo>

#include "../learner/dataset.hpp"
#include "../learner/tinyden_model.hpp"
#include "config/config.hpp"
#include "io/repository.hpp"
#include "learner/model.hpp"
#include "learner/trainer.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"
#include "schedulers/scheduler.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace yeto::learner {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

config::Config pixart_config(const yeto::test::TempDir& dir, const fs::path& repo, int steps) {
  dir.write("run.toml",
            "[model]\nid = \"" + repo.string() + "\"\nadapter = \"pixart\"\nprecision = \"fp32\"\n"
            "max_sequence_length = 16\n"
            "[data]\npath = \"data/train.jsonl\"\nheight = 32\nwidth = 48\nworkers = 1\n"
            "[validation]\nsplit = 0.25\n"
            "[lora]\nr = 4\nalpha = 4.0\n"
            "[train]\nmax_steps = " + std::to_string(steps) + "\nmicro_batch_size = 2\ncheckpoint_every = 0\n"
            "[optimizer]\nlearning_rate = 0.01\nweight_decay = 0.0\n"
            "[diffusion]\nseed = 5\ntimestep_sampling = \"uniform\"\n");
  const std::vector<config::Override> o = {
      {"plugins.dirs", "[\"" + (fs::path(YETO_STAGE_DIR) / "plugins").string() + "\"]", "test"},
      {"plugins.trusted_keys", "[\"" + std::string(YETO_BUILD_KEY_PUBLIC) + "\"]", "test"},
      {"run.device", "cpu", "test"}};
  return config::Config::resolve(dir / "run.toml", o);
}

fs::path init_model(const yeto::test::TempDir& dir, const std::string& preset) {
  const fs::path out = dir / ("pixart-" + preset);
  const auto r = yeto::test::run_host({"init-model", "--family", "pixart", "--preset", preset, "--seed", "11", "--out",
                                       out.string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  return out;
}

const at::Tensor* find(const NamedTensors& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace

TEST(PixArtGenericLearner, LearnerAndPipelineSourcesNameNoFamilyRule) {
  // Family semantics belong to plugins: no PixArt name, no learned-sigma split and no
  // micro-condition in the generic training path (learner, pipeline loader, data, sync, ranks).
  const std::vector<std::string> forbidden = {"pixart", "learned_sigma", "learned sigma", "learned-sigma",
                                              "sigma split", "aspect_ratio", "added_cond", "out_channels"};
  std::size_t files = 0;
  for (const char* area : {"host/learner", "host/pipeline", "host/data", "host/sync", "host/island"}) {
    if (!fs::exists(fs::path(YETO_SOURCE_DIR) / area)) continue;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(YETO_SOURCE_DIR) / area)) {
      const auto ext = e.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      std::ifstream in(e.path());
      const std::string text = lower(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
      ++files;
      for (const auto& word : forbidden) EXPECT_EQ(text.find(word), std::string::npos) << e.path() << ": " << word;
    }
  }
  EXPECT_GT(files, 40u);
  // The loop's step goes through learner::diffusion_loss, and that through the hooks that carry
  // those rules.
  auto source = [](const char* file) {
    std::ifstream in(fs::path(YETO_SOURCE_DIR) / file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_NE(source("host/learner/trainer.cpp").find("diffusion_loss(model_, "), std::string::npos);
  const std::string loss = source("host/learner/loss.cpp");
  for (const char* hook : {"model.denoiser_kwargs(", "model.denoise(", "model.align("})
    EXPECT_NE(loss.find(hook), std::string::npos) << hook;
}

TEST(PixArtGenericLearner, HooksCarryTheMicroConditionsAndTheLearnedSigmaSplit) {
  yeto::test::TempDir dir;
  const auto repo = init_model(dir, "tiny-ms");
  const auto cfg = pixart_config(dir, repo, 1);
  auto pipeline = pipeline::Pipeline::open(cfg);
  auto model = make_plugin_model(pipeline->plugin(), pipeline->scheduler(), pipeline->denoisers(),
                                 boundary_ratio_of(pipeline->plan(), pipeline->repo().model_index()));
  // One implementation serves every family: the tinyden test plugin's model is the same class.
  auto tiny = test::open_tinyden_model();
  const TrainModel& pixart_model = *model;
  const TrainModel& tinyden_model = *tiny.model;
  EXPECT_EQ(typeid(pixart_model), typeid(tinyden_model));

  // DDPM-style epsilon targets from the repository's scheduler config (the DPM-Solver config read
  // for training is the same forward process as DDPMScheduler.from_pretrained of that folder).
  const auto& sched = model->scheduler();
  EXPECT_EQ(sched.prediction(), schedulers::Prediction::epsilon);
  const auto ddpm = schedulers::load_scheduler(repo / "scheduler", "DDPMScheduler");
  torch::manual_seed(0);
  const auto x0 = torch::randn({2, 4, 4, 6}), noise = torch::randn({2, 4, 4, 6});
  const auto idx = torch::tensor({17, 930}, torch::kLong);
  const auto tb = sched.training_batch(x0, noise, idx);
  const auto tb_ddpm = ddpm->training_batch(x0, noise, idx);
  EXPECT_TRUE(torch::equal(tb.noisy, tb_ddpm.noisy));
  EXPECT_TRUE(torch::equal(tb.target, noise));
  EXPECT_TRUE(torch::equal(tb.timesteps, idx));

  const auto cond = model->encode_conditioning({"a red horizontal gradient", "a blue vertical stripe"}, {});
  ASSERT_NE(find(cond, "prompt_embeds"), nullptr);
  ASSERT_NE(find(cond, "prompt_attention_mask"), nullptr);
  EXPECT_EQ(find(cond, "prompt_attention_mask")->sizes(), at::IntArrayRef({2, 16}));

  NamedTensors batch = {{"noisy", tb.noisy}, {"timesteps", tb.timesteps}, {"sigmas", tb.sigma_t}};
  for (const auto& c : cond) batch.push_back(c);
  const auto kwargs = model->denoiser_kwargs(batch, "transformer");
  const auto* res = find(kwargs, "resolution");
  const auto* ar = find(kwargs, "aspect_ratio");
  ASSERT_NE(res, nullptr);
  ASSERT_NE(ar, nullptr);
  // Latents 4 x 6 with VAE scale factor 8: 32 x 48 pixels.
  EXPECT_TRUE(torch::equal(*res, torch::tensor({32.0f, 48.0f}).repeat({2, 1})));
  EXPECT_TRUE(torch::allclose(*ar, torch::full({2, 1}, 32.0f / 48.0f)));

  NamedTensors inputs = {{"hidden_states", tb.noisy}, {"timesteps", tb.timesteps}};
  for (const auto& c : cond) inputs.push_back(c);
  // Without the hook's tensors the micro-conditioned transformer is not run.
  EXPECT_ANY_THROW(model->denoise(inputs, "transformer"));
  for (const auto& k : kwargs) inputs.push_back(k);
  at::Tensor pred;
  {
    torch::NoGradGuard ng;
    pred = model->denoise(inputs, "transformer");
  }
  ASSERT_EQ(pred.sizes(), at::IntArrayRef({2, 8, 4, 6}));  // noise and variance
  const auto [p, t] = model->align(pred, tb.target, "transformer");
  EXPECT_EQ(p.sizes(), tb.target.sizes());
  EXPECT_TRUE(torch::equal(p, pred.narrow(1, 0, 4)));
  EXPECT_FALSE(torch::equal(p, pred.narrow(1, 4, 4)));
  EXPECT_TRUE(torch::equal(t, tb.target));
  EXPECT_ANY_THROW(model->align(pred.narrow(1, 0, 6), tb.target, "transformer"));
}

TEST(PixArtGenericLearner, TheGenericLoopTrainsTheMicroConditionedModel) {
  yeto::test::TempDir dir;
  const auto repo = init_model(dir, "tiny-ms");
  learner::test::write_dataset(dir / "data", 8, {}, 48);
  const auto cfg = pixart_config(dir, repo, 4);
  auto pipeline = pipeline::Pipeline::open(cfg);
  auto model = make_plugin_model(pipeline->plugin(), pipeline->scheduler(), pipeline->denoisers(),
                                 boundary_ratio_of(pipeline->plan(), pipeline->repo().model_index()));
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, t] : model->trainable()) before[name] = t.detach().clone();
  ASSERT_EQ(before.size(), 40u);  // 20 adapted modules x (A, B)
  RunOptions o;
  o.run_dir = dir / "run";
  o.console = false;
  const auto r = train(*model, cfg, o, nullptr);
  EXPECT_EQ(r.steps, 4);
  ASSERT_TRUE(r.first_val_loss && r.last_val_loss);
  EXPECT_TRUE(std::isfinite(*r.last_val_loss));
  std::cout << "  pixart tiny-ms (micro-conditions): val_loss " << *r.first_val_loss << " -> " << *r.last_val_loss
            << "\n";
  std::size_t changed = 0;
  for (const auto& [name, t] : model->trainable()) changed += !torch::equal(t, before.at(name));
  EXPECT_EQ(changed, before.size());
}

}  // namespace yeto::learner
