#include <gtest/gtest.h>

#include <fstream>

#include <torch/torch.h>

#include "core/error.hpp"
#include "io/module_component.hpp"
#include "io/tensors.hpp"
#include "io/weights.hpp"
#include "io_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;
using yeto::test::TempDir;

TEST(Tensors, SaveLoadRoundTripsEveryDtype) {
  TempDir t;
  std::vector<std::pair<std::string, at::Tensor>> in = {
      {"f64", torch::randn({2, 3}, torch::kDouble)},
      {"f32", torch::randn({4})},
      {"f16", torch::randn({3, 1}).to(torch::kHalf)},
      {"bf16", torch::randn({5}).to(torch::kBFloat16)},
      {"i64", torch::arange(6, torch::kLong).reshape({2, 3})},
      {"i32", torch::arange(3, torch::kInt)},
      {"i16", torch::arange(3, torch::kShort)},
      {"i8", torch::arange(-2, 2, torch::kChar)},
      {"u8", torch::arange(250, 256, torch::kLong).to(torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5)},
      {"strided", torch::randn({4, 4}).t()},
  };
  save_safetensors(t / "a.safetensors", in, {{"format", "pt"}});
  const auto out = load_safetensors(t / "a.safetensors");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, tensor] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_EQ(out.at(name).scalar_type(), tensor.scalar_type()) << name;
    EXPECT_EQ(out.at(name).sizes(), tensor.sizes()) << name;
    EXPECT_TRUE(torch::equal(out.at(name), tensor)) << name;
  }
  EXPECT_EQ(SafetensorsFile::open(t / "a.safetensors").find("bf16")->dtype, DType::BF16);
}

