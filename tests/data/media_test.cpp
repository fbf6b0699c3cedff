// Images through stb_image and the resampler: formats, bit depths, grey/alpha, budgets, and
// both resize modes on non-square inputs with checked pixel values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "data/image.hpp"
#include "data/resize.hpp"
#include "data_test_util.hpp"

namespace yeto::data {
namespace {

namespace fs = std::filesystem;
using test::Pixel;
using test::TempDir;
using ::testing::HasSubstr;

Pixel gradient(int x, int y) {
  return {static_cast<std::uint8_t>(x * 7 + 3), static_cast<std::uint8_t>(y * 11 + 5), static_cast<std::uint8_t>((x + y) * 3), 200};
}

void expect_gradient(const Image& img, int w, int h) {
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const Pixel p = gradient(x, y);
      ASSERT_EQ(img.at(x, y, 0), p[0]) << x << "," << y;
      ASSERT_EQ(img.at(x, y, 1), p[1]) << x << "," << y;
      ASSERT_EQ(img.at(x, y, 2), p[2]) << x << "," << y;
    }
}

TEST(DataImage, LosslessFormatsDecodeExactlyAtOddSizes) {
  TempDir t;
  expect_gradient(decode_image_file(test::write_png(t / "a.png", 37, 21, 3, gradient), 1 << 20), 37, 21);
  expect_gradient(decode_image_file(test::write_png(t / "rgba.png", 13, 7, 4, gradient), 1 << 20), 13, 7);
  expect_gradient(decode_image_file(test::write_bmp(t / "a.bmp", 9, 5, gradient), 1 << 20), 9, 5);
  expect_gradient(decode_image_file(test::write_tga(t / "a.tga", 11, 3, 3, gradient), 1 << 20), 11, 3);
  expect_gradient(decode_image_file(test::write_tga(t / "a4.tga", 3, 11, 4, gradient), 1 << 20), 3, 11);
}

TEST(DataImage, GreyAndGreyAlphaBecomeRgb) {
  TempDir t;
  const Image g = decode_image_file(test::write_png(t / "g.png", 5, 3, 1, gradient), 1 << 20);
  const Image ga = decode_image_file(test::write_png(t / "ga.png", 5, 3, 2, gradient), 1 << 20);
  for (const Image* img : {&g, &ga}) {
    ASSERT_EQ(img->rgb.size(), 5u * 3 * 3);
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 5; ++x)
        for (int c = 0; c < 3; ++c) EXPECT_EQ(img->at(x, y, c), gradient(x, y)[0]);
  }
  EXPECT_EQ(probe_image_file(t / "ga.png", 1 << 20).channels, 2);
}

TEST(DataImage, JpegIsCloseAndGifGivesItsFirstFrame) {
  TempDir t;
  const Image j = decode_image_file(test::write_jpg(t / "a.jpg", 17, 9, [](int, int) { return Pixel{200, 40, 90, 255}; }), 1 << 20);
  ASSERT_EQ(j.width, 17);
  EXPECT_NEAR(j.at(8, 4, 0), 200, 6);
  EXPECT_NEAR(j.at(8, 4, 1), 40, 6);
  EXPECT_NEAR(j.at(8, 4, 2), 90, 6);
  test::ffmpeg({"-f", "lavfi", "-i", "color=c=red:s=16x8:d=0.2:r=10", "-f", "lavfi", "-i", "color=c=blue:s=16x8:d=0.2:r=10",
                "-filter_complex", "[0][1]concat=n=2:v=1", "-f", "gif", (t / "anim.gif").string()});
  const Image gif = decode_image_file(t / "anim.gif", 1 << 20);
  ASSERT_EQ(gif.width, 16);
  EXPECT_GT(gif.at(3, 3, 0), 200);  // red, not the later blue frames
  EXPECT_LT(gif.at(3, 3, 2), 60);
}

