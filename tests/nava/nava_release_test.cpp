// NAVA's release layout through yeto-host: a directory with config.json (NAVA_6B.json's layout)
// and NAVA.safetensors, every WanAVModel tensor under "backbone.", trains to the same bytes as the
// same weights in the pipeline layout; the bf16 release trains in float32 and with fp8 storage; an
// unknown tensor or a bad config is refused naming it; the alias and the hub id open it from the
// hub cache; NAVA_fp8.safetensors (e4m3 block Linears with their weight_scale) loads exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "yeto/nn/linear.hpp"

#include "io/safetensors.hpp"
#include "io/tensors.hpp"
#include "support/family_host.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

// Rows of the tiny preset's shapes: a moving blob, an audio burst, class captions.
void write_rows(const fs::path& dir) {
  fs::create_directories(dir);
  std::string manifest;
  torch::manual_seed(11);
  for (int i = 0; i < 8; ++i) {
    const auto name = "row" + std::to_string(i);
    auto video = 0.05 * torch::randn({2, 4, 4, 12});
    video[0][1][i % 4] += 1.0;
    yeto::io::save_safetensors(dir / (name + ".v.safetensors"), {{"latents", video}});
    yeto::io::save_safetensors(dir / (name + ".a.safetensors"), {{"audio_latents", torch::randn({6, 16})}});
    yeto::io::save_safetensors(dir / (name + ".t.safetensors"), {{"prompt_embeds", torch::randn({5, 20})}});
    manifest += nlohmann::json{{"latents", name + ".v.safetensors"},
                               {"prompt", ""},
                               {"tensors",
                                {{"audio_latents", name + ".a.safetensors"}, {"prompt_embeds", name + ".t.safetensors"}}}}
                    .dump() +
                "\n";
  }
  std::ofstream(dir / "train.jsonl") << manifest;
}

std::string toml(const fs::path& model) {
  yeto::test::TinyLoraRun run{model.string(), "nava"};
  run.data = "";
  run.validation_rows = 2;
  run.steps = 3;
  run.micro_batch_size = 2;
  run.checkpoint_every = 1000;
  return run.toml();
}

// config.json as NAVA ships it: NAVA_6B.json's keys (no _class_name, no text_dim in the release
// file; the tiny one needs its text width).
void write_release_config(const fs::path& repo, const fs::path& out) {
  auto config = nlohmann::json::parse(yeto::test::read_text(repo / "transformer" / "config.json"));
  config.erase("_class_name");
  config.erase("add_spk_emb");
  config.erase("no_split_norm_ffn");
  fs::create_directories(out);
  std::ofstream(out / "config.json") << config.dump(2);
}

std::map<std::string, at::Tensor> tiny_weights(const fs::path& repo) {
  return yeto::io::load_safetensors(repo / "transformer" / "diffusion_pytorch_model.safetensors");
}

std::vector<std::pair<std::string, at::Tensor>> with_prefix(const std::map<std::string, at::Tensor>& w) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [n, t] : w) out.emplace_back("backbone." + n, t);
  return out;
}

double first_val_loss(const fs::path& run) { return yeto::test::metric_series(run, "val_loss", true).at(0); }

}  // namespace

TEST(NavaRelease, TheReleaseLayoutTrainsToTheSameBytesAsThePipelineLayout) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  write_rows(tmp / "data");
  const auto release = tmp / "release";
  write_release_config(repo, release);
  yeto::io::save_safetensors(release / "NAVA.safetensors", with_prefix(tiny_weights(repo)));

  tmp.write("pipeline.toml", toml(repo));
  tmp.write("release.toml", toml(release));
  auto r = yeto::test::train(tmp / "pipeline.toml", tmp / "a");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::train(tmp / "release.toml", tmp / "b");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("release layout"), std::string::npos) << r.all();
  EXPECT_EQ(yeto::test::read_text(tmp / "a" / "lora.safetensors"), yeto::test::read_text(tmp / "b" / "lora.safetensors"));

  // An unknown tensor under backbone. is refused by name (strict).
  auto extra = with_prefix(tiny_weights(repo));
  extra.emplace_back("backbone.double_blocks.0.norm1_audio.weight", torch::ones({20}));
  yeto::io::save_safetensors(release / "NAVA.safetensors", extra);
  r = yeto::test::train(tmp / "release.toml", tmp / "c");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("norm1_audio"), std::string::npos) << r.all();
  // A config option this implementation does not serve, named with the file.
  auto config = nlohmann::json::parse(yeto::test::read_text(release / "config.json"));
  config["no_split_norm_ffn"] = false;
  std::ofstream(release / "config.json") << config.dump(2);
  yeto::io::save_safetensors(release / "NAVA.safetensors", with_prefix(tiny_weights(repo)));
  r = yeto::test::train(tmp / "release.toml", tmp / "d");
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("config.json: WanAVModel config: 'no_split_norm_ffn'"), std::string::npos) << r.all();
}

