#include "ltx_latents.hpp"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace yeto::ltx {

at::Tensor pack_latents(const at::Tensor& latents, std::int64_t p, std::int64_t pt) {
  if (latents.dim() != 5 || latents.size(2) % pt != 0 || latents.size(3) % p != 0 || latents.size(4) % p != 0)
    throw std::invalid_argument("pack_latents: expected [B, C, F, H, W] with F divisible by " + std::to_string(pt) +
                                " and H, W by " + std::to_string(p) + ", got " + c10::str(latents.sizes()));
  const auto b = latents.size(0), f = latents.size(2), h = latents.size(3), w = latents.size(4);
  return latents.reshape({b, -1, f / pt, pt, h / p, p, w / p, p})
      .permute({0, 2, 4, 6, 1, 3, 5, 7})
      .flatten(4, 7)
      .flatten(1, 3);
}

at::Tensor unpack_latents(const at::Tensor& packed, std::int64_t f, std::int64_t h, std::int64_t w, std::int64_t p,
                          std::int64_t pt) {
  if (packed.dim() != 3 || packed.size(1) != f * h * w)
    throw std::invalid_argument("unpack_latents: expected [B, " + std::to_string(f * h * w) + ", C] for a " +
                                std::to_string(f) + "x" + std::to_string(h) + "x" + std::to_string(w) +
                                " token grid, got " + c10::str(packed.sizes()));
  const auto b = packed.size(0);
  return packed.reshape({b, f, h, w, -1, pt, p, p})
      .permute({0, 4, 1, 5, 2, 6, 3, 7})
      .flatten(6, 7)
      .flatten(4, 5)
      .flatten(2, 3);
}

at::Tensor normalize_latents(const at::Tensor& latents, const at::Tensor& mean, const at::Tensor& std, double sf) {
  const auto m = mean.view({1, -1, 1, 1, 1}).to(latents.device(), latents.scalar_type());
  const auto s = std.view({1, -1, 1, 1, 1}).to(latents.device(), latents.scalar_type());
  return (latents - m) * sf / s;
}

at::Tensor denormalize_latents(const at::Tensor& latents, const at::Tensor& mean, const at::Tensor& std, double sf) {
  const auto m = mean.view({1, -1, 1, 1, 1}).to(latents.device(), latents.scalar_type());
  const auto s = std.view({1, -1, 1, 1, 1}).to(latents.device(), latents.scalar_type());
  return latents * s / sf + m;
}

std::array<double, 3> rope_interpolation_scale(std::int64_t temporal_ratio, std::int64_t spatial_ratio,
                                               double frame_rate) {
  return {static_cast<double>(temporal_ratio) / frame_rate, static_cast<double>(spatial_ratio),
          static_cast<double>(spatial_ratio)};
}

}  // namespace yeto::ltx