TEST(DataImage, SixteenBitPngIsRoundedToEightBits) {
  TempDir t;
  test::ffmpeg({"-f", "lavfi", "-i", "color=c=0x804020:s=8x4,format=rgb48be", "-frames:v", "1", (t / "p16.png").string()});
  test::ffmpeg({"-f", "lavfi", "-i", "color=c=0xffffff:s=8x4,format=gray16be", "-frames:v", "1", (t / "g16.png").string()});
  EXPECT_TRUE(probe_image_file(t / "p16.png", 1 << 20).sixteen_bit);
  const Image p = decode_image_file(t / "p16.png", 1 << 20);
  // ffmpeg's colour source goes through limited-range YUV, so the values are near, not exact.
  EXPECT_NEAR(p.at(1, 1, 0), 128, 4);
  EXPECT_NEAR(p.at(1, 1, 1), 64, 4);
  EXPECT_NEAR(p.at(1, 1, 2), 32, 4);
  const Image g = decode_image_file(t / "g16.png", 1 << 20);
  EXPECT_NEAR(g.at(0, 0, 0), 255, 2);
  EXPECT_EQ(g.at(0, 0, 0), g.at(0, 0, 2));
}

TEST(DataImage, PixelBudgetIsCheckedBeforeDecoding) {
  TempDir t;
  const fs::path p = test::write_png(t / "a.png", 37, 21, 3, gradient);
  try {
    decode_image_file(p, 37 * 21 - 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("declares 37x21 = 777 pixels, above data.max_pixels = 776"));
  }
  EXPECT_NO_THROW(decode_image_file(p, 37 * 21));
  // A decompression bomb: a tiny PNG whose header claims 20000 x 15000.
  std::string bytes = test::read_bytes(p);
  const std::size_t ihdr = bytes.find("IHDR");
  ASSERT_NE(ihdr, std::string::npos);
  for (int i = 0; i < 2; ++i) {
    const std::uint32_t v = i == 0 ? 20000 : 15000;
    for (int b = 0; b < 4; ++b) bytes[ihdr + 4 + i * 4 + b] = static_cast<char>((v >> (24 - 8 * b)) & 0xFF);
  }
  try {
    decode_image(bytes, "bomb.png", 64LL << 20);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("20000x15000 = 300000000 pixels"));
    EXPECT_THAT(e.what(), HasSubstr("refused before decoding"));
  }
  // Beyond what the decoder's own probe accepts (30000 x 30000 x 3 bytes > 1 GiB): still the
  // data.max_pixels message, not "unknown image type".
  for (int i = 0; i < 2; ++i)
    for (int b = 0; b < 4; ++b) bytes[ihdr + 4 + i * 4 + b] = static_cast<char>((30000u >> (24 - 8 * b)) & 0xFF);
  try {
    decode_image(bytes, "huge.png", 64LL << 20);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("huge.png: image declares 30000x30000 = 900000000 pixels, above data.max_pixels"));
  }
  // The same header read for JPEG, GIF and BMP (a header alone: refused on its size first).
  std::string jpeg = std::string("\xFF\xD8\xFF\xE0\x00\x04xx\xFF\xC0\x00\x11\x08", 13) + std::string("\x75\x30\x75\x30", 4) +
                     std::string(20, '\0');
  std::string gif = std::string("GIF89a") + std::string("\x30\x75\x30\x75", 4) + std::string(20, '\0');
  std::string bmp = "BM" + std::string(16, '\0') + std::string("\x30\x75\x00\x00\xd0\x8a\xff\xff", 8) + std::string(20, '\0');
  for (const auto& [name, data] : {std::pair<std::string, std::string>{"huge.jpg", jpeg}, {"huge.gif", gif}, {"huge.bmp", bmp}}) {
    try {
      decode_image(data, name, 64LL << 20);
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(name + ": image declares 30000x30000 = 900000000 pixels")) << name;
    }
  }
}

TEST(DataImage, CorruptTruncatedAndEmptyImagesAreErrors) {
  TempDir t;
  const std::string png = test::read_bytes(test::write_png(t / "a.png", 37, 21, 3, gradient));
  EXPECT_THROW(decode_image(png.substr(0, png.size() / 2), "half.png", 1 << 20), Error);
  EXPECT_THROW(decode_image("not an image at all", "text.png", 1 << 20), Error);
  test::write_bytes(t / "zero.png", "");
  try {
    decode_image_file(t / "zero.png", 1 << 20);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("empty file (0 bytes)"));
    EXPECT_EQ(e.code(), ExitCode::bad_input);
  }
  EXPECT_THROW(decode_image_file(t / "missing.png", 1 << 20), Error);
}