// The release as NAVA ships it, stored in bf16: trained in float32 (the tensors converted on load)
// and with model.storage = "fp8" (the frozen Linears kept as e4m3 codes with a scale per row, the
// nn fp8 path every family's denoiser has): both run, the fp8 one from within the codes' rounding
// of the same validation loss.
TEST(NavaRelease, TheBf16ReleaseTrainsInFloat32AndWithFp8Storage) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  write_rows(tmp / "data");
  const auto release = tmp / "release";
  write_release_config(repo, release);
  std::vector<std::pair<std::string, at::Tensor>> bf16;
  for (auto& [n, t] : with_prefix(tiny_weights(repo))) bf16.emplace_back(n, t.to(torch::kBFloat16));
  yeto::io::save_safetensors(release / "NAVA.safetensors", bf16);
  tmp.write("fp32.toml", toml(release));
  auto text = yeto::test::read_text(tmp / "fp32.toml");
  text.replace(text.find("precision = \"fp32\"\n"), std::string("precision = \"fp32\"\n").size(),
               "precision = \"fp32\"\nstorage = \"fp8\"\n");
  tmp.write("fp8.toml", text);
  auto r = yeto::test::train(tmp / "fp32.toml", tmp / "fp32");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  r = yeto::test::train(tmp / "fp8.toml", tmp / "fp8");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const double a = first_val_loss(tmp / "fp8"), b = first_val_loss(tmp / "fp32");
  std::printf("  bf16 release: val_loss %.5f with fp8 storage, %.5f in float32\n", a, b);
  EXPECT_NE(a, b);
  EXPECT_LT(std::abs(a - b), 0.05 * b);
}

// The alias: `nava` (and the hub id ernie-research/NAVA) opens the release from the hub cache
// without --diffusion-adapter and samples the same latents as the pipeline layout.
TEST(NavaRelease, TheAliasAndTheHubIdOpenTheReleaseFromTheHubCache) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  const auto hub_root = tmp / "hub/models--ernie-research--NAVA";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(hub_root / "refs");
  std::ofstream(hub_root / "refs/main") << commit;
  const auto snapshot = hub_root / "snapshots" / commit;
  write_release_config(repo, snapshot);
  yeto::io::save_safetensors(snapshot / "NAVA.safetensors", with_prefix(tiny_weights(repo)));
  torch::manual_seed(21);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", torch::randn({5, 20})}});
  auto sample = [&](const std::string& model, const std::string& out, bool adapter) {
    std::vector<std::string> args = {"sample", "--model", model, "--prompt", (tmp / "prompt.safetensors").string(),
                                     "--seed", "2", "--steps", "2", "--height", "64", "--width", "64",
                                     "--num-frames", "5", "--output", (tmp / out).string(),
                                     "--set", "model.hub_cache=" + (tmp / "hub").string()};
    if (adapter) args.insert(args.end(), {"--diffusion-adapter", "nava"});
    const auto r = yeto::test::run_host(args);
    EXPECT_EQ(r.exit_code, 0) << r.all();
    return yeto::test::read_text(tmp / out);
  };
  const auto base = sample(repo.string(), "pipeline.safetensors", true);
  EXPECT_EQ(sample("nava", "alias.safetensors", false), base);
  EXPECT_EQ(sample("ernie-research/NAVA", "id.safetensors", false), base);
}

