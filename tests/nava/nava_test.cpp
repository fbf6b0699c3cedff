// WanAVModel in process against the NAVA-recorded nava-dit case: the checkpoint's names are the
// upstream state dict, the step's draws follow torch's CPU generator in NAVA's order, a sample's
// outputs do not depend on the batch it is padded into, per-block activation checkpointing gives
// the same gradients, the LoRA target sets adapt the expected layers, and bad configs and inputs
// are refused naming the key.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "nava_family.hpp"
#include "nava_model.hpp"
#include "nava_train.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace nava = yeto::nava;

namespace {

const fs::path kCase = fs::path(YETO_TEST_FIXTURES) / "parity" / "nava-dit";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

nava::WanAVModel load_model() {
  auto model = nava::WanAVModel(nava::NavaConfig::from_json(read_json(kCase / "config.json")));
  yeto::nn::load_named_tensors(*model, yeto::io::load_safetensors(kCase / "model.safetensors"));
  model->eval();
  return model;
}

const std::map<std::string, at::Tensor>& inputs() {
  static const auto in = yeto::io::load_safetensors(kCase / "inputs.safetensors");
  return in;
}

// The recorded backbone call's inputs (nava-dit `backbone`).
nava::Inputs backbone_inputs() {
  const auto& in = inputs();
  nava::Inputs x;
  for (int i = 0; i < 2; ++i) {
    const auto si = std::to_string(i);
    x.video.push_back(in.at("backbone_in.vid." + si));
    x.audio.push_back(in.at("backbone_in.audio." + si));
    x.video_context.push_back(in.at("backbone_in.context." + si));
  }
  x.audio_context = x.video_context;
  x.t = in.at("backbone_in.t");
  x.speaker = in.at("backbone_in.spk_embed");
  x.speaker_positions = {{1, 3}, {}};
  return x;
}

nava::StepBatch step_batch() {
  const auto& in = inputs();
  nava::StepBatch b;
  for (int i = 0; i < 2; ++i) {
    const auto si = std::to_string(i);
    b.video.push_back(in.at("video_latents." + si));
    b.audio.push_back(in.at("audio_latents." + si));
    b.text.push_back(in.at("text." + si));
  }
  b.speaker = at::cat({in.at("spk_embs.0.0"), in.at("spk_embs.0.1")});
  b.speaker_positions = {{1, 3}, {}};
  return b;
}

}  // namespace

TEST(WanAVModel, CheckpointNamesAreTheUpstreamStateDict) {
  auto model = nava::WanAVModel(nava::NavaConfig::from_json(read_json(kCase / "config.json")));
  std::set<std::string> ours, theirs;
  for (const auto& p : model->named_parameters()) ours.insert(p.key());
  for (const auto& [n, t] : yeto::io::load_safetensors(kCase / "model.safetensors")) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
  EXPECT_TRUE(ours.count("patch_embedding_audio.2.w1.weight"));
  EXPECT_TRUE(ours.count("double_blocks.1.self_attn.norm_k_audio.weight"));
  EXPECT_TRUE(ours.count("speaker_embedding.null_token"));
  EXPECT_FALSE(ours.count("single_blocks.0.modulation_audio.modulation"));
  // The ConvMLP's hidden width: 256 * ceil(int(8 dim / 3) / 256) = 8192 for the 6B model.
  nava::NavaConfig six_b;
  EXPECT_EQ(six_b.audio_hidden(), 8192);
}

// torch.manual_seed(5104) then NAVA's draws (rand, rand, randint, rand, randn per audio sample,
// randn per video sample): the recorded timestep ids and noises, bit for bit.
TEST(NavaTrainStep, DrawsFollowTorchsGeneratorInNavasOrder) {
  auto b = step_batch();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5104);
  const auto d = nava::draw_step(gen, b);
  const auto expected = yeto::io::load_safetensors(kCase / "expected.safetensors");
  EXPECT_TRUE(torch::equal(d.timestep_id, expected.at("train.timestep_id"))) << d.timestep_id;
  for (int i = 0; i < 2; ++i) {
    const auto si = std::to_string(i);
    EXPECT_TRUE(torch::equal(b.audio_noise[static_cast<std::size_t>(i)], inputs().at("noise.audio." + si))) << i;
    EXPECT_TRUE(torch::equal(b.video_noise[static_cast<std::size_t>(i)], inputs().at("noise.video." + si))) << i;
  }
  EXPECT_GE(d.dropout.min().item<double>(), 0.1);  // the case drops no caption
}

