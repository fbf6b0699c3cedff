// WanTransformer3DModel, AutoencoderKLWan and the Wan family rules against the Diffusers-recorded
// fixtures: forward output, loss and named gradients within each case.json's tolerances.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/Flags.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "support/checkpointing_check.hpp"
#include "support/family_host.hpp"
#include "support/temp_dir.hpp"
#include "wan_family.hpp"
#include "wan_transformer.hpp"
#include "yeto/family/wan_vae.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

// LibTorch's CPU allocator fills every new allocation with junk when this is set (c10/core/CPUAllocator.cpp).
C10_DECLARE_bool(caffe2_cpu_allocator_do_junk_fill);

namespace fs = std::filesystem;

namespace {

fs::path case_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "parity" / name; }
fs::path repo_dir(const std::string& name) { return fs::path(YETO_TEST_FIXTURES) / "repos" / name; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, const nlohmann::json& tol,
                  const std::string& key) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << key;
  const double rtol = tol.at("rtol").get<double>(), atol = tol.at("atol").get<double>();
  const auto a = actual.detach().to(at::kDouble), e = expected.to(at::kDouble);
  const auto err = (a - e).abs();
  const double worst = (err - (atol + rtol * e.abs())).max().item<double>();
  std::printf("  %-52s max abs err %.3g (atol %.3g, rtol %.3g)\n", key.c_str(), err.max().item<double>(), atol, rtol);
  EXPECT_LE(worst, 0.0) << key << ": max abs error " << err.max().item<double>();
}

yeto::wan::WanTransformer3DModel load_transformer(const fs::path& dir) {
  yeto::wan::WanTransformer3DModel m(yeto::wan::WanTransformerConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*m, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  m->eval();
  return m;
}

}  // namespace

TEST(WanTransformer, ParityForwardBackward) {
  const auto dir = case_dir("wan-transformer");
  const auto info = read_json(dir / "case.json");
  const auto& compare = info.at("compare");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  auto m = load_transformer(dir);
  auto run = [&] { return m->forward(in.at("hidden_states"), in.at("timestep"), in.at("encoder_hidden_states")); };
  {
    torch::NoGradGuard ng;
    expect_close(run(), ex.at("sample"), compare.at("sample"), "wan-transformer sample");
  }
  const auto loss = (run() - ex.at("loss_target")).pow(2).mean();
  expect_close(loss, ex.at("loss"), compare.at("loss"), "wan-transformer loss");
  loss.backward();
  const auto params = m->named_parameters();
  std::size_t checked = 0;
  for (const auto& [grad_key, param] : info.at("backward").at("grad_keys").items()) {
    const auto* p = params.find(param.get<std::string>());
    ASSERT_NE(p, nullptr) << param;
    ASSERT_TRUE(p->grad().defined()) << param;
    expect_close(p->grad(), ex.at(grad_key), compare.at(grad_key), "wan-transformer " + grad_key);
    ++checked;
  }
  EXPECT_EQ(checked, 6u);
}

TEST(WanTransformer, ActivationCheckpointingKeepsTheGradients) {
  using Model = yeto::wan::WanTransformer3DModel;
  const auto dir = case_dir("wan-transformer");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto target = yeto::io::load_safetensors(dir / "expected.safetensors").at("loss_target");
  const auto blocks = load_transformer(dir)->blocks->size();
  ASSERT_GE(blocks, 2u);
  yeto::test::expect_checkpointing_keeps_gradients<Model>(
      "wan", [&] { return load_transformer(dir); },
      [&](Model& m) { return m->forward(in.at("hidden_states"), in.at("timestep"), in.at("encoder_hidden_states")); },
      target, yeto::wan::description().lora_targets("auto").patterns, blocks);
}

