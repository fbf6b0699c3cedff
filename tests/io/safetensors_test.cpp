#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "io_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;
using yeto::test::TempDir;

namespace {

std::vector<std::byte> bytes_of(std::initializer_list<float> v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

std::string with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

yeto::ExitCode code_of(const std::string& file_bytes) {
  try {
    SafetensorsFile::from_bytes(file_bytes, "t.safetensors");
  } catch (const yeto::Error& e) {
    return e.code();
  }
  return yeto::ExitCode::ok;
}

std::string error_of(const std::string& file_bytes) {
  try {
    SafetensorsFile::from_bytes(file_bytes, "t.safetensors");
  } catch (const yeto::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DType, NamesSizesRoundTrip) {
  for (DType d : all_dtypes()) {
    ASSERT_TRUE(parse_dtype(dtype_name(d)).has_value()) << dtype_name(d);
    EXPECT_EQ(*parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_name(DType::F8_E5M2), "F8_E5M2");
  EXPECT_FALSE(parse_dtype("f32").has_value());
  EXPECT_FALSE(parse_dtype("U16").has_value());
}

TEST(Safetensors, WriteThenReadRoundTrips) {
  TempDir t;
  const auto a = bytes_of({1, 2, 3, 4, 5, 6});
  const std::vector<std::byte> b = {std::byte{1}, std::byte{0}, std::byte{1}};
  const fs::path p = t / "m.safetensors";
  write_safetensors(p, {{"w", DType::F32, {2, 3}, a}, {"mask", DType::BOOL, {3}, b}, {"empty", DType::F16, {0, 4}, {}}},
                    {{"format", "pt"}});
  const auto f = SafetensorsFile::open(p);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const TensorInfo* w = f.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(std::memcmp(f.data(*w), a.data(), a.size()), 0);
  EXPECT_EQ(f.find("mask")->nbytes, 3u);
  EXPECT_EQ(f.find("empty")->nbytes, 0u);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.header_size() % 8, 0u);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.file_size(), fs::file_size(p));
}

TEST(Safetensors, WriterRefusesInconsistentEntries) {
  TempDir t;
  const auto a = bytes_of({1, 2, 3});
  EXPECT_THROW(write_safetensors(t / "x", {{"w", DType::F32, {2, 2}, a}}), yeto::Error);
  EXPECT_THROW(write_safetensors(t / "x", {{"w", DType::F32, {3}, a}, {"w", DType::F32, {3}, a}}), yeto::Error);
  EXPECT_THROW(write_safetensors(t / "x", {{"__metadata__", DType::F32, {3}, a}}), yeto::Error);
  EXPECT_FALSE(fs::exists(t / "x"));
}

TEST(Safetensors, ReadsTheParityFixtures) {
  const fs::path dir = yeto::test::io_fixtures() / "parity/flux-transformer";
  const auto f = SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors");
  EXPECT_GT(f.tensors().size(), 10u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_NE(f.find("context_embedder.weight"), nullptr);
  std::uint64_t total = 0;
  for (const auto& t : f.tensors()) total += t.nbytes;
  EXPECT_EQ(total, f.data_size());
  const auto e = SafetensorsFile::open(dir / "expected.safetensors");
  EXPECT_NE(e.find("sample"), nullptr);
}

TEST(Safetensors, MissingFileIsNotFound) {
  try {
    SafetensorsFile::open("/nonexistent/x.safetensors");
    FAIL();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::not_found);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.safetensors"), std::string::npos);
  }
}

TEST(SafetensorsValidation, NamesFileAndTensor) {
  const std::string msg =
      error_of(with_header(R"({"layer.w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_NE(msg.find("t.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer.w"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 bytes"), std::string::npos) << msg;
}

TEST(SafetensorsValidation, RejectsEachKindOfBadHeader) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_EQ(code_of(with_header(ok, "abcd")), yeto::ExitCode::ok);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "unsupported dtype"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "duplicate"},
      {R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "duplicate key"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "negative"},
      {R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "non-integer"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "end before"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "past the end"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "exactly 2"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", "no \"data_offsets\""},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", "unknown key"},
      {R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", "array"},
      {R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "__metadata__"},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,4]}})", "too large"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "JSON"},
      {R"([1,2])", "start with"},
      {R"({"a":5})", "object"},
  };
  for (const auto& [header, needle] : cases) {
    const std::string msg = error_of(with_header(header, "abcd"));
    EXPECT_NE(msg.find(needle), std::string::npos) << header << " -> " << msg;
    EXPECT_EQ(code_of(with_header(header, "abcd")), yeto::ExitCode::bad_input) << header;
  }
}

TEST(SafetensorsValidation, RejectsOverlapsGapsAndTrailingBytes) {
  const std::string two_overlap =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(error_of(with_header(two_overlap, "abcdefgh")).find("overlaps"), std::string::npos);
  const std::string gap =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_NE(error_of(with_header(gap, "abcdefghijkl")).find("gap"), std::string::npos);
  const std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_NE(error_of(with_header(one, "abcdefgh")).find("trailing"), std::string::npos);
}

TEST(SafetensorsValidation, RejectsBadLengthPrefix) {
  EXPECT_EQ(code_of(""), yeto::ExitCode::bad_input);
  EXPECT_EQ(code_of("1234567"), yeto::ExitCode::bad_input);
  std::string huge(16, '\xff');
  EXPECT_NE(error_of(huge).find("exceeds the limit"), std::string::npos);
  std::string past = with_header("{}", "");
  past[0] = 9;
  EXPECT_NE(error_of(past).find("runs past the end"), std::string::npos);
}

TEST(SafetensorsValidation, DeepNestingIsRejectedWithoutRecursion) {
  const std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_EQ(code_of(with_header(deep, "")), yeto::ExitCode::bad_input);
  const std::string deep_obj = std::string(1, '{') + [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "\"k\":{";
    return s;
  }();
  EXPECT_EQ(code_of(with_header(deep_obj, "")), yeto::ExitCode::bad_input);
}

TEST(SafetensorsValidation, HeaderLengthCapIsConfigurable) {
  SafetensorsLimits small;
  small.max_header_bytes = 16;
  const std::string f = with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  EXPECT_THROW(SafetensorsFile::from_bytes(f, "x", small), yeto::Error);
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(f, "x"));
}
