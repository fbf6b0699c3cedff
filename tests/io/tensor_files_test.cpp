#include <gtest/gtest.h>

#include <fstream>

#include <torch/torch.h>

#include "core/error.hpp"
#include "io/npy.hpp"
#include "io/tensor_files.hpp"
#include "io_fixtures.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;

namespace {

fs::path fx(const std::string& name) { return yeto::test::io_fixtures() / "io" / name; }

std::map<std::string, at::Tensor> as_map(const std::vector<std::pair<std::string, at::Tensor>>& v) {
  return {v.begin(), v.end()};
}

std::string load_error(const std::string& name) {
  try {
    load_pt(fx(name));
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PtReader, BareTensor) {
  const auto v = load_pt(fx("tensor.pt"));
  ASSERT_TRUE(v.isTensor());
  EXPECT_TRUE(torch::equal(v.toTensor(), torch::arange(6, torch::kFloat).reshape({2, 3})));
  const auto flat = load_pt_tensors(fx("tensor.pt"));
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].first, "");
}

TEST(PtReader, StateDictOrderedDictWithMetadata) {
  const auto v = load_pt(fx("state_dict.pt"));
  ASSERT_TRUE(v.isGenericDict());
  const auto d = v.toGenericDict();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.begin()->key().toStringRef(), "weight");  // insertion order kept
  const auto m = as_map(flatten_tensors(v));
  EXPECT_TRUE(torch::allclose(m.at("weight"), torch::arange(6, torch::kFloat).reshape({2, 3}) / 10));
  EXPECT_TRUE(torch::equal(m.at("bias"), torch::tensor({0.5f, -0.5f})));
}

TEST(PtReader, OneEntryContainers) {
  const auto d = as_map(load_pt_tensors(fx("dict_one.pt")));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(torch::equal(d.at("only"), torch::tensor({1.0f, 2.0f})));
  const auto l = load_pt(fx("list_one.pt"));
  ASSERT_TRUE(l.isList());
  ASSERT_EQ(l.toList().size(), 1u);
  EXPECT_TRUE(torch::equal(l.toList().get(0).toTensor(), torch::tensor({3, 4}, torch::kLong)));
  const auto o = as_map(load_pt_tensors(fx("ordered_one.pt")));
  EXPECT_TRUE(torch::equal(o.at("w"), torch::tensor({7.0f})));
}

TEST(PtReader, TuplesListsAndPrimitives) {
  const auto t = load_pt(fx("tuple.pt"));
  ASSERT_TRUE(t.isTuple());
  EXPECT_EQ(t.toTupleRef().elements()[1].toTensor().scalar_type(), torch::kInt);
  const auto l = as_map(load_pt_tensors(fx("list.pt")));
  EXPECT_EQ(l.size(), 3u);
  EXPECT_FLOAT_EQ(l.at("2")[0].item<float>(), 3.0f);
  const auto n = load_pt(fx("nested.pt")).toGenericDict();
  EXPECT_EQ(n.at("step").toInt(), 5);
  EXPECT_DOUBLE_EQ(n.at("lr").toDouble(), 0.25);
  EXPECT_EQ(n.at("name").toStringRef(), "run");
  EXPECT_TRUE(n.at("flag").toBool());
  EXPECT_TRUE(n.at("none").isNone());
  EXPECT_EQ(n.at("big").toInt(), 1LL << 40);
  EXPECT_EQ(n.at("neg").toInt(), -7);
  EXPECT_EQ(n.at("shape").toTupleRef().elements()[1].toInt(), 3);
  const auto flat = as_map(load_pt_tensors(fx("nested.pt")));
  EXPECT_EQ(flat.size(), 2u);
  EXPECT_TRUE(flat.count("model.layer.weight"));
}