// Wan 2.2 TI2V's per-token timesteps: [B, tokens] equal to t everywhere is the per-sample call
// (up to GEMM rounding); another value on the first frame's tokens changes exactly those tokens'
// modulation; a wrong token count is refused.
TEST(WanTransformer, PerTokenTimesteps) {
  const auto dir = case_dir("wan-transformer");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  auto m = load_transformer(dir);
  torch::NoGradGuard ng;
  const auto& x = in.at("hidden_states");
  const auto& ctx = in.at("encoder_hidden_states");
  const auto t = in.at("timestep").to(at::kFloat);
  const auto& p = m->config().patch_size;
  const auto frame = (x.size(3) / p[1]) * (x.size(4) / p[2]);
  const auto tokens = (x.size(2) / p[0]) * frame;
  const auto per_sample = m->forward(x, t, ctx);
  auto per_token = t.unsqueeze(1).expand({x.size(0), tokens}).contiguous();
  const auto same = m->forward(x, per_token, ctx);
  EXPECT_LE((same - per_sample).abs().max().item<double>(), 1e-5);
  per_token.narrow(1, 0, frame).zero_();  // WanImageToVideoPipeline's first-frame rule
  const auto first_zero = m->forward(x, per_token, ctx);
  EXPECT_GT((first_zero - per_sample).abs().max().item<double>(), 1e-3);
  EXPECT_THROW(m->forward(x, per_token.narrow(1, 0, tokens - 1), ctx), std::invalid_argument);
}

TEST(WanTransformer, CheckpointNamesMatchDiffusersExactly) {
  const auto dir = case_dir("wan-transformer");
  const auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors");
  yeto::wan::WanTransformer3DModel m(yeto::wan::WanTransformerConfig::from_json(read_json(dir / "config.json")));
  const auto named = yeto::nn::named_tensors(*m);
  EXPECT_EQ(named.size(), weights.size());
  for (const auto& [k, v] : weights) {
    ASSERT_TRUE(named.count(k)) << "model lacks " << k;
    EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
  }
}

TEST(WanTransformer, ConfigErrorsNameTheKey) {
  auto j = read_json(case_dir("wan-transformer") / "config.json");
  j["image_dim"] = 1280;
  try {
    yeto::wan::WanTransformerConfig::from_json(j);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("image_dim"), std::string::npos) << e.what();
  }
  j = read_json(case_dir("wan-transformer") / "config.json");
  j["patch_size"] = {1, 2};
  EXPECT_THROW(yeto::wan::WanTransformerConfig::from_json(j), std::invalid_argument);
}

TEST(WanTransformer, LoraStartsAsIdentityOnTheAttentionProjections) {
  auto m = load_transformer(case_dir("wan-transformer"));
  const auto in = yeto::io::load_safetensors(case_dir("wan-transformer") / "inputs.safetensors");
  torch::NoGradGuard ng;
  const auto before = m->forward(in.at("hidden_states"), in.at("timestep"), in.at("encoder_hidden_states"));
  const auto targets = yeto::wan::description().lora_targets("auto");
  for (auto& p : m->parameters()) p.set_requires_grad(false);  // as the plugin's prepare does
  yeto::nn::LoraConfig cfg;
  const auto paths = yeto::nn::add_lora(*m, targets.patterns, cfg);
  EXPECT_EQ(paths.size(), 2u * 8u);  // 2 blocks x (attn1, attn2) x (q, k, v, out)
  const auto after = m->forward(in.at("hidden_states"), in.at("timestep"), in.at("encoder_hidden_states"));
  EXPECT_TRUE(at::equal(before, after));
  for (const auto& p : m->named_parameters())
    EXPECT_EQ(p.value().requires_grad(), p.key().find("lora_") != std::string::npos) << p.key();
}

