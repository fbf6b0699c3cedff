// Videos through FFmpeg, frame lists, frame sampling/padding and fps resampling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "data/decode.hpp"
#include "data/frame_sampling.hpp"
#include "data/loader.hpp"
#include "data/manifest.hpp"
#include "data/video.hpp"
#include "data_test_util.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DataFrames, LongClipsTakeTheCentredWindowAndShortOnesArePadded) {
  EXPECT_THAT(select_frames(10, 0, 0, 4).indices, ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(select_frames(11, 0, 0, 4).indices, ElementsAre(3, 4, 5, 6));
  const FrameSelection s = select_frames(3, 0, 0, 5);
  EXPECT_THAT(s.indices, ElementsAre(0, 1, 2, 2, 2));
  EXPECT_EQ(s.padded, 2);
  EXPECT_THAT(select_frames(1, 24, 24, 3).indices, ElementsAre(0, 0, 0));
}

TEST(DataFrames, FpsResamplingDropsOrRepeatsFrames) {
  // 24 -> 12 fps: every other frame; 10 source frames give 5.
  const FrameSelection half = select_frames(10, 24, 12, 5);
  EXPECT_EQ(half.resampled_frames, 5);
  EXPECT_THAT(half.indices, ElementsAre(0, 2, 4, 6, 8));
  // 10 -> 20 fps: each frame twice.
  EXPECT_THAT(select_frames(3, 10, 20, 6).indices, ElementsAre(0, 0, 1, 1, 2, 2));
  // 30 -> 24 fps over 10 frames: floor(k * 1.25).
  EXPECT_THAT(select_frames(10, 30, 24, 8).indices, ElementsAre(0, 1, 2, 3, 5, 6, 7, 8));
  // Same rate or unknown source rate: no resampling.
  EXPECT_THAT(select_frames(4, 0, 12, 4).indices, ElementsAre(0, 1, 2, 3));
}

// Each frame N of the lossless test video has R = G = N * 20.
std::vector<int> frame_values(const Clip& c) {
  std::vector<int> v;
  const std::size_t fb = static_cast<std::size_t>(c.width) * c.height * 3;
  for (std::int64_t f = 0; f < c.frames; ++f) v.push_back(c.rgb[static_cast<std::size_t>(f) * fb + fb / 2 / 3 * 3]);
  return v;
}

TEST(DataVideo, DecodesSamplesAndPadsALosslessClip) {
  TempDir t;
  const fs::path v = test::indexed_video(t / "idx.mkv", 20, 12, 10, 10, 20);
  EXPECT_EQ(count_video_frames(v, {}), 10);
  const VideoInfo info = probe_video(v, {});
  EXPECT_EQ(info.width, 20);
  EXPECT_EQ(info.codec, "ffv1");
  EXPECT_NEAR(info.fps, 10.0, 1e-6);

  Clip c = decode_video_clip(v, {8, 6, ResizeMode::stretch, 4, 0.0}, {});
  EXPECT_EQ(c.frames, 4);
  EXPECT_EQ(c.rgb.size(), 4u * 8 * 6 * 3);
  EXPECT_THAT(frame_values(c), ElementsAre(60, 80, 100, 120));  // centred window 3..6
  // fps 5: source frames 0, 2, 4, 6, 8; window of 4 from the start of the 5.
  c = decode_video_clip(v, {8, 6, ResizeMode::stretch, 4, 5.0}, {});
  EXPECT_THAT(frame_values(c), ElementsAre(0, 40, 80, 120));
  // More frames than the clip: padded with the last frame.
  c = decode_video_clip(v, {8, 6, ResizeMode::center_crop, 13, 0.0}, {});
  EXPECT_EQ(c.selection.padded, 3);
  EXPECT_THAT(frame_values(c), ElementsAre(0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 180, 180, 180));
  // Blue is 255 - N * 20, unchanged by the resampler on a uniform frame.
  EXPECT_EQ(c.rgb[2], 255);
}

TEST(DataVideo, H264Mp4DecodesToTheTargetShape) {
  TempDir t;
  const fs::path v = test::h264_video(t / "t.mp4", 64, 48, 2.0, 24);
  const Clip c = decode_video_clip(v, {32, 16, ResizeMode::center_crop, 8, 12.0}, {});
  EXPECT_EQ(c.source_frames, 48);
  EXPECT_EQ(c.frames, 8);
  EXPECT_EQ(c.rgb.size(), 8u * 32 * 16 * 3);
  EXPECT_THAT(c.selection.indices, ElementsAre(16, 18, 20, 22, 24, 26, 28, 30));
}

TEST(DataVideo, BudgetsAreCheckedFromTheContainerBeforeDecoding) {
  TempDir t;
  const fs::path v = test::indexed_video(t / "idx.mkv", 20, 12, 10, 10, 20);
  try {
    decode_video_clip(v, {8, 6, ResizeMode::stretch, 4, 0.0}, {20 * 12 - 1, 4096});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("declares 20x12 = 240 pixels per frame, above data.max_pixels = 239"));
  }
  try {
    decode_video_clip(v, {8, 6, ResizeMode::stretch, 4, 0.0}, {1 << 20, 9});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.max_frames = 9"));
  }
}