TEST(Tensors, Float8DecodesToFloat32) {
  TempDir t;
  // e4m3: 0x38 = 1.0, 0xc0 = -2.0, 0x01 = 2^-9 (subnormal), 0x7e = 448 (max); e5m2: 0x3c = 1.0, 0x7c = inf.
  const std::vector<std::byte> e4 = {std::byte{0x38}, std::byte{0xc0}, std::byte{0x01}, std::byte{0x7e}};
  const std::vector<std::byte> e5 = {std::byte{0x3c}, std::byte{0x7c}};
  write_safetensors(t / "f8.safetensors", {{"a", DType::F8_E4M3, {4}, e4}, {"b", DType::F8_E5M2, {2}, e5}});
  const auto m = load_safetensors(t / "f8.safetensors");
  const auto a = m.at("a");
  ASSERT_EQ(a.scalar_type(), torch::kFloat);
  EXPECT_FLOAT_EQ(a[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(a[1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(a[2].item<float>(), std::ldexp(1.0f, -9));
  EXPECT_FLOAT_EQ(a[3].item<float>(), 448.0f);
  EXPECT_FLOAT_EQ(m.at("b")[0].item<float>(), 1.0f);
  EXPECT_TRUE(std::isinf(m.at("b")[1].item<float>()));
}

// A scaled fp8 weight's codes view the mapping as they are; its scale becomes float32 per row.
TEST(Tensors, Float8CodesViewTheFileAndScalesExpandPerRow) {
  TempDir t;
  const std::vector<std::byte> codes = {std::byte{0x38}, std::byte{0xc0}, std::byte{0x01}, std::byte{0x7e},
                                        std::byte{0x00}, std::byte{0x80}};
  const at::Tensor one = torch::tensor({0.5f}).to(torch::kBFloat16);
  const at::Tensor rows = torch::tensor({0.25f, 2.0f, 3.0f}).to(torch::kBFloat16).reshape({3, 1});
  write_safetensors(t / "f8.safetensors",
                    {{"w", DType::F8_E4M3, {3, 2}, codes},
                     {"s1", DType::BF16, {}, {static_cast<const std::byte*>(one.data_ptr()), 2}},
                     {"s3", DType::BF16, {3, 1}, {static_cast<const std::byte*>(rows.data_ptr()), 6}},
                     {"f", DType::F32, {1}, {codes.data(), 4}}});
  const auto f = SafetensorsFile::open(t / "f8.safetensors");
  const at::Tensor c = fp8_codes(f, *f.find("w"));
  EXPECT_EQ(c.scalar_type(), torch::kByte);
  EXPECT_EQ(c.sizes(), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(c.data_ptr(), static_cast<const void*>(f.data(*f.find("w"))));
  EXPECT_EQ(c[0][1].item<int>(), 0xc0);
  EXPECT_THROW(fp8_codes(f, *f.find("f")), yeto::Error);
  EXPECT_TRUE(torch::equal(fp8_row_scales(f, f.find("s1"), 3), torch::full({3}, 0.5f)));
  EXPECT_TRUE(torch::equal(fp8_row_scales(f, f.find("s3"), 3), torch::tensor({0.25f, 2.0f, 3.0f})));
  EXPECT_TRUE(torch::equal(fp8_row_scales(f, nullptr, 2), torch::ones({2})));
  EXPECT_THROW(fp8_row_scales(f, f.find("s3"), 2), yeto::Error);
}

namespace {

struct Tiny : torch::nn::Module {
  Tiny() {
    proj = register_module("proj", torch::nn::Linear(3, 2));
    register_buffer("scale", torch::ones({2}));
  }
  torch::nn::Linear proj{nullptr};
};

}  // namespace

TEST(Weights, LoadsByNameConvertingDtype) {
  TempDir t;
  const auto w = torch::arange(6, torch::kFloat).reshape({2, 3}).to(torch::kBFloat16);
  save_safetensors(t / "c/diffusion_pytorch_model.safetensors",
                   {{"proj.weight", w}, {"proj.bias", torch::tensor({1.0, 2.0}, torch::kDouble)}, {"scale", torch::full({2}, 3.0)}});
  Tiny m;
  auto src = WeightSource::open(t / "c");
  const auto r = load_weights(m, src);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.loaded.size(), 3u);
  EXPECT_TRUE(torch::equal(m.proj->weight, w.to(torch::kFloat)));
  EXPECT_EQ(m.proj->weight.scalar_type(), torch::kFloat);
  EXPECT_FLOAT_EQ(m.proj->bias[1].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(m.named_buffers()["scale"][0].item<float>(), 3.0f);
}

TEST(Weights, StrictReportsEveryProblemByNameAndLoadsNothing) {
  TempDir t;
  save_safetensors(t / "c/model.safetensors",
                   {{"proj.weight", torch::ones({2, 4})}, {"extra.weight", torch::ones({1})}, {"scale", torch::full({2}, 7.0)}});
  Tiny m;
  auto src = WeightSource::open(t / "c");
  try {
    load_weights(m, src);
    FAIL();
  } catch (const yeto::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    EXPECT_NE(msg.find("proj.bias"), std::string::npos) << msg;     // missing
    EXPECT_NE(msg.find("extra.weight"), std::string::npos) << msg;  // unexpected
    EXPECT_NE(msg.find("proj.weight (module [2, 3], checkpoint [2, 4])"), std::string::npos) << msg;
  }
  EXPECT_FLOAT_EQ(m.named_buffers()["scale"][0].item<float>(), 1.0f);  // untouched
  const auto r = load_weights(m, src, false);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.missing, std::vector<std::string>{"proj.bias"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"extra.weight"});
  ASSERT_EQ(r.mismatched.size(), 1u);
  EXPECT_EQ(r.loaded, std::vector<std::string>{"scale"});
  EXPECT_FLOAT_EQ(m.named_buffers()["scale"][0].item<float>(), 7.0f);
}

TEST(Weights, PrefixAndAllowMissing) {
  TempDir t;
  save_safetensors(t / "lora.safetensors", {{"transformer.proj.weight", torch::ones({2, 3})},
                                            {"transformer.proj.bias", torch::ones({2})}});
  Tiny m;
  auto src = WeightSource::open(t / "lora.safetensors");
  LoadOptions o;
  o.prefix = "transformer.";
  o.allow_missing = {"sca*"};
  const auto r = load_weights(m, src, o);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.loaded.size(), 2u);
}

TEST(Weights, ShardedSourceFromTheFluxTinyRepository) {
  const fs::path dir = yeto::test::io_fixtures() / "repos/flux-tiny/transformer";
  auto src = WeightSource::open(dir);
  EXPECT_EQ(src.files().size(), 2u);
  EXPECT_EQ(src.index_file().filename(), "diffusion_pytorch_model.safetensors.index.json");
  EXPECT_NO_THROW(src.validate());
  ASSERT_FALSE(src.names().empty());
  const auto t = load_tensor(src, src.names().back());
  EXPECT_GT(t.numel(), 0);
  EXPECT_THROW(WeightSource::open(dir, "fp16"), yeto::Error);
}

TEST(Weights, VariantFilesAreChosenBySuffix) {
  TempDir t;
  save_safetensors(t / "vae/diffusion_pytorch_model.safetensors", {{"a", torch::ones({1})}});
  save_safetensors(t / "vae/diffusion_pytorch_model.fp16.safetensors", {{"a", torch::ones({1}, torch::kHalf)}});
  EXPECT_EQ(load_tensor(WeightSource::open(t / "vae"), "a").scalar_type(), torch::kFloat);
  EXPECT_EQ(load_tensor(WeightSource::open(t / "vae", "fp16"), "a").scalar_type(), torch::kHalf);
  try {
    WeightSource::open(t / "vae", "bf16");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::not_found);
    EXPECT_NE(std::string(e.what()).find("diffusion_pytorch_model.bf16.safetensors"), std::string::npos) << e.what();
  }
}

TEST(Weights, IndexIsUntrusted) {
  TempDir t;
  save_safetensors(t / "m/model-1.safetensors", {{"a", torch::ones({1})}});
  t.write("m/model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
  EXPECT_THROW(WeightSource::open(t / "m"), yeto::Error);
  t.write("m/model.safetensors.index.json", R"({"weight_map": {"a": "model-1.safetensors", "b": "model-1.safetensors"}})");
  auto src = WeightSource::open(t / "m");
  EXPECT_THROW(src.validate(), yeto::Error);
  EXPECT_THROW(src.locate("b"), yeto::Error);
  EXPECT_NO_THROW(src.locate("a"));
}

namespace {

std::uint64_t vm_rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

bool inside(const at::Tensor& t, const SafetensorsFile& f) {
  const auto* p = static_cast<const std::byte*>(t.data_ptr());
  const auto* base = f.data(f.tensors().front());
  return p >= base && p < base + f.data_size();
}

}  // namespace

TEST(Tensors, MappedTensorViewsTheFileAndWritesStayPrivate) {
  TempDir t;
  const auto w = torch::randn({4, 8}).to(torch::kBFloat16);
  save_safetensors(t / "w.safetensors", {{"w", w}, {"f8", torch::zeros({2})}});
  {
    const auto f = SafetensorsFile::open(t / "w.safetensors");
    bool mapped = false;
    at::Tensor v = tensor_as(f, *f.find("w"), torch::kBFloat16, torch::kCPU, &mapped);
    EXPECT_TRUE(mapped);
    EXPECT_TRUE(inside(v, f));
    EXPECT_TRUE(torch::equal(v, w));
    // Another dtype: one converted copy, not a view.
    at::Tensor c = tensor_as(f, *f.find("w"), torch::kFloat, torch::kCPU, &mapped);
    EXPECT_FALSE(mapped);
    EXPECT_FALSE(inside(c, f));
    EXPECT_TRUE(torch::equal(c, w.to(torch::kFloat)));
    // Writing through the view copies the page; the file keeps its bytes.
    v.fill_(7.0);
    EXPECT_EQ(v[0][0].item<float>(), 7.0f);
  }
  EXPECT_TRUE(torch::equal(load_safetensors(t / "w.safetensors").at("w"), w));
  // The view keeps the mapping alive after the file object is gone.
  at::Tensor kept;
  {
    const auto f = SafetensorsFile::open(t / "w.safetensors");
    kept = mapped_tensor(f, *f.find("w"));
  }
  EXPECT_TRUE(torch::equal(kept, w));
}

TEST(Weights, MatchingDtypeLoadsWithoutACopy) {
  TempDir t;
  const auto w = torch::randn({2, 3}).to(torch::kBFloat16);
  save_safetensors(t / "c/diffusion_pytorch_model.safetensors",
                   {{"proj.weight", w}, {"proj.bias", torch::ones({2}).to(torch::kBFloat16)}, {"scale", torch::full({2}, 3.0)}});
  Tiny m;
  m.to(torch::kBFloat16);
  auto src = WeightSource::open(t / "c");
  EXPECT_TRUE(load_weights(m, src).ok());
  const auto l = src.locate("proj.weight");
  EXPECT_TRUE(inside(m.proj->weight, l.file));  // the parameter is the file's bytes
  EXPECT_TRUE(torch::equal(m.proj->weight, w));
  EXPECT_EQ(m.named_buffers()["scale"].scalar_type(), torch::kBFloat16);
  EXPECT_FLOAT_EQ(m.named_buffers()["scale"][1].item<float>(), 3.0f);
}

TEST(DeferredInit, SkipsInitialisingFillsOnlyInsideTheScope) {
  torch::manual_seed(3);
  const auto expected = torch::empty({64}).uniform_(-1, 1);
  {
    DeferredInit scope;
    auto a = torch::empty({64}).uniform_(-1, 1);
    auto b = torch::empty({8}).normal_();
    EXPECT_TRUE(DeferredInit::uninitialized(a));
    EXPECT_TRUE(DeferredInit::uninitialized(b));
    // A conversion of a placeholder is a placeholder; computed tensors are real.
    EXPECT_TRUE(DeferredInit::uninitialized(a.to(torch::kBFloat16)));
    const auto r = torch::arange(4, torch::kFloat);
    EXPECT_FALSE(DeferredInit::uninitialized(r));
    EXPECT_TRUE(torch::equal(r.to(torch::kBFloat16).to(torch::kFloat), r));
    EXPECT_THROW(DeferredInit::check_initialized({{"a", a}, {"r", r}}, "test"), yeto::Error);
    a.set_data(torch::zeros({64}));
    EXPECT_NO_THROW(DeferredInit::check_initialized({{"a", a}, {"r", r}}, "test"));
    // Loading by copying into a placeholder makes it real as well.
    EXPECT_TRUE(DeferredInit::uninitialized(b));
    b.copy_(torch::ones({8}));
    EXPECT_FALSE(DeferredInit::uninitialized(b));
  }
  // Outside: the same seed draws the same values as if no scope had ever existed.
  torch::manual_seed(3);
  EXPECT_TRUE(torch::equal(torch::empty({64}).uniform_(-1, 1), expected));
}

TEST(DeferredInit, BuildsLargeModulesWithoutResidentMemory) {
  // 2 x 256 MB of float32 parameters (Linear and Embedding initialise with uniform_ / normal_),
  // then converted to bf16 as a run's placement does: untouched, so nearly no resident pages.
  const auto before = vm_rss_kb();
  DeferredInit scope;
  torch::nn::Linear lin(8192, 8192);
  torch::nn::Embedding emb(8192, 8192);
  lin->to(torch::kBFloat16);
  const auto grown_mb = (vm_rss_kb() - before) / 1024;
  EXPECT_LT(grown_mb, 64u);
  EXPECT_TRUE(DeferredInit::uninitialized(lin->weight));
  EXPECT_TRUE(DeferredInit::uninitialized(emb->weight));
  EXPECT_EQ(lin->weight.scalar_type(), torch::kBFloat16);
}
