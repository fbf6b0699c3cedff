// The one place where differences between LibTorch versions are handled. Everything else in
// the SDK, the host and the plugins calls these functions instead of testing versions itself.
//
// Supported: LibTorch 1.13 (the Debian CPU build used for development and CI) and 2.x (PyTorch
// wheels, with or without CUDA). Nothing here is CUDA-only: device-specific choices are made at
// run time from the tensors' devices, so the same code compiles against CPU-only builds.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#if !defined(TORCH_VERSION_MAJOR) || !defined(TORCH_VERSION_MINOR)
#error "yeto/torch_compat.hpp: <torch/version.h> does not define TORCH_VERSION_MAJOR/MINOR"
#endif

// 1 when this LibTorch has a public, fused at::scaled_dot_product_attention (PyTorch >= 2.0).
#if TORCH_VERSION_MAJOR >= 2
#define YETO_HAVE_FUSED_SDPA 1
#else
#define YETO_HAVE_FUSED_SDPA 0
#endif

// 1 when at::scaled_dot_product_attention takes an explicit `scale` (PyTorch >= 2.1).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define YETO_SDPA_HAS_SCALE 1
#else
#define YETO_SDPA_HAS_SCALE 0
#endif

namespace yeto::compat {

constexpr int torch_version_major() { return TORCH_VERSION_MAJOR; }
constexpr int torch_version_minor() { return TORCH_VERSION_MINOR; }
constexpr bool have_fused_sdpa() { return YETO_HAVE_FUSED_SDPA != 0; }

// Which implementation scaled_dot_product_attention() uses.
enum class SdpaBackend {
  automatic,  // fused where this LibTorch has it, explicit otherwise
  explicit_math,  // always the explicit float32-accumulating formula
};

// Turns a boolean "keep" mask (true = attend) into an additive float mask of `dtype`
// (0 = attend, the dtype's lowest value = masked). Float masks are returned unchanged.
inline at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype) {
  if (!mask.defined() || mask.scalar_type() != at::kBool) {
    return mask;
  }
  auto zeros = at::zeros(mask.sizes(), mask.options().dtype(dtype));
  double lowest = 0.0;
  switch (dtype) {
    case at::kHalf: lowest = -65504.0; break;
    case at::kBFloat16: lowest = -3.3895313892515355e38; break;
    case at::kDouble: lowest = std::numeric_limits<double>::lowest(); break;
    default: lowest = std::numeric_limits<float>::lowest(); break;
  }
  return zeros.masked_fill(mask.logical_not(), lowest);
}

// The defining formula softmax(Q K^T * scale + mask) V, accumulated in float32 whatever the
// input dtype (half / bfloat16 inputs are upcast, the result is cast back). This is the
// reference path: it is what the recorded parity fixtures computed on PyTorch 1.13.
//   q: [..., Lq, D], k: [..., Lk, D], v: [..., Lk, Dv]; mask broadcastable to [..., Lq, Lk],
//   additive float or boolean keep-mask. is_causal adds the lower-triangular mask.
inline at::Tensor sdpa_math(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, bool is_causal, std::optional<double> scale) {
  const auto out_dtype = q.scalar_type();
  const bool upcast = out_dtype == at::kHalf || out_dtype == at::kBFloat16;
  const auto qf = upcast ? q.to(at::kFloat) : q;
  const auto kf = upcast ? k.to(at::kFloat) : k;
  const auto vf = upcast ? v.to(at::kFloat) : v;
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = at::matmul(qf, kf.transpose(-2, -1)) * s;
  if (is_causal) {
    const auto lq = q.size(-2);
    const auto lk = k.size(-2);
    auto keep = at::ones({lq, lk}, q.options().dtype(at::kBool)).tril(lk - lq);
    scores = scores + additive_mask(keep, scores.scalar_type());
  }
  if (mask.defined()) {
    scores = scores + additive_mask(mask, scores.scalar_type()).to(scores.scalar_type());
  }
  auto probs = at::softmax(scores, -1);
  auto out = at::matmul(probs, vf);
  return upcast ? out.to(out_dtype) : out;
}

// Scaled-dot-product attention without dropout (training of the frozen base never needs
// attention dropout here). Uses the fused kernel where this LibTorch has one and it can
// express the call; otherwise the explicit formula.
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& mask = {},
                                               bool is_causal = false,
                                               std::optional<double> scale = std::nullopt,
                                               SdpaBackend backend = SdpaBackend::automatic) {
#if YETO_HAVE_FUSED_SDPA
  if (backend == SdpaBackend::automatic && !(is_causal && mask.defined())) {
    c10::optional<at::Tensor> m;
    if (mask.defined()) {
      m = mask.scalar_type() == at::kBool ? mask : mask.to(q.scalar_type());
    }
#if YETO_SDPA_HAS_SCALE
    c10::optional<double> sc;
    if (scale) sc = *scale;
    return at::scaled_dot_product_attention(q, k, v, m, 0.0, is_causal, sc);
#else
    if (!scale) {
      return at::scaled_dot_product_attention(q, k, v, m, 0.0, is_causal);
    }
    // 2.0 has no scale argument: fold the ratio to the default scale into q.
    const double ratio = *scale * std::sqrt(static_cast<double>(q.size(-1)));
    return at::scaled_dot_product_attention(q * ratio, k, v, m, 0.0, is_causal);
#endif
  }
#else
  (void)backend;
#endif
  return sdpa_math(q, k, v, mask, is_causal, scale);
}

// A seeded CPU random stream (the equivalent of torch.Generator().manual_seed(seed)).
inline at::Generator make_cpu_generator(std::uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

}  // namespace yeto::compat
