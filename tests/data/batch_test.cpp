// LibTorch batches: pixels in [-1, 1] channels-first, cached tensors stacked (.npy, .pt,
// inline), shape mixing refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/error.hpp"
#include "data/decode.hpp"
#include "data/manifest.hpp"
#include "data/source.hpp"
#include "data/torch/batch.hpp"
#include "data_test_util.hpp"
#include "support/av_clips.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

TEST(DataBatch, ImagesVideosAndCachedTensorsBecomeTensors) {
  TempDir t;
  test::solid_png(t / "red.png", 7, 5, {255, 0, 0, 255});
  test::solid_png(t / "grey.png", 3, 9, {51, 51, 51, 255});
  test::indexed_video(t / "v.mkv", 8, 8, 4, 4, 40);
  fs::copy_file(fs::path(YETO_SOURCE_DIR) / "tests/fixtures/io/f32.npy", t / "f32.npy");
  fs::copy_file(fs::path(YETO_SOURCE_DIR) / "tests/fixtures/io/dict_one.pt", t / "one.pt");
  t.write("m.jsonl",
          "{\"image\": \"red.png\", \"prompt\": \"red\", \"prompt_embeds\": \"f32.npy\"}\n"
          "{\"image\": \"grey.png\", \"prompt\": \"grey\", \"prompt_embeds\": [[1, 2, 3], [4, 5, 6]]}\n"
          "{\"video\": \"v.mkv\", \"prompt\": \"v\", \"frames\": 3}\n"
          "{\"latents\": \"one.pt#only\", \"prompt\": \"pt\", \"latent_height\": 2, \"latent_width\": 1}\n");
  DataOptions o = test::small_options(t / "m.jsonl", 4, 6);
  const Manifest m = read_manifest(resolve_source(o), o);
  ASSERT_EQ(m.rows.size(), 4u);
  std::vector<Sample> images = {decode_row(m.rows[0], 0, o), decode_row(m.rows[1], 1, o)};
  const TensorBatch b = collate(images);
  ASSERT_EQ(b.pixel_values.sizes(), (std::vector<std::int64_t>{2, 3, 4, 6}));
  EXPECT_FLOAT_EQ(b.pixel_values[0][0][1][1].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(b.pixel_values[0][1][1][1].item<float>(), -1.0f);
  EXPECT_NEAR(b.pixel_values[1][2][3][5].item<float>(), 51 / 127.5 - 1, 1e-6);
  EXPECT_EQ(b.prompts, (std::vector<std::string>{"red", "grey"}));
  ASSERT_EQ(b.tensors.at("prompt_embeds").sizes(), (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_FLOAT_EQ(b.tensors.at("prompt_embeds")[0][1][2].item<float>(), 5.0f);  // arange(6)
  EXPECT_FLOAT_EQ(b.tensors.at("prompt_embeds")[1][1][2].item<float>(), 6.0f);

  const TensorBatch v = collate({decode_row(m.rows[2], 2, o)});
  ASSERT_EQ(v.pixel_values.sizes(), (std::vector<std::int64_t>{1, 3, 3, 4, 6}));
  EXPECT_NEAR(v.pixel_values[0][0][2][0][0].item<float>(), 80 / 127.5 - 1, 1e-6);  // centred frames 0..2 of 4 -> starts at 0

  const Sample pt = decode_row(m.rows[3], 3, o);
  EXPECT_EQ(pt.tensor_info.at("latents").shape, (std::vector<std::int64_t>{2}));  // probed torch-free
  const TensorBatch l = collate({pt});
  EXPECT_FALSE(l.pixel_values.defined());
  EXPECT_FLOAT_EQ(l.tensors.at("latents")[0][1].item<float>(), 2.0f);

  try {
    collate({images[0], decode_row(m.rows[2], 2, o)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.bucket_by_shape"));
  }
}

TEST(DataBatch, TheSoundOfVideoRowsIsStackedAsTheAudioTensor) {
  TempDir t;
  test::AvClipSpec s;  // 2 s at 24 fps, a tone in [0.75, 1.0)
  test::av_clip(t / "a.mp4", s);
  s.bursts = {{1.0, 1.25}};
  test::av_clip(t / "b.mp4", s);
  t.write("m.jsonl", "{\"video\": \"a.mp4\", \"prompt\": \"a\"}\n{\"video\": \"b.mp4\", \"prompt\": \"b\"}\n");
  DataOptions o = test::small_options(t / "m.jsonl", 16, 16);
  o.num_frames = 24;
  o.audio = {true, 16000, 1};
  const Manifest m = read_manifest(resolve_source(o), o);
  const TensorBatch b = collate({decode_row(m.rows[0], 0, o), decode_row(m.rows[1], 1, o)});
  ASSERT_EQ(b.pixel_values.sizes(), (std::vector<std::int64_t>{2, 3, 24, 16, 16}));
  const at::Tensor audio = b.tensors.at("audio");
  ASSERT_EQ(audio.sizes(), (std::vector<std::int64_t>{2, 1, 16000}));
  EXPECT_EQ(audio.scalar_type(), at::kFloat);
  // Row 0 sounds in [4000, 8000) of its window (0.5 s in), row 1 a quarter second later.
  EXPECT_GT(audio[0][0].slice(0, 4200, 7800).abs().max().item<float>(), 0.4f);
  EXPECT_LT(audio[0][0].slice(0, 8200, 16000).abs().max().item<float>(), 0.05f);
  EXPECT_LT(audio[1][0].slice(0, 0, 7800).abs().max().item<float>(), 0.05f);
  EXPECT_GT(audio[1][0].slice(0, 8200, 11800).abs().max().item<float>(), 0.4f);
}

}  // namespace
}  // namespace yeto::data