// Padding: sample 1 alone gives the outputs it gets in the batch of two (its video and audio are
// padded there), in joint and in masking mode.
TEST(WanAVModel, ASamplesOutputsDoNotDependOnItsBatch) {
  auto model = load_model();
  torch::NoGradGuard no_grad;
  for (const bool masking : {false, true}) {
    auto both = backbone_inputs();
    both.masking_modality = masking;
    const auto batch = model->forward(both);
    nava::Inputs one = both;
    one.video = {both.video[1]};
    one.audio = {both.audio[1]};
    one.video_context = one.audio_context = {both.video_context[1]};
    one.t = both.t.narrow(0, 1, 1);
    // Sample 1 has no speaker rows, but the batch's blocks use the audio context: so do these.
    one.speaker = at::zeros({0, 192});
    one.speaker_positions = {{}};
    const auto alone = model->forward(one);
    EXPECT_LT((alone.video[0] - batch.video[1]).abs().max().item<double>(), 1e-5) << masking;
    EXPECT_LT((alone.audio[0] - batch.audio[1]).abs().max().item<double>(), 1e-5) << masking;
  }
}

// Per-block activation checkpointing recomputes in backward: the same loss and gradients.
TEST(WanAVModel, ActivationCheckpointingGivesTheSameGradients) {
  auto grads = [](bool checkpointing) {
    auto model = load_model();
    model->train();
    model->activation_checkpointing = {checkpointing, 1};
    auto b = step_batch();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5104);
    nava::draw_step(gen, b);
    const auto r = nava::train_step(model, nava::training_schedule(), b, {});
    r.loss.backward();
    std::map<std::string, at::Tensor> g;
    for (const auto& p : model->named_parameters())
      if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
    g["loss"] = r.loss.detach();
    return g;
  };
  const auto plain = grads(false), recomputed = grads(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (const auto& [n, g] : plain) EXPECT_TRUE(torch::allclose(g, recomputed.at(n), 1e-5, 1e-7)) << n;
}

// auto = the attention projections of both modalities in every self- and cross-attention (the 48
// modules PEFT adapts in the nava-dit-lora case); all-linear adds the embeddings and FFNs.
TEST(WanAVModel, LoraTargetSetsAdaptTheAttentionProjections) {
  auto model = load_model();
  const auto targets = nava::description().lora_targets(nlohmann::json("auto"));
  yeto::nn::LoraConfig lc;
  lc.r = 4;
  const auto adapted = yeto::nn::add_lora(*model, targets.patterns, lc);
  EXPECT_EQ(adapted.size(), 48u);
  for (const auto& p : adapted) {
    EXPECT_TRUE(p.find("self_attn.") != std::string::npos || p.find("cross_attn.") != std::string::npos) << p;
    EXPECT_EQ(p.find("ffn"), std::string::npos) << p;
  }
  EXPECT_TRUE(std::count(adapted.begin(), adapted.end(), "single_blocks.1.cross_attn.o"));
  EXPECT_TRUE(std::count(adapted.begin(), adapted.end(), "double_blocks.0.self_attn.v_audio"));
  auto other = load_model();
  const auto all = yeto::nn::lora_capable_layers(*other);
  EXPECT_GT(all.size(), 48u);
}

