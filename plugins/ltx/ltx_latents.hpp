// LTXPipeline's latent helpers: packing [B, C, F, H, W] latents into a token sequence (patch_size
// x patch_size x patch_size_t patches, tokens in (f, h, w) order) and back, and the per-channel
// latent normalisation with the VAE's latents_mean / latents_std buffers.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace yeto::ltx {

// [B, C, F, H, W] -> [B, (F/pt)(H/p)(W/p), C * pt * p * p].
at::Tensor pack_latents(const at::Tensor& latents, std::int64_t patch_size = 1, std::int64_t patch_size_t = 1);
// Inverse of pack_latents; num_frames, height, width are the post-patch token grid.
at::Tensor unpack_latents(const at::Tensor& packed, std::int64_t num_frames, std::int64_t height, std::int64_t width,
                          std::int64_t patch_size = 1, std::int64_t patch_size_t = 1);
// (latents - mean) * scaling_factor / std and its inverse latents * std / scaling_factor + mean,
// mean and std [C] broadcast over [B, C, F, H, W].
at::Tensor normalize_latents(const at::Tensor& latents, const at::Tensor& mean, const at::Tensor& std,
                             double scaling_factor = 1.0);
at::Tensor denormalize_latents(const at::Tensor& latents, const at::Tensor& mean, const at::Tensor& std,
                               double scaling_factor = 1.0);
// (temporal_ratio / frame_rate, spatial_ratio, spatial_ratio): the transformer's rope scale.
std::array<double, 3> rope_interpolation_scale(std::int64_t temporal_ratio, std::int64_t spatial_ratio,
                                               double frame_rate);

}  // namespace yeto::ltx
