// The project's own resampler, used for images and video frames alike, so every raw sample
// reaches the model through the same arithmetic.
//
// Both modes map an axis-aligned source rectangle onto the height x width output:
//   stretch      the whole image (aspect ratio not preserved);
//   center-crop  the largest centred rectangle with the output's aspect ratio (scale so the
//                output is covered, crop the overflow equally on both sides).
// Each axis is resampled separately. Where an output pixel covers one or more source pixels
// (downscaling) it is the area-weighted mean of the source pixels it overlaps (exact box
// filter, fractional edges weighted by overlap): no aliasing, and an integer factor averages
// whole blocks. Where it covers less than one (upscaling) it is bilinear between the two
// nearest source pixel centres (half-pixel centres, edges clamped). Arithmetic is float;
// results are rounded to nearest and clamped to 0..255.
#pragma once

#include <cstdint>

#include "data/image.hpp"
#include "data/options.hpp"

namespace yeto::data {

// Writes width*height*3 bytes to `out`.
void resize_rgb(const std::uint8_t* src, int src_width, int src_height, std::uint8_t* out, int width, int height, ResizeMode mode);
Image resize_image(const Image& src, int width, int height, ResizeMode mode);

}  // namespace yeto::data