TEST(WanVae, ParityEncodeDecode) {
  const auto dir = case_dir("wan-vae");
  const auto info = read_json(dir / "case.json");
  const auto& compare = info.at("compare");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  yeto::wan::AutoencoderKLWan vae(yeto::wan::WanVaeConfig::from_json(read_json(dir / "config.json")));
  const auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors");
  EXPECT_EQ(yeto::nn::named_tensors(*vae).size(), weights.size());
  yeto::nn::load_named_tensors(*vae, weights);
  torch::NoGradGuard ng;
  const auto d = vae->encode(in.at("x"));
  expect_close(d.mean, ex.at("encode.latent_dist.mean"), compare.at("encode.latent_dist.mean"), "wan-vae mean");
  expect_close(d.logvar, ex.at("encode.latent_dist.logvar"), compare.at("encode.latent_dist.logvar"), "wan-vae logvar");
  expect_close(at::exp(0.5 * d.logvar), ex.at("encode.latent_dist.std"), compare.at("encode.latent_dist.std"),
               "wan-vae std");
  const auto out = vae->decode(in.at("z"));
  expect_close(out, ex.at("decode.sample"), compare.at("decode.sample"), "wan-vae decode");
  EXPECT_EQ(out.size(2), 5);  // 1 + 4 (t - 1) frames from t = 2
}

TEST(WanVae, Wan22ParityEncodeDecodeAndImage) {
  const auto dir = case_dir("wan22-vae");
  const auto info = read_json(dir / "case.json");
  const auto& compare = info.at("compare");
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto ex = yeto::io::load_safetensors(dir / "expected.safetensors");
  const auto cfg = yeto::wan::WanVaeConfig::from_json(read_json(dir / "config.json"));
  EXPECT_EQ(cfg.spatial_factor(), 16);
  EXPECT_EQ(cfg.temporal_factor(), 4);
  yeto::wan::AutoencoderKLWan vae(cfg);
  const auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors");
  const auto named = yeto::nn::named_tensors(*vae);
  EXPECT_EQ(named.size(), weights.size());
  for (const auto& [k, v] : weights) {
    ASSERT_TRUE(named.count(k)) << "model lacks " << k;
    EXPECT_EQ(named.at(k).sizes(), v.sizes()) << k;
  }
  yeto::nn::load_named_tensors(*vae, weights);
  torch::NoGradGuard ng;
  at::Tensor patchified;
  const auto d = vae->encode(in.at("x"), &patchified);
  EXPECT_TRUE(at::equal(patchified, ex.at("encode.patchified_x")));  // exact re-indexing
  EXPECT_TRUE(at::equal(yeto::wan::wan_unpatchify(patchified, 2), in.at("x")));
  for (const char* f : {"mean", "logvar", "std"}) {
    const std::string key = std::string("encode.latent_dist.") + f;
    expect_close(std::string(f) == "std" ? at::exp(0.5 * d.logvar) : std::string(f) == "mean" ? d.mean : d.logvar,
                 ex.at(key), compare.at(key), "wan22-vae " + key);
  }
  const auto img = vae->encode(in.at("x_image"));
  expect_close(img.mean, ex.at("encode_image.latent_dist.mean"), compare.at("encode_image.latent_dist.mean"),
               "wan22-vae encode_image mean");
  expect_close(img.logvar, ex.at("encode_image.latent_dist.logvar"), compare.at("encode_image.latent_dist.logvar"),
               "wan22-vae encode_image logvar");
  at::Tensor raw;
  const auto out = vae->decode(in.at("z"), &raw);
  expect_close(raw, ex.at("decode.decoder_output"), compare.at("decode.decoder_output"), "wan22-vae decoder_output");
  expect_close(out, ex.at("decode.sample"), compare.at("decode.sample"), "wan22-vae decode");
  EXPECT_EQ(out.size(2), 5);  // 1 + 4 (t - 1) frames from t = 2
}

