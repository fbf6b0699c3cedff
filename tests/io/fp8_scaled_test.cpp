// Pairing the tensors of a scaled fp8 checkpoint (NAVA_fp8's weight_scale, ComfyUI's
// scale_weight + scaled_fp8 + scale_input): what is paired, what is consumed, what is refused.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/fp8_scaled.hpp"

using namespace yeto::io;

namespace {

struct Tensors {
  std::deque<TensorInfo> infos;
  std::vector<std::pair<std::string, const TensorInfo*>> list;
  Tensors& add(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
    infos.push_back({name, dtype, std::move(shape), 0, 0});
    list.emplace_back(name, &infos.back());
    return *this;
  }
};

// The message of the yeto::Error pairing throws ("" when it does not).
std::string refusal(const Tensors& t) {
  try {
    pair_fp8_scales(t.list, "ckpt.safetensors");
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    return e.what();
  }
  return {};
}

}  // namespace

TEST(Fp8Scaled, PairsNavaWeightScalesPerTensorAndPerRow) {
  Tensors t;
  t.add("blocks.0.attn.q.weight", DType::F8_E4M3, {8, 4})
      .add("blocks.0.attn.q.weight_scale", DType::BF16, {})
      .add("blocks.0.attn.k.weight", DType::F8_E4M3, {8, 4})
      .add("blocks.0.attn.k.weight_scale", DType::BF16, {1})
      .add("blocks.0.attn.v.weight", DType::F8_E4M3, {8, 4})
      .add("blocks.0.attn.v.weight_scale", DType::BF16, {8})
      .add("blocks.0.attn.o.weight", DType::F8_E4M3, {8, 4})
      .add("blocks.0.attn.o.weight_scale", DType::F32, {8, 1})
      .add("blocks.0.attn.o.bias", DType::BF16, {8})
      .add("head.weight", DType::BF16, {3, 8});
  const auto l = pair_fp8_scales(t.list, "x");
  EXPECT_EQ(l.scale_of.size(), 4u);
  EXPECT_EQ(l.scale_of.at("blocks.0.attn.q.weight"), "blocks.0.attn.q.weight_scale");
  EXPECT_EQ(l.scale_of.at("blocks.0.attn.o.weight"), "blocks.0.attn.o.weight_scale");
  EXPECT_EQ(l.consumed.size(), 4u);
  EXPECT_TRUE(l.consumed.count("blocks.0.attn.v.weight_scale"));
  EXPECT_FALSE(l.consumed.count("blocks.0.attn.o.bias"));
  EXPECT_EQ(l.input_scales, 0u);
}

TEST(Fp8Scaled, PairsComfyScaleWeightAndConsumesTheMarkerAndInputScales) {
  Tensors t;
  t.add("scaled_fp8", DType::F8_E4M3, {0})
      .add("blocks.0.ffn.0.weight", DType::F8_E4M3, {16, 8})
      .add("blocks.0.ffn.0.scale_weight", DType::F32, {})
      .add("blocks.0.ffn.0.scale_input", DType::F32, {})
      .add("blocks.0.ffn.0.bias", DType::BF16, {16});
  const auto l = pair_fp8_scales(t.list, "x");
  ASSERT_EQ(l.scale_of.size(), 1u);
  EXPECT_EQ(l.scale_of.at("blocks.0.ffn.0.weight"), "blocks.0.ffn.0.scale_weight");
  EXPECT_TRUE(l.consumed.count("scaled_fp8"));
  EXPECT_TRUE(l.consumed.count("blocks.0.ffn.0.scale_input"));
  EXPECT_TRUE(l.consumed.count("blocks.0.ffn.0.scale_weight"));
  EXPECT_EQ(l.input_scales, 1u);
}

TEST(Fp8Scaled, UnscaledFp8TensorsKeepScaleOne) {
  Tensors t;
  t.add("a.weight", DType::F8_E4M3, {4, 4}).add("a.bias", DType::F32, {4}).add("b.weight", DType::F8_E5M2, {4, 4});
  const auto l = pair_fp8_scales(t.list, "x");
  ASSERT_EQ(l.scale_of.size(), 1u);  // e5m2 is decoded as before
  EXPECT_EQ(l.scale_of.at("a.weight"), "");
  EXPECT_TRUE(l.consumed.empty());
}

TEST(Fp8Scaled, RefusesBadLayoutsNamingTheTensor) {
  {
    Tensors t;  // a per-column scale
    t.add("m.weight", DType::F8_E4M3, {8, 4}).add("m.weight_scale", DType::BF16, {4});
    const auto m = refusal(t);
    EXPECT_NE(m.find("'m.weight_scale' has shape [4] for the weight 'm.weight' of shape [8, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("ckpt.safetensors"), std::string::npos) << m;
  }
  {
    Tensors t;  // a per-block scale
    t.add("m.weight", DType::F8_E4M3, {8, 4}).add("m.weight_scale", DType::BF16, {8, 2});
    EXPECT_NE(refusal(t).find("'m.weight_scale' has shape [8, 2]"), std::string::npos);
  }
  {
    Tensors t;  // a scale with no weight
    t.add("m.weight_scale", DType::BF16, {});
    const auto m = refusal(t);
    EXPECT_NE(m.find("'m.weight_scale' has no float8_e4m3fn weight 'm.weight' (there is no such tensor)"),
              std::string::npos) << m;
  }
  {
    Tensors t;  // a scale for a 16-bit weight
    t.add("m.weight", DType::BF16, {8, 4}).add("m.scale_weight", DType::F32, {});
    EXPECT_NE(refusal(t).find("'m.scale_weight' has no float8_e4m3fn weight 'm.weight' (it is BF16)"),
              std::string::npos);
  }
  {
    Tensors t;  // an fp8 weight without its scale where the others have one
    t.add("a.weight", DType::F8_E4M3, {8, 4})
        .add("a.weight_scale", DType::BF16, {})
        .add("b.weight", DType::F8_E4M3, {8, 4});
    const auto m = refusal(t);
    EXPECT_NE(m.find("the float8_e4m3fn tensor 'b.weight' has no scale ('b.weight_scale' or 'b.scale_weight')"),
              std::string::npos) << m;
  }
  {
    Tensors t;  // the marker makes scales required
    t.add("scaled_fp8", DType::F8_E4M3, {0}).add("b.weight", DType::F8_E4M3, {8, 4});
    EXPECT_NE(refusal(t).find("'b.weight' has no scale"), std::string::npos);
  }
  {
    Tensors t;  // an integer scale
    t.add("m.weight", DType::F8_E4M3, {8, 4}).add("m.weight_scale", DType::I32, {});
    EXPECT_NE(refusal(t).find("'m.weight_scale' is I32"), std::string::npos);
  }
  {
    Tensors t;  // two scales
    t.add("m.weight", DType::F8_E4M3, {8, 4}).add("m.weight_scale", DType::BF16, {}).add("m.scale_weight", DType::F32, {});
    EXPECT_NE(refusal(t).find("'m.weight' has two scales"), std::string::npos);
  }
}
