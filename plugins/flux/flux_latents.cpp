#include "flux_latents.hpp"

#include <stdexcept>

#include <ATen/ATen.h>

namespace yeto::flux {

at::Tensor pack_latents(const at::Tensor& latents) {
  if (latents.dim() != 4 || latents.size(2) % 2 != 0 || latents.size(3) % 2 != 0)
    throw std::invalid_argument("Flux pack_latents: expected [B, C, H, W] with even H and W, got " +
                                c10::str(latents.sizes()));
  const auto b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  return latents.view({b, c, h / 2, 2, w / 2, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({b, (h / 2) * (w / 2), c * 4});
}

at::Tensor unpack_latents(const at::Tensor& packed, std::int64_t height, std::int64_t width,
                          std::int64_t vae_scale_factor) {
  if (packed.dim() != 3 || packed.size(2) % 4 != 0)
    throw std::invalid_argument("Flux unpack_latents: expected [B, N, 4C], got " + c10::str(packed.sizes()));
  const auto b = packed.size(0), n = packed.size(1), ch = packed.size(2);
  const auto h = 2 * (height / (vae_scale_factor * 2));
  const auto w = 2 * (width / (vae_scale_factor * 2));
  if ((h / 2) * (w / 2) != n)
    throw std::invalid_argument("Flux unpack_latents: " + std::to_string(n) + " tokens do not match " +
                                std::to_string(height) + "x" + std::to_string(width) + " pixels");
  return packed.view({b, h / 2, w / 2, ch / 4, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({b, ch / 4, h, w});
}

at::Tensor latent_image_ids(std::int64_t packed_height, std::int64_t packed_width, at::ScalarType dtype) {
  auto ids = at::zeros({packed_height, packed_width, 3}, at::TensorOptions().dtype(at::kFloat));
  ids.select(2, 1).add_(at::arange(packed_height, at::kFloat).unsqueeze(1));
  ids.select(2, 2).add_(at::arange(packed_width, at::kFloat).unsqueeze(0));
  return ids.reshape({packed_height * packed_width, 3}).to(dtype);
}

at::Tensor text_ids(std::int64_t text_len, at::ScalarType dtype) {
  return at::zeros({text_len, 3}, at::TensorOptions().dtype(dtype));
}

double calculate_shift(std::int64_t image_seq_len, std::int64_t base_seq_len, std::int64_t max_seq_len,
                       double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / static_cast<double>(max_seq_len - base_seq_len);
  const double b = base_shift - m * static_cast<double>(base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

}  // namespace yeto::flux
