// FLUX.1 pipeline latent semantics: 2x2 patch packing of VAE latents into a token sequence,
// the position ids of image and text tokens, and the flow-match shift `mu` that grows with
// the image sequence length. These are what FluxPipeline's static helpers compute.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace yeto::flux {

// [B, C, H, W] latents (H, W even) -> [B, (H/2)(W/2), 4C] tokens.
at::Tensor pack_latents(const at::Tensor& latents);
// Inverse of pack_latents for pixel size height x width with the VAE's scale factor:
// latent H = 2 * (height / (vae_scale_factor * 2)), likewise W.
at::Tensor unpack_latents(const at::Tensor& packed, std::int64_t height, std::int64_t width,
                          std::int64_t vae_scale_factor);
// [h*w, 3] ids for an h x w grid of packed tokens: (0, row, column).
at::Tensor latent_image_ids(std::int64_t packed_height, std::int64_t packed_width,
                            at::ScalarType dtype = at::kFloat);
// [T, 3] zeros: the pipeline's text ids.
at::Tensor text_ids(std::int64_t text_len, at::ScalarType dtype = at::kFloat);
// Linear interpolation of mu between (base_seq_len, base_shift) and (max_seq_len, max_shift).
double calculate_shift(std::int64_t image_seq_len, std::int64_t base_seq_len = 256, std::int64_t max_seq_len = 4096,
                       double base_shift = 0.5, double max_shift = 1.15);

}  // namespace yeto::flux