namespace {

// A safetensors file written tensor by tensor, float8_e4m3fn codes (uint8 tensors) included.
struct Checkpoint {
  std::vector<at::Tensor> keep;
  std::vector<yeto::io::SafetensorsEntry> entries;
  void add(const std::string& name, at::Tensor t, std::optional<yeto::io::DType> dtype = std::nullopt) {
    t = t.contiguous();
    keep.push_back(t);
    entries.push_back({name, dtype ? *dtype : yeto::io::dtype_for(t.scalar_type(), name), t.sizes().vec(),
                       {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes())}});
  }
  void write(const fs::path& path) const { yeto::io::write_safetensors(path, entries); }
};

// NAVA_fp8's FP8Linear: the Linears of (self_attn | cross_attn | ffn) inside *_blocks.<i>.
bool fp8_linear_weight(const std::string& name, const at::Tensor& t) {
  const bool in_block = name.rfind("double_blocks.", 0) == 0 || name.rfind("single_blocks.", 0) == 0;
  const bool linear = name.find(".self_attn.") != std::string::npos || name.find(".cross_attn.") != std::string::npos ||
                      name.find(".ffn.") != std::string::npos;
  return in_block && linear && t.dim() == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

at::Tensor decode(const at::Tensor& codes) { return yeto::nn::e4m3_table().index_select(0, codes.flatten().to(at::kLong)).view(codes.sizes()); }

at::Tensor encode(const at::Tensor& w) {
  const auto x = w.to(at::kFloat).contiguous();
  auto codes = at::empty(x.sizes(), at::kByte);
  const float* src = x.data_ptr<float>();
  auto* dst = codes.data_ptr<std::uint8_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) dst[i] = yeto::nn::encode_e4m3(src[i]);
  return codes;
}

// One scale for the whole tensor, rounded to bf16 as NAVA stores it, and its codes.
std::pair<at::Tensor, at::Tensor> quantize_per_tensor(const at::Tensor& w) {
  const auto scale = (w.abs().max() / 448.0).to(at::kBFloat16);
  return {encode(w / scale.to(at::kFloat)), scale};
}

}  // namespace