// Three vertical bands: 2 columns red, 4 green, 2 blue (8 x 4).
Image bands() {
  Image img;
  img.width = 8;
  img.height = 4;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) {
      const std::uint8_t r = x < 2 ? 255 : 0, g = (x >= 2 && x < 6) ? 255 : 0, b = x >= 6 ? 255 : 0;
      img.rgb.insert(img.rgb.end(), {r, g, b});
    }
  return img;
}

TEST(DataResize, CenterCropKeepsTheMiddleOfAWideImage) {
  const Image out = resize_image(bands(), 4, 4, ResizeMode::center_crop);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) {
      EXPECT_EQ(out.at(x, y, 0), 0);
      EXPECT_EQ(out.at(x, y, 1), 255);
      EXPECT_EQ(out.at(x, y, 2), 0);
    }
  // Downscaled crop: 8x4 -> 2x2 takes the middle 4x4 and averages 2x2 blocks: all green.
  const Image small = resize_image(bands(), 2, 2, ResizeMode::center_crop);
  EXPECT_EQ(small.at(0, 0, 1), 255);
  EXPECT_EQ(small.at(1, 1, 0), 0);
}

TEST(DataResize, StretchAveragesWholeBlocksOfAWideImage) {
  const Image out = resize_image(bands(), 4, 4, ResizeMode::stretch);
  const std::uint8_t want[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 255, 0}, {0, 0, 255}};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(out.at(x, y, c), want[x][c]) << x << "," << y << "," << c;
  // 8 -> 3 columns: each output column covers 8/3 source columns, area-weighted.
  const Image third = resize_image(bands(), 3, 4, ResizeMode::stretch);
  // column 0 covers [0, 2.667): red 2/2.667 = 0.75, green 0.25
  EXPECT_EQ(third.at(0, 0, 0), 191);
  EXPECT_EQ(third.at(0, 0, 1), 64);
  // column 1 covers [2.667, 5.333): all green
  EXPECT_EQ(third.at(1, 0, 1), 255);
  EXPECT_EQ(third.at(1, 0, 0), 0);
}

TEST(DataResize, TallImagesCropVerticallyAndUpscaleBilinearly) {
  // 2 x 6: rows 0-1 value 0, rows 2-3 value 100, rows 4-5 value 200 (all channels).
  Image tall;
  tall.width = 2;
  tall.height = 6;
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 2; ++x) tall.rgb.insert(tall.rgb.end(), 3, static_cast<std::uint8_t>((y / 2) * 100));
  const Image crop = resize_image(tall, 2, 2, ResizeMode::center_crop);  // middle 2x2: rows 2-3
  for (int y = 0; y < 2; ++y) EXPECT_EQ(crop.at(0, y, 0), 100);
  const Image stretch = resize_image(tall, 2, 3, ResizeMode::stretch);  // 2 rows each
  EXPECT_EQ(stretch.at(1, 0, 0), 0);
  EXPECT_EQ(stretch.at(1, 1, 0), 100);
  EXPECT_EQ(stretch.at(1, 2, 0), 200);
  // Upscale 2 x 1 (0, 200) to 4 x 1: half-pixel centres -> 0, 50, 150, 200.
  Image two;
  two.width = 2;
  two.height = 1;
  two.rgb = {0, 0, 0, 200, 200, 200};
  const Image up = resize_image(two, 4, 1, ResizeMode::stretch);
  EXPECT_EQ(up.at(0, 0, 0), 0);
  EXPECT_EQ(up.at(1, 0, 0), 50);
  EXPECT_EQ(up.at(2, 0, 0), 150);
  EXPECT_EQ(up.at(3, 0, 0), 200);
  // Same size: identity.
  EXPECT_EQ(resize_image(bands(), 8, 4, ResizeMode::center_crop).rgb, bands().rgb);
}

}  // namespace
}  // namespace yeto::data