// Same latents -> same bytes in bf16 (model.precision = "bf16"; oneDNN's bf16 kernels on CPU):
// decoded on one intra-op thread, on two, and with every new allocation junk-filled (one and two),
// the Wan 2.2 VAE gives bit-identical pictures. Three latent frames, so the causal cache (the first
// latent frame decodes alone, later ones through the cached frames and the temporal upsampler's
// time_conv) is read twice. A kernel whose reduction depends on the thread count or on the timing
// of the threads, or a read of memory nothing wrote, shows here as a difference.
TEST(WanVae, Wan22Bf16DecodeIsTheSameBytesOnAnyThreadsAndAllocations) {
  const auto dir = case_dir("wan22-vae");
  yeto::wan::AutoencoderKLWan vae(yeto::wan::WanVaeConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::load_named_tensors(*vae, yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"));
  vae->to(at::kBFloat16);
  torch::NoGradGuard ng;
  const auto z = at::randn({1, vae->config().z_dim, 3, 2, 2}, at::detail::createCPUGenerator(7));
  const int threads = at::get_num_threads();
  const bool junk = FLAGS_caffe2_cpu_allocator_do_junk_fill;
  auto decode = [&](int n, bool junk_fill) {
    at::set_num_threads(n);
    FLAGS_caffe2_cpu_allocator_do_junk_fill = junk_fill;
    auto y = vae->decode(z);
    FLAGS_caffe2_cpu_allocator_do_junk_fill = junk;
    at::set_num_threads(threads);
    return y;
  };
  const auto one = decode(1, false);
  ASSERT_EQ(one.scalar_type(), at::kBFloat16);
  ASSERT_EQ(one.size(2), 9);
  EXPECT_TRUE(at::isfinite(one).all().item<bool>());
  for (const auto& [n, junk_fill] : std::vector<std::pair<int, bool>>{{2, false}, {1, true}, {2, true}}) {
    const auto y = decode(n, junk_fill);
    if (at::equal(y, one)) continue;
    const auto diff = (y.to(at::kFloat) - one.to(at::kFloat)).abs().amax({0, 1, 3, 4});
    std::ostringstream frames;
    for (std::int64_t f = 0; f < diff.size(0); ++f) frames << " " << diff[f].item<float>();
    ADD_FAILURE() << n << " thread(s)" << (junk_fill ? ", junk-filled allocations" : "")
                  << ": the frames differ from one thread's by at most" << frames.str();
  }
}

TEST(WanVae, Wan22ConfigErrorsNameTheKey) {
  auto expect_refused = [](const nlohmann::json& j, const std::string& key) {
    try {
      yeto::wan::WanVaeConfig::from_json(j);
      ADD_FAILURE() << "accepted a config with a bad '" << key << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  const auto good = read_json(case_dir("wan22-vae") / "config.json");
  auto j = good;
  j["scale_factor_spatial"] = 8;  // patch 2 x 2^3 = 16
  expect_refused(j, "scale_factor_spatial");
  j = good;
  j["attn_scales"] = {1.0};
  expect_refused(j, "attn_scales");
  j = good;
  j["dim_mult"] = {1, 3, 2, 2};  // encoder 4 -> 12: 4 x 8 folded channels do not average onto 12
  expect_refused(j, "dim_mult");
  j = good;
  j["patch_size"] = 0;
  expect_refused(j, "patch_size");
  // Wan 2.1 configs (no patch size, no residual blocks) still read as before.
  const auto c21 = yeto::wan::WanVaeConfig::from_json(read_json(case_dir("wan-vae") / "config.json"));
  EXPECT_FALSE(c21.is_residual);
  EXPECT_EQ(c21.patch_size, 1);
  EXPECT_EQ(c21.decoder_base_dim, c21.base_dim);
}

namespace {
// The original Wan2.2_VAE.pth name of a Diffusers AutoencoderKLWan tensor (WanVAE_ of the Wan 2.2
// release), written independently of the plugin's mapping: the reverse of each rule.
std::string wan22_original_name(const std::string& d) {
  auto replace_all = [](std::string s, const std::string& a, const std::string& b) {
    for (auto p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size())) s.replace(p, a.size(), b);
    return s;
  };
  std::string s = d;
  if (s.rfind("quant_conv.", 0) == 0) return "conv1." + s.substr(11);
  if (s.rfind("post_quant_conv.", 0) == 0) return "conv2." + s.substr(16);
  s = replace_all(s, ".conv_in.", ".conv1.");
  s = replace_all(s, ".norm_out.", ".head.0.");
  s = replace_all(s, ".conv_out.", ".head.2.");
  s = replace_all(s, ".mid_block.attentions.0.", ".middle.1.");
  s = replace_all(s, ".mid_block.resnets.0.", ".middle.0.");
  s = replace_all(s, ".mid_block.resnets.1.", ".middle.2.");
  std::smatch m;
  static const std::regex down(R"(^encoder\.down_blocks\.(\d+)\.(resnets\.(\d+)|downsampler)\.(.*)$)");
  static const std::regex up(R"(^decoder\.up_blocks\.(\d+)\.(resnets\.(\d+)|upsampler)\.(.*)$)");
  if (std::regex_match(s, m, down))
    s = "encoder.downsamples." + m[1].str() + ".downsamples." + (m[3].matched ? m[3].str() : std::string("2")) + "." +
        m[4].str();
  else if (std::regex_match(s, m, up))
    s = "decoder.upsamples." + m[1].str() + ".upsamples." + (m[3].matched ? m[3].str() : std::string("3")) + "." +
        m[4].str();
  s = replace_all(s, ".norm1.", ".residual.0.");
  s = replace_all(s, ".conv1.weight", ".residual.2.weight");
  s = replace_all(s, ".conv1.bias", ".residual.2.bias");
  s = replace_all(s, ".norm2.", ".residual.3.");
  s = replace_all(s, ".conv2.", ".residual.6.");
  s = replace_all(s, ".conv_shortcut.", ".shortcut.");
  // encoder.conv1 / decoder.conv1 (conv_in) were turned into residual names above: restore them.
  s = replace_all(s, "encoder.residual.2.", "encoder.conv1.");
  s = replace_all(s, "decoder.residual.2.", "decoder.conv1.");
  return s;
}
}  // namespace

// A state dict written with the original release's names (Wan2.2_VAE.pth) loads through the
// mapping and reproduces the Diffusers-named model's outputs exactly.
TEST(WanVae, Wan22OriginalReleaseNamesMapOntoDiffusers) {
  const auto dir = case_dir("wan22-vae");
  const auto weights = yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors");
  const auto cfg = yeto::wan::WanVaeConfig::from_json(read_json(dir / "config.json"));
  std::map<std::string, at::Tensor> original;
  for (const auto& [k, v] : weights) {
    const auto o = wan22_original_name(k);
    EXPECT_NE(o, k) << "no original name for " << k;
    EXPECT_TRUE(original.emplace(o, v).second) << "two tensors named " << o;
  }
  EXPECT_TRUE(original.count("encoder.downsamples.0.downsamples.0.residual.0.gamma"));
  EXPECT_TRUE(original.count("decoder.upsamples.0.upsamples.3.time_conv.weight"));
  EXPECT_TRUE(original.count("encoder.middle.1.to_qkv.weight"));
  std::map<std::string, at::Tensor> mapped;
  for (const auto& [k, v] : original) mapped.emplace(yeto::wan::wan22_vae_diffusers_name(k), v);
  yeto::wan::AutoencoderKLWan a(cfg), b(cfg);
  yeto::nn::load_named_tensors(*a, weights);
  yeto::nn::load_named_tensors(*b, mapped);  // strict: every name must land
  const auto in = yeto::io::load_safetensors(dir / "inputs.safetensors");
  torch::NoGradGuard ng;
  EXPECT_TRUE(at::equal(a->decode(in.at("z")), b->decode(in.at("z"))));
  EXPECT_TRUE(at::equal(a->encode(in.at("x")).mean, b->encode(in.at("x")).mean));
  EXPECT_EQ(yeto::wan::wan22_vae_diffusers_name("decoder.up_blocks.0.resnets.0.norm1.gamma"),
            "decoder.up_blocks.0.resnets.0.norm1.gamma");  // Diffusers names pass through
}

// Through the plugin: the wan22-vae case with its weights file written in the original names
// passes check-parity (the VAE component renames as it loads).
TEST(WanVae, Wan22OriginalNamesLoadThroughThePlugin) {
  yeto::test::TempDir tmp;
  const auto dir = case_dir("wan22-vae");
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename() != "diffusion_pytorch_model.safetensors") fs::copy_file(f.path(), tmp / f.path().filename().string());
  std::vector<std::pair<std::string, at::Tensor>> original;
  for (const auto& [k, v] : yeto::io::load_safetensors(dir / "diffusion_pytorch_model.safetensors"))
    original.emplace_back(wan22_original_name(k), v);
  yeto::io::save_safetensors(tmp / "diffusion_pytorch_model.safetensors", original);
  nlohmann::json cases;
  yeto::test::run_check_parity({tmp.path()}, &cases);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_TRUE(cases[0].at("pass").get<bool>()) << cases[0].dump(1);
  EXPECT_EQ(cases[0].at("comparisons").size(), 9u);
}

TEST(WanFamily, PlanFromBothTinyRepositories) {
  const auto one = yeto::wan::plan_from_model_index("m", read_json(repo_dir("wan21-tiny") / "model_index.json"));
  EXPECT_EQ(one.at("components").size(), 5u);
  EXPECT_FALSE(one.contains("boundary_ratio"));
  const auto two = yeto::wan::plan_from_model_index("m", read_json(repo_dir("wan22-tiny") / "model_index.json"));
  EXPECT_EQ(two.at("components").size(), 6u);
  EXPECT_EQ(two.at("components").at("transformer_2").at("class"), "WanTransformer3DModel");
  EXPECT_DOUBLE_EQ(two.at("boundary_ratio").get<double>(), 0.875);
  auto bad = read_json(repo_dir("wan22-tiny") / "model_index.json");
  bad.erase("boundary_ratio");
  try {
    yeto::wan::plan_from_model_index("m", bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("boundary_ratio"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model_index.json"), std::string::npos) << e.what();
  }
  bad = read_json(repo_dir("wan21-tiny") / "model_index.json");
  bad["vae"] = {"diffusers", "AutoencoderKL"};
  EXPECT_THROW(yeto::wan::plan_from_model_index("m", bad), std::invalid_argument);
}

TEST(WanFamily, PlanFromTheTi2vRepository) {
  // transformer_2 [null, null] is an absent optional component; boundary_ratio null a setting.
  const auto index = read_json(repo_dir("wan22-ti2v-tiny") / "model_index.json");
  const auto plan = yeto::wan::plan_from_model_index("m", index);
  EXPECT_EQ(plan.at("components").size(), 5u);
  EXPECT_FALSE(plan.at("components").contains("transformer_2"));
  EXPECT_FALSE(plan.contains("boundary_ratio"));
  EXPECT_TRUE(plan.value("expand_timesteps", false));
  auto bad = index;
  bad["transformer_2"] = {"diffusers", "WanTransformer3DModel"};
  bad["boundary_ratio"] = 0.875;
  try {
    yeto::wan::plan_from_model_index("m", bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expand_timesteps"), std::string::npos) << e.what();
  }
  bad = index;
  bad["expand_timesteps"] = "yes";
  EXPECT_THROW(yeto::wan::plan_from_model_index("m", bad), std::invalid_argument);
  bad["expand_timesteps"] = false;
  EXPECT_FALSE(yeto::wan::plan_from_model_index("m", bad).contains("expand_timesteps"));
}

TEST(WanFamily, TinyPresetsAreTheTinyRepositoriesShapes) {
  const auto p = yeto::wan::description().presets();
  for (const auto& [preset, repo] : {std::pair{"tiny", "wan21-tiny"}, std::pair{"tiny-a14b", "wan22-tiny"},
                                     std::pair{"tiny-ti2v", "wan22-ti2v-tiny"}}) {
    const bool ti2v = std::string(preset) == "tiny-ti2v";
    const auto& comps = p.at(preset).at("components");
    for (const char* name : {"transformer", "transformer_2", "vae", "text_encoder"}) {
      if (!fs::exists(repo_dir(repo) / name)) {
        EXPECT_FALSE(comps.contains(name)) << preset << " " << name;
        continue;
      }
      auto want = read_json(repo_dir(repo) / name / "config.json");
      for (const char* k : {"_diffusers_version", "output_past", "use_cache", "pos_embed_seq_len"}) want.erase(k);
      // Keys Diffusers v0.40.0 added to AutoencoderKLWan, at their Wan 2.1 values.
      const nlohmann::json v040 = {{"decoder_base_dim", nullptr}, {"in_channels", 3},  {"is_residual", false},
                                   {"out_channels", 3},           {"patch_size", nullptr}, {"scale_factor_spatial", 8},
                                   {"scale_factor_temporal", 4}};
      for (const auto& [k, v] : v040.items())
        if (!ti2v && std::string(name) == "vae" && want.contains(k)) {
          EXPECT_EQ(want[k], v) << preset << " " << name << " " << k;
          want.erase(k);
        }
      EXPECT_EQ(comps.at(name).at("config"), want) << preset << " " << name;
    }
    const auto index = read_json(repo_dir(repo) / "model_index.json");
    EXPECT_EQ(p.at(preset).at("model_index").contains("boundary_ratio"), !index.value("boundary_ratio", nlohmann::json()).is_null());
    EXPECT_EQ(p.at(preset).at("model_index").value("expand_timesteps", false), index.value("expand_timesteps", false));
    EXPECT_EQ(comps.at("scheduler").at("config").at("flow_shift"),
              read_json(repo_dir(repo) / "scheduler" / "scheduler_config.json").at("flow_shift"))
        << preset;
  }
  // The benchmark preset's configurations are consistent.
  const auto& mid = p.at("mid").at("components");
  EXPECT_EQ(yeto::wan::WanTransformerConfig::from_json(mid.at("transformer").at("config")).inner_dim(), 384);
  EXPECT_EQ(yeto::wan::WanVaeConfig::from_json(mid.at("vae").at("config")).spatial_factor(), 8);
  // The wide preset has Wan 2.1 14B's real widths.
  const auto& wide = p.at("wide").at("components");
  const auto w = yeto::wan::WanTransformerConfig::from_json(wide.at("transformer").at("config"));
  EXPECT_EQ(w.inner_dim(), 5120);
  EXPECT_EQ(w.ffn_dim, 13824);
  EXPECT_EQ(w.text_dim, 4096);
  EXPECT_EQ(wide.at("text_encoder").at("config").at("d_model"), 4096);
}

TEST(WanFamily, FramesAndRequest) {
  EXPECT_EQ(yeto::wan::valid_num_frames(5, 4), 5);
  EXPECT_EQ(yeto::wan::valid_num_frames(6, 4), 5);
  EXPECT_EQ(yeto::wan::valid_num_frames(8, 4), 9);
  EXPECT_EQ(yeto::wan::valid_num_frames(1, 4), 1);
  const auto r = yeto::wan::parse_generate_request({{"prompts", {"a"}}, {"guidance", 4.0}, {"guidance_2", 3.0}});
  EXPECT_DOUBLE_EQ(r.guidance_2.value(), 3.0);
  EXPECT_THROW(yeto::wan::parse_generate_request({{"prompts", {"a"}}, {"num_frames", 0}}), std::invalid_argument);
  EXPECT_THROW(yeto::wan::parse_generate_request(nlohmann::json::object()), std::invalid_argument);
  EXPECT_THROW(yeto::wan::description().lora_targets(nlohmann::json::array()), std::invalid_argument);
}