TEST(NavaConfig, BadConfigsAreRefusedNamingTheKey) {
  auto config = read_json(kCase / "config.json");
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& words) {
    auto c = config;
    c[key] = value;
    try {
      nava::NavaConfig::from_json(c);
      ADD_FAILURE() << key << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("no_split_norm_ffn", false, "'no_split_norm_ffn'");
  refused("num_layers", 5, "'num_layers' 5");
  refused("num_double_final_layers", 2, "'num_double_final_layers'");
  refused("num_heads", 3, "'num_heads' 3");
  refused("dim", "wide", "'dim'");
  refused("window_size", nlohmann::json::array({8, 8}), "'window_size'");
  refused("model_type", "t2a", "'model_type'");
}

TEST(WanAVModel, BadInputsAreRefusedNamingTheTensor) {
  auto model = load_model();
  torch::NoGradGuard no_grad;
  auto expect_refused = [&](const nava::Inputs& x, const std::string& words) {
    try {
      model->forward(x);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  auto x = backbone_inputs();
  x.video[1] = x.video[1].narrow(2, 0, 3);  // odd latent height: NAVA.forward pads it first
  expect_refused(x, "video latents 1 must be [12, F, H, W]");
  x = backbone_inputs();
  x.audio[0] = at::zeros({11, 8});
  expect_refused(x, "audio latents 0 must be [L, 16]");
  x = backbone_inputs();
  x.video_context[0] = at::zeros({9, 20});
  expect_refused(x, "must be [L <= 8, 20]");
  x = backbone_inputs();
  x.speaker = x.speaker.narrow(0, 0, 1);
  expect_refused(x, "the speaker embeddings must be [2, 192]");
  x = backbone_inputs();
  x.speaker_positions = {{1, 8}, {}};
  expect_refused(x, "speaker position 8 of sample 0");
}

// NAVA's i2v training mode: each video's first latent frame enters clean and the model runs with
// first_frame_is_clean (timestep 0 on those tokens); the targets keep every frame.
TEST(NavaTrainStep, I2vModeFeedsTheCleanFirstFrame) {
  auto model = load_model();
  torch::NoGradGuard no_grad;
  auto b = step_batch();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5104);
  nava::draw_step(gen, b);
  b.i2v = true;
  const auto r = nava::train_step(model, nava::training_schedule(), b, {});
  nava::Inputs in;
  for (int i = 0; i < 2; ++i) {
    const auto& z0 = b.video[static_cast<std::size_t>(i)];
    const auto& xt = r.video_input[static_cast<std::size_t>(i)];
    EXPECT_TRUE(torch::equal(xt[0], z0[0])) << i;
    EXPECT_FALSE(torch::equal(xt[1], z0[1])) << i;
    EXPECT_TRUE(torch::equal(r.video_target[static_cast<std::size_t>(i)],
                             b.video_noise[static_cast<std::size_t>(i)] - z0))
        << i;
    const auto h = z0.size(1), w = z0.size(2);
    in.video.push_back(at::constant_pad_nd(xt.permute({3, 0, 1, 2}), {0, w % 2, 0, h % 2}));
    in.audio.push_back(r.audio_input[static_cast<std::size_t>(i)]);
  }
  in.t = r.timesteps;
  in.video_context = in.audio_context = b.text;
  in.speaker = b.speaker;
  in.speaker_positions = b.speaker_positions;
  in.first_frame_is_clean = true;
  const auto out = model->forward(in);
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(torch::allclose(out.video[static_cast<std::size_t>(i)], r.pred_video[static_cast<std::size_t>(i)]))
        << i;
  in.first_frame_is_clean = false;
  EXPECT_FALSE(torch::allclose(model->forward(in).video[0], r.pred_video[0]));
}

// The presets: tiny is the parity case's shape; wide the release's widths (NAVA_6B.json) with one
// block of each kind; tiny-text adds the umT5 text encoder and its tokenizer.
TEST(NavaPresets, TinyIsTheParityShapeAndWideTheReleaseWidths) {
  const auto& presets = nava::description().presets();
  for (const char* p : {"tiny", "tiny-text", "wide"}) ASSERT_TRUE(presets.contains(p)) << presets.dump();
  const auto tiny = nava::NavaConfig::from_json(presets["tiny"]["components"]["transformer"]["config"]);
  const auto recorded = nava::NavaConfig::from_json(read_json(kCase / "config.json"));
  EXPECT_EQ(tiny.dim, recorded.dim);
  EXPECT_EQ(tiny.num_double_layers, recorded.num_double_layers);
  EXPECT_EQ(tiny.text_dim, recorded.text_dim);
  const auto wide = nava::NavaConfig::from_json(presets["wide"]["components"]["transformer"]["config"]);
  EXPECT_EQ(wide.dim, 3072);
  EXPECT_EQ(wide.num_heads, 24);
  EXPECT_EQ(wide.ffn_dim, 14336);
  EXPECT_EQ(wide.vid_in_dim, 48);
  EXPECT_EQ(wide.audio_in_dim, 128);
  EXPECT_EQ(wide.text_dim, 4096);
  EXPECT_EQ(wide.text_len, 512);
  EXPECT_EQ(wide.num_double_layers, 1);
  EXPECT_EQ(wide.num_single_layers, 1);
  EXPECT_DOUBLE_EQ(wide.temporal_rope_scaling_factor, 0.24);
  EXPECT_FALSE(presets["tiny"]["model_index"].contains("text_encoder"));
  EXPECT_EQ(presets["tiny-text"]["model_index"]["text_encoder"], nlohmann::json::array({"transformers", "UMT5EncoderModel"}));
  EXPECT_EQ(presets["tiny-text"]["components"]["text_encoder"]["config"]["d_model"], 20);
}