// NAVA_fp8.safetensors as the release lays it out (block Linears as e4m3 codes + weight_scale,
// the rest 16/32-bit, keys under backbone.) is read as it is: with model.storage = "fp8" the codes
// are kept (per-row scales: the very codes our own fp8 path makes from the float weights, so the
// samples and a training run are bit-identical), with auto they are dequantised code x scale (the
// same bytes as the float model holding those products); a tensor that is not a Linear weight
// (patch_embedding, a convolution) is dequantised with its scale. Bad layouts are refused by name.
TEST(NavaRelease, TheFp8ReleaseLoadsItsCodesExactly) {
  yeto::test::TempDir tmp;
  const auto repo = tmp / "tiny";
  const auto r0 = yeto::test::run_host({"init-model", "--family", "nava", "--preset", "tiny", "--seed", "3", "--out", repo.string()});
  ASSERT_EQ(r0.exit_code, 0) << r0.all();
  const auto weights = tiny_weights(repo);
  torch::manual_seed(21);
  yeto::io::save_safetensors(tmp / "prompt.safetensors", {{"prompt_embeds", torch::randn({5, 20})}});
  // A release directory holding `file`; returns it.
  auto release = [&](const std::string& name, const std::string& file) {
    const auto dir = tmp / name;
    write_release_config(repo, dir);
    return dir / file;
  };
  auto sample = [&](const fs::path& file, const std::string& storage, const std::string& out) {
    const auto r = yeto::test::run_host({"sample", "--model", file.parent_path().string(), "--diffusion-adapter", "nava",
                                         "--prompt", (tmp / "prompt.safetensors").string(), "--seed", "2", "--steps",
                                         "2", "--height", "64", "--width", "64", "--num-frames", "5", "--output",
                                         (tmp / out).string(), "--set", "model.storage=" + storage});
    EXPECT_EQ(r.exit_code, 0) << r.all();
    return r.exit_code == 0 ? yeto::test::read_text(tmp / out) : std::string();
  };

  // Per-row float32 scales [out, 1], made by the encoder the fp8 storage uses.
  Checkpoint per_row, per_row_ref;
  int fp8_tensors = 0;
  for (const auto& [n, t] : weights) {
    if (!fp8_linear_weight(n, t)) {
      per_row.add("backbone." + n, t);
      per_row_ref.add("backbone." + n, t);
      continue;
    }
    auto [codes, scale] = yeto::nn::quantize_e4m3_rows(t);
    per_row.add("backbone." + n, codes, yeto::io::DType::F8_E4M3);
    per_row.add("backbone." + n + "_scale", scale.unsqueeze(1));
    per_row_ref.add("backbone." + n, decode(codes) * scale.unsqueeze(1));
    ++fp8_tensors;
  }
  ASSERT_GT(fp8_tensors, 20);
  const auto row_fp8 = release("row", "NAVA_fp8.safetensors");
  per_row.write(row_fp8);
  const auto row_ref = release("row_ref", "NAVA.safetensors");
  per_row_ref.write(row_ref);
  const auto plain = release("plain", "NAVA.safetensors");
  yeto::io::save_safetensors(plain, with_prefix(weights));

  const auto own = sample(plain, "fp8", "own.safetensors");  // our fp8 path quantising the float weights
  ASSERT_FALSE(own.empty());
  EXPECT_EQ(sample(row_fp8, "fp8", "row_fp8.safetensors"), own);
  EXPECT_EQ(sample(row_fp8, "auto", "row_auto.safetensors"), sample(row_ref, "auto", "row_ref.safetensors"));

  // A file without any scale: its e4m3 tensors are their codes' values (scale 1).
  Checkpoint unscaled, unscaled_ref;
  for (const auto& [n, t] : weights) {
    if (!fp8_linear_weight(n, t)) {
      unscaled.add("backbone." + n, t);
      unscaled_ref.add("backbone." + n, t);
      continue;
    }
    const auto codes = encode(t);
    unscaled.add("backbone." + n, codes, yeto::io::DType::F8_E4M3);
    unscaled_ref.add("backbone." + n, decode(codes));
  }
  const auto unscaled_fp8 = release("unscaled", "NAVA_fp8.safetensors");
  unscaled.write(unscaled_fp8);
  const auto unscaled_ref_file = release("unscaled_ref", "NAVA.safetensors");
  unscaled_ref.write(unscaled_ref_file);
  const auto unscaled_sample = sample(unscaled_fp8, "auto", "unscaled.safetensors");
  ASSERT_FALSE(unscaled_sample.empty());
  EXPECT_EQ(unscaled_sample, sample(unscaled_ref_file, "auto", "unscaled_ref.safetensors"));

  // Per-tensor bf16 scales (NAVA's FP8Linear dtype; shapes [] and [1]), and patch_embedding (a
  // convolution) stored in fp8 as well.
  // The same codes in ComfyUI's fp8_scaled naming as well: `scale_weight` (an F32 scalar),
  // `scale_input` (ignored) and the `scaled_fp8` marker.
  Checkpoint per_tensor, per_tensor_ref, per_tensor_rows, comfy;
  comfy.add("scaled_fp8", torch::empty({0}, torch::kByte), yeto::io::DType::F8_E4M3);
  int k = 0;
  for (const auto& [n, t] : weights) {
    if (!fp8_linear_weight(n, t) && n != "patch_embedding.weight") {
      per_tensor.add("backbone." + n, t);
      per_tensor_ref.add("backbone." + n, t);
      per_tensor_rows.add("backbone." + n, t);
      comfy.add("backbone." + n, t);
      continue;
    }
    auto [codes, scale] = quantize_per_tensor(t);
    per_tensor.add("backbone." + n, codes, yeto::io::DType::F8_E4M3);
    per_tensor.add("backbone." + n + "_scale", (k++ % 2) ? scale.reshape({1}) : scale);
    per_tensor_ref.add("backbone." + n, decode(codes) * scale.to(at::kFloat));
    per_tensor_rows.add("backbone." + n, codes, yeto::io::DType::F8_E4M3);
    per_tensor_rows.add("backbone." + n + "_scale", scale.to(at::kFloat).expand({t.size(0)}));
    const auto module = "backbone." + n.substr(0, n.size() - 6);
    comfy.add(module + "weight", codes, yeto::io::DType::F8_E4M3);
    comfy.add(module + "scale_weight", scale.to(at::kFloat).reshape({}));
    comfy.add(module + "scale_input", torch::tensor(1.0f));
  }
  const auto tensor_fp8 = release("tensor", "NAVA_fp8.safetensors");
  per_tensor.write(tensor_fp8);
  const auto tensor_ref = release("tensor_ref", "NAVA.safetensors");
  per_tensor_ref.write(tensor_ref);
  const auto ref = sample(tensor_ref, "auto", "tensor_ref.safetensors");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(sample(tensor_fp8, "auto", "tensor_auto.safetensors"), ref);
  const auto comfy_file = release("comfy", "NAVA_fp8.safetensors");
  comfy.write(comfy_file);
  EXPECT_EQ(sample(comfy_file, "auto", "comfy_auto.safetensors"), ref);
  // Under fp8 storage a per-tensor scale is the same codes with that scale on every row.
  const auto tensor_rows = release("tensor_rows", "NAVA_fp8.safetensors");
  per_tensor_rows.write(tensor_rows);
  const auto rows_fp8 = sample(tensor_rows, "fp8", "tensor_rows_fp8.safetensors");
  ASSERT_FALSE(rows_fp8.empty());
  EXPECT_EQ(sample(tensor_fp8, "fp8", "tensor_fp8.safetensors"), rows_fp8);

  // Training from the codes: the same adapter bytes as our fp8 path on the float weights.
  write_rows(tmp / "data");
  const auto train_fp8 = [&](const fs::path& file, const std::string& run) {
    auto text = toml(file.parent_path());
    text.replace(text.find("precision = \"fp32\"\n"), std::string("precision = \"fp32\"\n").size(),
                 "precision = \"fp32\"\nstorage = \"fp8\"\n");
    tmp.write(run + ".toml", text);
    const auto r = yeto::test::train(tmp / (run + ".toml"), tmp / run);
    EXPECT_EQ(r.exit_code, 0) << r.all();
    return yeto::test::read_text(tmp / run / "lora.safetensors");
  };
  EXPECT_EQ(train_fp8(row_fp8, "train_row"), train_fp8(plain, "train_plain"));

  // Refused by name: a scale per column, an fp8 weight without its scale.
  const std::string q = "backbone.double_blocks.0.self_attn.q.weight";
  Checkpoint bad;
  for (auto e : per_row.entries) {
    if (e.name == q + "_scale") e.shape = {e.shape[0] / 2, 2};
    bad.entries.push_back(e);
  }
  bad.keep = per_row.keep;
  bad.write(row_fp8);
  auto r = yeto::test::run_host({"sample", "--model", row_fp8.parent_path().string(), "--diffusion-adapter", "nava",
                                 "--prompt", (tmp / "prompt.safetensors").string(), "--steps", "1", "--height", "64",
                                 "--width", "64", "--num-frames", "5", "--output", (tmp / "bad.safetensors").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  const std::string local = q.substr(std::string("backbone.").size());  // named with "keys under 'backbone.'"
  EXPECT_NE(r.all().find("scale tensor '" + local + "_scale' has shape [10, 2]"), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("keys under 'backbone.'"), std::string::npos) << r.all();
  Checkpoint missing;
  for (const auto& e : per_row.entries)
    if (e.name != q + "_scale") missing.entries.push_back(e);
  missing.keep = per_row.keep;
  missing.write(row_fp8);
  r = yeto::test::run_host({"sample", "--model", row_fp8.parent_path().string(), "--diffusion-adapter", "nava",
                            "--prompt", (tmp / "prompt.safetensors").string(), "--steps", "1", "--height", "64",
                            "--width", "64", "--num-frames", "5", "--output", (tmp / "bad.safetensors").string()});
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("the float8_e4m3fn tensor '" + local + "' has no scale"), std::string::npos) << r.all();
}