TEST(PtReader, EveryDtypeAndViewsOfOneStorage) {
  const auto d = as_map(load_pt_tensors(fx("dtypes.pt")));
  EXPECT_EQ(d.at("f64").scalar_type(), torch::kDouble);
  EXPECT_EQ(d.at("f16").scalar_type(), torch::kHalf);
  EXPECT_EQ(d.at("bf16").scalar_type(), torch::kBFloat16);
  EXPECT_FLOAT_EQ(d.at("bf16")[1].item<float>(), -1.0f);
  EXPECT_EQ(d.at("i64")[0].item<std::int64_t>(), -3);
  EXPECT_EQ(d.at("u8")[0].item<int>(), 255);
  EXPECT_TRUE(d.at("bool")[0].item<bool>());
  EXPECT_EQ(d.at("scalar").dim(), 0);
  EXPECT_FLOAT_EQ(d.at("scalar").item<float>(), 4.25f);
  EXPECT_EQ(d.at("empty").sizes(), (std::vector<std::int64_t>{0, 3}));
  const auto v = as_map(load_pt_tensors(fx("views.pt")));
  const auto base = torch::arange(10, torch::kFloat);
  EXPECT_TRUE(torch::equal(v.at("slice"), base.slice(0, 2, 5)));
  EXPECT_TRUE(torch::equal(v.at("transposed"), base.view({2, 5}).t()));
  EXPECT_EQ(v.at("slice").data_ptr<float>() - 2, v.at("matrix").data_ptr<float>());  // shared storage
}

TEST(PtReader, ParameterKeepsRequiresGrad) {
  const auto t = load_pt(fx("parameter.pt")).toTensor();
  EXPECT_TRUE(t.requires_grad());
  EXPECT_FLOAT_EQ(t[1].item<float>(), 2.0f);
}

TEST(PtReader, RefusesCodeAndLegacyArchives) {
  const std::string evil = load_error("evil.pt");
  EXPECT_NE(evil.find("posix.system"), std::string::npos) << evil;
  EXPECT_NE(evil.find("weights-only"), std::string::npos) << evil;
  const std::string legacy = load_error("legacy.pt");
  EXPECT_NE(legacy.find("legacy"), std::string::npos) << legacy;
  EXPECT_THROW(load_pt(fx("f32.npy")), yeto::Error);
  try {
    load_pt(fx("missing.pt"));
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::not_found);
  }
}

TEST(NpyReader, DtypesOrdersAndVersions) {
  EXPECT_TRUE(torch::equal(load_npy(fx("f32.npy")), torch::arange(6, torch::kFloat).reshape({2, 3})));
  const auto f = load_npy(fx("f64_fortran.npy"));
  EXPECT_EQ(f.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(f, torch::arange(6, torch::kDouble).reshape({2, 3})));
  EXPECT_TRUE(torch::equal(load_npy(fx("i64.npy")), torch::tensor({-1, 2, 3}, torch::kLong)));
  EXPECT_EQ(load_npy(fx("bool.npy")).scalar_type(), torch::kBool);
  EXPECT_EQ(load_npy(fx("u8.npy"))[1][1].item<int>(), 255);
  EXPECT_EQ(load_npy(fx("f16.npy")).scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(load_npy(fx("f32_big_endian.npy")), torch::tensor({1.0f, -2.5f})));
  const auto s = load_npy(fx("scalar.npy"));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_FLOAT_EQ(s.item<float>(), 3.5f);
  EXPECT_TRUE(torch::equal(load_npy(fx("v2.npy")), torch::tensor({1, 2}, torch::kInt)));
}

TEST(NpyReader, RefusesObjectArraysAndTruncation) {
  try {
    load_npy(fx("object.npy"));
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    EXPECT_NE(std::string(e.what()).find("object"), std::string::npos) << e.what();
  }
  const std::string good = [] {
    std::ifstream in(fx("f32.npy"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(parse_npy(std::string_view(good).substr(0, n), "cut.npy"), yeto::Error) << n;
}

TEST(TensorFiles, DispatchesOnExtension) {
  EXPECT_EQ(load_tensor_file(fx("state_dict.pt")).size(), 2u);
  EXPECT_EQ(load_tensor_file(fx("f32.npy")).size(), 1u);
  EXPECT_GT(load_tensor_file(yeto::test::io_fixtures() / "parity/flux-transformer/inputs.safetensors").size(), 0u);
  EXPECT_THROW(load_tensor_file(fx("make_fixtures.py")), yeto::Error);
}