TEST(DataVideo, CorruptTruncatedAndEmptyVideosAreErrors) {
  TempDir t;
  const fs::path v = test::h264_video(t / "t.mp4", 64, 48, 1.0, 24);
  const std::string bytes = test::read_bytes(v);
  test::write_bytes(t / "half.mp4", bytes.substr(0, bytes.size() / 2));
  test::write_bytes(t / "zero.mp4", "");
  test::write_bytes(t / "text.mp4", "this is not a video");
  for (const char* name : {"half.mp4", "zero.mp4", "text.mp4", "missing.mp4"}) {
    try {
      decode_video_clip(t / name, {8, 8, ResizeMode::stretch, 2, 0.0}, {});
      ADD_FAILURE() << name << " decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::bad_input) << name;
      EXPECT_THAT(e.what(), HasSubstr(name));
    }
  }
}

TEST(DataVideo, FrameDirectoriesAreNaturallyOrderedAndListsWork) {
  TempDir t;
  for (int i : {1, 2, 10}) test::solid_png(t / ("ds/clip/f" + std::to_string(i) + ".png"), 6, 4, {static_cast<std::uint8_t>(i * 10), 0, 0, 255});
  t.write("ds/m.jsonl",
          "{\"video\": \"clip\", \"prompt\": \"dir\", \"frames\": 5}\n"
          "{\"video\": [\"clip/f10.png\", \"clip/f1.png\"], \"prompt\": \"list\", \"frames\": 2}\n"
          "{\"video\": \"notes.txt\", \"prompt\": \"text is not a video\"}\n");
  t.write("ds/notes.txt", "just some words, not a video");
  DataOptions o = test::small_options(t / "ds/m.jsonl", 4, 6);
  const Manifest m = read_manifest(resolve_source(o), o);
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].media, MediaKind::frames);
  ASSERT_EQ(m.rows[0].frame_paths.size(), 3u);
  EXPECT_EQ(m.rows[0].frame_paths[2].filename(), "f10.png");
  const Sample dir = decode_row(m.rows[0], 0, o);
  EXPECT_EQ(dir.shape.frames, 5);
  const std::size_t fb = 6 * 4 * 3;
  const std::vector<int> want = {10, 20, 100, 100, 100};  // padded with the last frame
  for (std::size_t f = 0; f < want.size(); ++f) EXPECT_EQ(dir.pixels[f * fb], want[f]) << f;
  const Sample list = decode_row(m.rows[1], 1, o);
  EXPECT_EQ(list.pixels[0], 100);
  EXPECT_EQ(list.pixels[fb], 10);
  try {
    decode_row(m.rows[2], 2, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("m.jsonl line 3"));
  }
}


// Decode memory is bounded by data.decode_memory_mb, not by data.workers x data.max_pixels:
// eight workers decoding 256x256 RGBA images (about 0.7 MiB each at their peak) under a 1 MiB
// budget hold one image at a time, decode every row exactly as one thread does, and a row larger
// than the whole budget still decodes (alone).
TEST(DataDecodeBudget, WorkersShareOneBudgetAndAnOversizedRowRunsAlone) {
  TempDir t;
  std::string manifest;
  for (int i = 0; i < 16; ++i) {
    const std::string name = "img" + std::to_string(i) + ".png";
    test::write_png(t / ("ds/" + name), 256, 256, 4, [i](int x, int y) {
      return test::Pixel{static_cast<std::uint8_t>(x + i), static_cast<std::uint8_t>(y), static_cast<std::uint8_t>(i * 9), 255};
    });
    manifest += "{\"image\": \"" + name + "\", \"prompt\": \"p" + std::to_string(i) + "\"}\n";
  }
  test::write_png(t / "ds/big.png", 512, 512, 3, [](int x, int y) {
    return test::Pixel{static_cast<std::uint8_t>(x), static_cast<std::uint8_t>(y), 7, 255};
  });
  manifest += "{\"image\": \"big.png\", \"prompt\": \"big\"}\n";
  t.write("ds/m.jsonl", manifest);
  DataOptions o = test::small_options(t / "ds/m.jsonl", 16, 16);
  const Manifest m = read_manifest(resolve_source(o), o);
  ASSERT_EQ(m.rows.size(), 17u);
  std::vector<std::vector<std::uint8_t>> reference;
  for (std::size_t i = 0; i < m.rows.size(); ++i) reference.push_back(decode_row(m.rows[i], i, o).pixels);

  o.decode_memory = 1 << 20;
  BatchPlan plan;
  for (std::size_t i = 0; i < m.rows.size(); ++i) plan.push_back({i});
  DecodeBudget& budget = DecodeBudget::process();
  budget.reset_peak();
  Loader loader(plan, [&](std::size_t i) { return decode_row(m.rows[i], i, o); }, {8, 16, BadRowPolicy::error});
  std::size_t n = 0;
  while (auto b = loader.next())
    for (const auto& s : b->samples) {
      EXPECT_EQ(s.pixels, reference[s.row]) << "row " << s.row;
      ++n;
    }
  EXPECT_EQ(n, 17u);
  const std::uint64_t image = 256ull * 256 * 11 + 16 * 16 * 3, big = 512ull * 512 * 11 + 16 * 16 * 3;
  EXPECT_EQ(budget.peak(), big) << "the oversized row held the budget alone, and no two small rows overlapped";
  EXPECT_LT(image, o.decode_memory);
  EXPECT_GT(2 * image, o.decode_memory);
  EXPECT_EQ(budget.in_use(), 0u);
}

}  // namespace
}  // namespace yeto::data
