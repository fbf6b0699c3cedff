#include "yeto/family/wan_vae.hpp"

#include <cmath>
#include <regex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/init.h>

#include "yeto/family/config.hpp"
#include "yeto/nn/attention.hpp"

namespace yeto::wan {
namespace {

const char* kClass = "AutoencoderKLWan config";
constexpr std::int64_t kCacheT = 2;

// The last two frames of x (with the previous chunk's last frame in front when x has one).
at::Tensor cache_frames(const at::Tensor& x, const at::Tensor& previous) {
  auto c = x.narrow(2, std::max<std::int64_t>(0, x.size(2) - kCacheT), std::min(kCacheT, x.size(2))).clone();
  if (c.size(2) < 2 && previous.defined()) c = at::cat({previous.narrow(2, previous.size(2) - 1, 1), c}, 2);
  return c;
}

// conv(x) through the cache slot of the next causal convolution.
at::Tensor cached_conv(CausalConv3d& conv, const at::Tensor& x, FeatureCache& cache) {
  const auto i = cache.idx++;
  cache.ensure(i);
  const auto next = cache_frames(x, cache.feat[i]);
  const auto out = conv(x, cache.feat[i]);
  cache.feat[i] = next;
  return out;
}

// Per-frame 2D op on [B, C, T, H, W].
template <typename F>
at::Tensor per_frame(const at::Tensor& x, F&& op) {
  const auto b = x.size(0), t = x.size(2);
  auto y = op(x.permute({0, 2, 1, 3, 4}).reshape({b * t, x.size(1), x.size(3), x.size(4)}));
  return y.view({b, t, y.size(1), y.size(2), y.size(3)}).permute({0, 2, 1, 3, 4});
}

}  // namespace

std::int64_t WanVaeConfig::temporal_factor() const {
  std::int64_t f = 1;
  for (bool d : temperal_downsample)
    if (d) f *= 2;
  return f;
}

std::int64_t WanVaeConfig::spatial_factor() const { return (std::int64_t{1} << (dim_mult.size() - 1)) * patch_size; }

WanVaeConfig WanVaeConfig::from_json(const nlohmann::json& j) {
  const family::ConfigReader in(j, kClass);
  WanVaeConfig c;
  c.base_dim = in.integer("base_dim", c.base_dim);
  c.decoder_base_dim = in.integer("decoder_base_dim", c.base_dim);
  c.z_dim = in.integer("z_dim", c.z_dim);
  c.dim_mult = in.integers("dim_mult", c.dim_mult);
  c.num_res_blocks = in.integer("num_res_blocks", c.num_res_blocks);
  c.attn_scales = in.numbers("attn_scales", {});
  c.temperal_downsample = in.booleans("temperal_downsample", c.temperal_downsample);
  c.latents_mean = in.numbers("latents_mean", {});
  c.latents_std = in.numbers("latents_std", {});
  c.is_residual = in.boolean("is_residual", false);
  c.in_channels = in.integer("in_channels", 3);
  c.out_channels = in.integer("out_channels", 3);
  c.patch_size = in.integer("patch_size", 1);
  if (c.base_dim <= 0 || c.decoder_base_dim <= 0 || c.z_dim <= 0 || c.num_res_blocks <= 0 || c.dim_mult.empty())
    throw std::invalid_argument(std::string(kClass) +
                                ": base_dim, decoder_base_dim, z_dim, num_res_blocks and dim_mult must be positive");
  for (auto m : c.dim_mult)
    if (m <= 0) in.fail("dim_mult", "entries must be positive");
  if (c.patch_size <= 0) in.fail("patch_size", "must be a positive integer or null");
  if (c.in_channels <= 0 || c.out_channels <= 0)
    throw std::invalid_argument(std::string(kClass) + ": 'in_channels' and 'out_channels' must be positive");
  const auto p2 = c.patch_size * c.patch_size;
  if (c.in_channels % p2 != 0) in.fail("in_channels", "must be a multiple of patch_size^2 (the patchified pixels)");
  if (c.out_channels % p2 != 0) in.fail("out_channels", "must be a multiple of patch_size^2 (the patchified pixels)");
  if (c.temperal_downsample.size() + 1 != c.dim_mult.size())
    throw std::invalid_argument(std::string(kClass) + ": 'temperal_downsample' must have len(dim_mult) - 1 = " +
                                std::to_string(c.dim_mult.size() - 1) + " entries");
  if (c.is_residual && !c.attn_scales.empty())
    in.fail("attn_scales", "must be empty with 'is_residual' true (the residual blocks have no attention)");
  // The residual shortcuts fold / repeat channels in whole groups.
  if (c.is_residual) {
    std::vector<std::int64_t> enc = {c.base_dim}, dec = {c.decoder_base_dim * c.dim_mult.back()};
    for (auto m : c.dim_mult) enc.push_back(c.base_dim * m);
    for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) dec.push_back(c.decoder_base_dim * *it);
    for (std::size_t i = 0; i + 1 < enc.size(); ++i) {
      const bool last = i + 1 == c.dim_mult.size();
      const std::int64_t f = (last ? 1 : 4) * (!last && c.temperal_downsample[i] ? 2 : 1);
      if ((enc[i] * f) % enc[i + 1] != 0)
        in.fail("dim_mult", "gives encoder widths " + std::to_string(enc[i]) + " -> " + std::to_string(enc[i + 1]) +
                                " that AvgDown3D cannot average (in x factor must be a multiple of out)");
      const bool tu = !last && c.temperal_downsample[c.temperal_downsample.size() - 1 - i];
      const std::int64_t fu = last ? 0 : 4 * (tu ? 2 : 1);
      if (fu > 0 && (dec[i + 1] * fu) % dec[i] != 0)
        in.fail("decoder_base_dim", "gives decoder widths " + std::to_string(dec[i]) + " -> " +
                                        std::to_string(dec[i + 1]) + " that DupUp3D cannot repeat");
    }
  }
  if (in.present("scale_factor_spatial") && in.integer("scale_factor_spatial", 0) != c.spatial_factor())
    in.fail("scale_factor_spatial", "is " + std::to_string(in.integer("scale_factor_spatial", 0)) +
                                        " but patch_size x 2^(len(dim_mult) - 1) is " +
                                        std::to_string(c.spatial_factor()));
  if (in.present("scale_factor_temporal") && in.integer("scale_factor_temporal", 0) != c.temporal_factor())
    in.fail("scale_factor_temporal", "is " + std::to_string(in.integer("scale_factor_temporal", 0)) +
                                         " but 2^(number of temperal_downsample) is " +
                                         std::to_string(c.temporal_factor()));
  if (c.latents_mean.empty()) c.latents_mean.assign(static_cast<std::size_t>(c.z_dim), 0.0);
  if (c.latents_std.empty()) c.latents_std.assign(static_cast<std::size_t>(c.z_dim), 1.0);
  if (static_cast<std::int64_t>(c.latents_mean.size()) != c.z_dim ||
      static_cast<std::int64_t>(c.latents_std.size()) != c.z_dim)
    throw std::invalid_argument(std::string(kClass) + ": 'latents_mean' and 'latents_std' must have z_dim = " +
                                std::to_string(c.z_dim) + " values");
  for (double s : c.latents_std)
    if (!(s > 0)) throw std::invalid_argument(std::string(kClass) + ": 'latents_std' values must be positive");
  return c;
}

CausalConv3dImpl::CausalConv3dImpl(std::int64_t in, std::int64_t out, std::int64_t kt, std::int64_t ks, std::int64_t st,
                                   std::int64_t pt, std::int64_t ps)
    : stride({st, 1, 1}), padding({pt, ps, ps}) {
  const std::vector<std::int64_t> kernel = {kt, ks, ks};
  weight = register_parameter("weight", at::empty({out, in, kt, ks, ks}));
  bias = register_parameter("bias", at::empty({out}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel[0] * kernel[1] * kernel[2]));
  torch::nn::init::uniform_(bias, -bound, bound);
}

at::Tensor CausalConv3dImpl::forward(const at::Tensor& x_in, const at::Tensor& cache) {
  auto x = x_in;
  std::int64_t front = 2 * padding[0];
  if (cache.defined() && front > 0) {
    x = at::cat({cache.to(x.device(), x.scalar_type()), x}, 2);
    front -= cache.size(2);
  }
  x = at::constant_pad_nd(x, {padding[2], padding[2], padding[1], padding[1], front, 0});
  return at::conv3d(x, weight, bias, stride);
}

WanRMSNormImpl::WanRMSNormImpl(std::int64_t dim, bool images) : scale(std::sqrt(static_cast<double>(dim))) {
  gamma = register_parameter("gamma", images ? at::ones({dim, 1, 1}) : at::ones({dim, 1, 1, 1}));
}

at::Tensor WanRMSNormImpl::forward(const at::Tensor& x) {
  const auto norm = x.norm(2, {1}, true).clamp_min(1e-12);
  return x / norm * scale * gamma;
}

WanResidualBlockImpl::WanResidualBlockImpl(std::int64_t in, std::int64_t out) {
  norm1 = register_module("norm1", WanRMSNorm(in, false));
  conv1 = register_module("conv1", CausalConv3d(in, out, 3, 3, 1, 1, 1));
  norm2 = register_module("norm2", WanRMSNorm(out, false));
  conv2 = register_module("conv2", CausalConv3d(out, out, 3, 3, 1, 1, 1));
  if (in != out) conv_shortcut = register_module("conv_shortcut", CausalConv3d(in, out, 1, 1));
}

at::Tensor WanResidualBlockImpl::forward(const at::Tensor& x_in, FeatureCache& cache) {
  const auto h = conv_shortcut ? conv_shortcut(x_in) : x_in;
  auto x = at::silu(norm1(x_in));
  x = cached_conv(conv1, x, cache);
  x = at::silu(norm2(x));
  x = cached_conv(conv2, x, cache);
  return x + h;
}

WanAttentionBlockImpl::WanAttentionBlockImpl(std::int64_t dim) {
  norm = register_module("norm", WanRMSNorm(dim, true));
  to_qkv = register_module("to_qkv", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim * 3, 1)));
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 1)));
}

at::Tensor WanAttentionBlockImpl::forward(const at::Tensor& x) {
  const auto c = x.size(1);
  const auto y = per_frame(x, [&](const at::Tensor& f) {
    const auto bt = f.size(0), h = f.size(2), w = f.size(3);
    auto qkv = to_qkv(norm(f)).reshape({bt, 1, c * 3, h * w}).permute({0, 1, 3, 2}).contiguous();
    const auto parts = qkv.chunk(3, -1);
    auto o = nn::attention(parts[0], parts[1], parts[2]);  // [bt, 1, hw, c]
    o = o.squeeze(1).permute({0, 2, 1}).reshape({bt, c, h, w});
    return proj(o);
  });
  return y + x;
}

WanResampleImpl::WanResampleImpl(std::int64_t dim, std::string m, std::int64_t upsample_out_dim)
    : mode(std::move(m)) {
  auto resample = register_module("resample", torch::nn::ModuleList());
  resample->push_back(std::make_shared<torch::nn::Module>());  // upsampler / zero pad: no parameters
  const bool up = mode.rfind("upsample", 0) == 0;
  conv = up ? torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, upsample_out_dim > 0 ? upsample_out_dim : dim / 2, 3)
                                  .padding(1))
            : torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 3).stride(2));
  resample->push_back(conv);
  if (mode == "upsample3d")
    time_conv = register_module("time_conv", CausalConv3d(dim, dim * 2, 3, 1, 1, 1, 0));
  else if (mode == "downsample3d")
    time_conv = register_module("time_conv", CausalConv3d(dim, dim, 3, 1, 2, 0, 0));
}

at::Tensor WanResampleImpl::forward(const at::Tensor& x_in, FeatureCache& cache) {
  auto x = x_in;
  const auto b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  if (mode == "upsample3d") {
    const auto i = cache.idx++;
    cache.ensure(i);
    if (!cache.feat[i].defined() && !cache.rep[i]) {
      cache.rep[i] = true;  // the first chunk keeps its single frame
    } else {
      auto next = x.narrow(2, std::max<std::int64_t>(0, t - kCacheT), std::min(kCacheT, t)).clone();
      if (next.size(2) < 2 && !cache.rep[i])
        next = at::cat({cache.feat[i].narrow(2, cache.feat[i].size(2) - 1, 1), next}, 2);
      if (next.size(2) < 2 && cache.rep[i]) next = at::cat({at::zeros_like(next), next}, 2);
      x = cache.rep[i] ? time_conv(x) : time_conv(x, cache.feat[i]);
      cache.feat[i] = next;
      cache.rep[i] = false;
      x = x.reshape({b, 2, c, t, h, w});
      x = at::stack({x.select(1, 0), x.select(1, 1)}, 3).reshape({b, c, t * 2, h, w});
    }
  }
  const bool up = mode.rfind("upsample", 0) == 0;
  x = per_frame(x, [&](const at::Tensor& f) {
    if (up) return conv(at::upsample_nearest2d(f.to(at::kFloat), {f.size(2) * 2, f.size(3) * 2}).to(f.scalar_type()));
    return conv(at::constant_pad_nd(f, {0, 1, 0, 1}));
  });
  if (mode == "downsample3d") {
    const auto i = cache.idx++;
    cache.ensure(i);
    if (!cache.feat[i].defined()) {
      cache.feat[i] = x.clone();
    } else {
      const auto next = x.narrow(2, x.size(2) - 1, 1).clone();
      x = time_conv(at::cat({cache.feat[i].narrow(2, cache.feat[i].size(2) - 1, 1), x}, 2));
      cache.feat[i] = next;
    }
  }
  return x;
}

WanMidBlockImpl::WanMidBlockImpl(std::int64_t dim) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  attentions = register_module("attentions", torch::nn::ModuleList());
  resnets->push_back(WanResidualBlock(dim, dim));
  attentions->push_back(WanAttentionBlock(dim));
  resnets->push_back(WanResidualBlock(dim, dim));
}

at::Tensor WanMidBlockImpl::forward(const at::Tensor& x_in, FeatureCache& cache) {
  auto x = resnets[0]->as<WanResidualBlockImpl>()->forward(x_in, cache);
  for (std::size_t i = 0; i < attentions->size(); ++i) {
    x = attentions[i]->as<WanAttentionBlockImpl>()->forward(x);
    x = resnets[i + 1]->as<WanResidualBlockImpl>()->forward(x, cache);
  }
  return x;
}

namespace {

// AvgDown3D: front zero-pad of time to a multiple of ft, (t, h, w) offsets folded into channels
// (c * f + (t_off * fs + h_off) * fs + w_off), then the mean of groups of in * f / out channels.
at::Tensor avg_down_3d(const at::Tensor& x_in, std::int64_t out, std::int64_t ft, std::int64_t fs) {
  const auto pad_t = (ft - x_in.size(2) % ft) % ft;
  const auto x = pad_t > 0 ? at::constant_pad_nd(x_in, {0, 0, 0, 0, pad_t, 0}) : x_in;
  const auto b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  const auto f = ft * fs * fs;
  auto y = x.reshape({b, c, t / ft, ft, h / fs, fs, w / fs, fs}).permute({0, 1, 3, 5, 7, 2, 4, 6});
  y = y.reshape({b, out, c * f / out, t / ft, h / fs, w / fs});
  return y.mean(2);
}

// DupUp3D: channels repeated out * f / in times (each in turn), unfolded into (t, h, w) offsets;
// the first chunk drops its first ft - 1 frames.
at::Tensor dup_up_3d(const at::Tensor& x_in, std::int64_t out, std::int64_t ft, std::int64_t fs, bool first_chunk) {
  const auto f = ft * fs * fs;
  const auto x = x_in.repeat_interleave(out * f / x_in.size(1), 1);
  const auto b = x.size(0), t = x.size(2), h = x.size(3), w = x.size(4);
  auto y = x.reshape({b, out, ft, fs, fs, t, h, w}).permute({0, 1, 5, 2, 6, 3, 7, 4});
  y = y.reshape({b, out, t * ft, h * fs, w * fs});
  if (first_chunk && ft > 1) y = y.narrow(2, ft - 1, y.size(2) - (ft - 1));
  return y;
}

}  // namespace

at::Tensor wan_patchify(const at::Tensor& x, std::int64_t p) {
  if (p == 1) return x;
  const auto b = x.size(0), c = x.size(1), f = x.size(2), h = x.size(3), w = x.size(4);
  if (x.dim() != 5 || h % p != 0 || w % p != 0)
    throw std::invalid_argument("patchify: expected [B, C, T, H, W] with H and W multiples of " + std::to_string(p) +
                                ", got " + c10::str(x.sizes()));
  return x.reshape({b, c, f, h / p, p, w / p, p}).permute({0, 1, 6, 4, 2, 3, 5}).reshape({b, c * p * p, f, h / p, w / p});
}

at::Tensor wan_unpatchify(const at::Tensor& x, std::int64_t p) {
  if (p == 1) return x;
  const auto b = x.size(0), c = x.size(1) / (p * p), f = x.size(2), h = x.size(3), w = x.size(4);
  return x.reshape({b, c, p, p, f, h, w}).permute({0, 1, 4, 5, 3, 6, 2}).reshape({b, c, f, h * p, w * p});
}

WanResidualDownBlockImpl::WanResidualDownBlockImpl(std::int64_t in, std::int64_t out, std::int64_t num_res_blocks,
                                                   bool temporal, bool down)
    : in_dim(in), out_dim(out), factor_t(temporal ? 2 : 1), factor_s(down ? 2 : 1) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t r = 0; r < num_res_blocks; ++r) resnets->push_back(WanResidualBlock(r == 0 ? in : out, out));
  if (down) downsampler = register_module("downsampler", WanResample(out, temporal ? "downsample3d" : "downsample2d"));
}

at::Tensor WanResidualDownBlockImpl::forward(const at::Tensor& x_in, FeatureCache& cache) {
  auto x = x_in;
  for (const auto& r : *resnets) x = r->as<WanResidualBlockImpl>()->forward(x, cache);
  if (downsampler) x = downsampler(x, cache);
  return x + avg_down_3d(x_in, out_dim, factor_t, factor_s);
}

WanResidualUpBlockImpl::WanResidualUpBlockImpl(std::int64_t in, std::int64_t out, std::int64_t num_res_blocks,
                                               bool temporal, bool up)
    : in_dim(in), out_dim(out), factor_t(temporal ? 2 : 1), factor_s(up ? 2 : 1) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t r = 0; r < num_res_blocks + 1; ++r) resnets->push_back(WanResidualBlock(r == 0 ? in : out, out));
  if (up) upsampler = register_module("upsampler", WanResample(out, temporal ? "upsample3d" : "upsample2d", out));
}

at::Tensor WanResidualUpBlockImpl::forward(const at::Tensor& x_in, FeatureCache& cache, bool first_chunk) {
  auto x = x_in;
  for (const auto& r : *resnets) x = r->as<WanResidualBlockImpl>()->forward(x, cache);
  if (!upsampler) return x;
  x = upsampler(x, cache);
  return x + dup_up_3d(x_in, out_dim, factor_t, factor_s, first_chunk);
}

WanEncoder3dImpl::WanEncoder3dImpl(const WanVaeConfig& c) {
  std::vector<std::int64_t> dims = {c.base_dim};
  for (auto m : c.dim_mult) dims.push_back(c.base_dim * m);
  conv_in = register_module("conv_in", CausalConv3d(c.in_channels, dims[0], 3, 3, 1, 1, 1));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  double scale = 1.0;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    if (c.is_residual) {
      const bool last = i + 1 == c.dim_mult.size();
      down_blocks->push_back(
          WanResidualDownBlock(dims[i], dims[i + 1], c.num_res_blocks, !last && c.temperal_downsample[i], !last));
      continue;
    }
    auto in = dims[i];
    const auto out = dims[i + 1];
    for (std::int64_t r = 0; r < c.num_res_blocks; ++r) {
      down_blocks->push_back(WanResidualBlock(in, out));
      for (double s : c.attn_scales)
        if (s == scale) down_blocks->push_back(WanAttentionBlock(out));
      in = out;
    }
    if (i + 1 != c.dim_mult.size()) {
      down_blocks->push_back(WanResample(out, c.temperal_downsample[i] ? "downsample3d" : "downsample2d"));
      scale /= 2.0;
    }
  }
  mid_block = register_module("mid_block", WanMidBlock(dims.back()));
  norm_out = register_module("norm_out", WanRMSNorm(dims.back(), false));
  conv_out = register_module("conv_out", CausalConv3d(dims.back(), c.z_dim * 2, 3, 3, 1, 1, 1));
}

at::Tensor WanEncoder3dImpl::forward(const at::Tensor& x_in, FeatureCache& cache) {
  auto x = cached_conv(conv_in, x_in, cache);
  for (const auto& layer : *down_blocks) {
    if (auto* r = layer->as<WanResidualBlockImpl>()) x = r->forward(x, cache);
    else if (auto* d = layer->as<WanResidualDownBlockImpl>()) x = d->forward(x, cache);
    else if (auto* a = layer->as<WanAttentionBlockImpl>()) x = a->forward(x);
    else x = layer->as<WanResampleImpl>()->forward(x, cache);
  }
  x = mid_block(x, cache);
  x = at::silu(norm_out(x));
  return cached_conv(conv_out, x, cache);
}

WanDecoder3dImpl::WanDecoder3dImpl(const WanVaeConfig& c) {
  std::vector<std::int64_t> dims = {c.decoder_base_dim * c.dim_mult.back()};
  for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it) dims.push_back(c.decoder_base_dim * *it);
  std::vector<bool> temperal_upsample(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
  conv_in = register_module("conv_in", CausalConv3d(c.z_dim, dims[0], 3, 3, 1, 1, 1));
  mid_block = register_module("mid_block", WanMidBlock(dims[0]));
  up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    if (c.is_residual) {
      const bool up = i + 1 != c.dim_mult.size();
      up_blocks->push_back(WanResidualUpBlock(dims[i], dims[i + 1], c.num_res_blocks, up && temperal_upsample[i], up));
      continue;
    }
    auto in = i > 0 ? dims[i] / 2 : dims[i];
    const auto out = dims[i + 1];
    auto block = std::make_shared<torch::nn::Module>();
    auto resnets = block->register_module("resnets", torch::nn::ModuleList());
    for (std::int64_t r = 0; r < c.num_res_blocks + 1; ++r) {
      resnets->push_back(WanResidualBlock(in, out));
      in = out;
    }
    if (i + 1 != c.dim_mult.size()) {
      auto ups = block->register_module("upsamplers", torch::nn::ModuleList());
      ups->push_back(WanResample(out, temperal_upsample[i] ? "upsample3d" : "upsample2d"));
    }
    up_blocks->push_back(block);
  }
  norm_out = register_module("norm_out", WanRMSNorm(dims.back(), false));
  conv_out = register_module("conv_out",
                             CausalConv3d(dims.back(), c.out_channels, 3, 3, 1, 1, 1));
}

at::Tensor WanDecoder3dImpl::forward(const at::Tensor& x_in, FeatureCache& cache, bool first_chunk) {
  auto x = cached_conv(conv_in, x_in, cache);
  x = mid_block(x, cache);
  for (const auto& block : *up_blocks) {
    if (auto* r = block->as<WanResidualUpBlockImpl>()) {
      x = r->forward(x, cache, first_chunk);
      continue;
    }
    for (const auto& child : block->named_children()) {
      auto list = std::dynamic_pointer_cast<torch::nn::ModuleListImpl>(child.value());
      if (child.key() == "resnets")
        for (const auto& r : *list) x = r->as<WanResidualBlockImpl>()->forward(x, cache);
    }
    for (const auto& child : block->named_children()) {
      auto list = std::dynamic_pointer_cast<torch::nn::ModuleListImpl>(child.value());
      if (child.key() == "upsamplers") x = list->at<WanResampleImpl>(0).forward(x, cache);
    }
  }
  x = at::silu(norm_out(x));
  return cached_conv(conv_out, x, cache);
}

AutoencoderKLWanImpl::AutoencoderKLWanImpl(const WanVaeConfig& config) : config_(config) {
  encoder = register_module("encoder", WanEncoder3d(config));
  quant_conv = register_module("quant_conv", CausalConv3d(config.z_dim * 2, config.z_dim * 2, 1, 1));
  post_quant_conv = register_module("post_quant_conv", CausalConv3d(config.z_dim, config.z_dim, 1, 1));
  decoder = register_module("decoder", WanDecoder3d(config));
}

WanLatentDist AutoencoderKLWanImpl::encode(const at::Tensor& x_in, at::Tensor* patchified) {
  const auto x = x_in.dim() == 4 ? x_in.unsqueeze(2) : x_in;
  const auto pixel_channels = config_.in_channels / (config_.patch_size * config_.patch_size);
  if (x.dim() != 5 || x.size(1) != pixel_channels)
    throw std::invalid_argument("AutoencoderKLWan encode: expected [B, " + std::to_string(pixel_channels) +
                                ", T, H, W], got " + c10::str(x_in.sizes()));
  const auto sf = config_.spatial_factor();
  if (x.size(3) % sf != 0 || x.size(4) % sf != 0)
    throw std::invalid_argument("AutoencoderKLWan encode: height and width must be multiples of " +
                                std::to_string(sf) + ", got " + c10::str(x.sizes()));
  const auto dtype = quant_conv->weight.scalar_type();
  const auto p = wan_patchify(x.to(dtype), config_.patch_size);
  if (patchified) *patchified = p;
  const auto t = p.size(2);
  const auto tf = config_.temporal_factor();
  FeatureCache cache;
  std::vector<at::Tensor> chunks;
  for (std::int64_t i = 0; i < 1 + (t - 1) / tf; ++i) {
    cache.idx = 0;
    const auto start = i == 0 ? 0 : 1 + tf * (i - 1);
    const auto len = i == 0 ? 1 : std::min(tf, t - start);
    chunks.push_back(encoder(p.narrow(2, start, len), cache));
  }
  const auto enc = quant_conv(at::cat(chunks, 2));
  return {enc.narrow(1, 0, config_.z_dim), enc.narrow(1, config_.z_dim, config_.z_dim).clamp(-30.0, 20.0)};
}

at::Tensor AutoencoderKLWanImpl::decode(const at::Tensor& z_in, at::Tensor* decoder_output) {
  if (z_in.dim() != 5 || z_in.size(1) != config_.z_dim)
    throw std::invalid_argument("AutoencoderKLWan decode: expected latents [B, " + std::to_string(config_.z_dim) +
                                ", t, h, w], got " + c10::str(z_in.sizes()));
  const auto x = post_quant_conv(z_in.to(post_quant_conv->weight.scalar_type()));
  FeatureCache cache;
  std::vector<at::Tensor> frames;
  for (std::int64_t i = 0; i < x.size(2); ++i) {
    cache.idx = 0;
    frames.push_back(decoder(x.narrow(2, i, 1), cache, i == 0));
  }
  const auto out = at::cat(frames, 2);
  if (decoder_output) *decoder_output = out;
  return wan_unpatchify(out, config_.patch_size).clamp(-1.0, 1.0);
}

namespace {

// residual.<k> / shortcut inside one resnet -> its Diffusers member.
std::string resnet_member(const std::string& rest) {
  static const std::vector<std::pair<std::string, std::string>> members = {
      {"residual.0.", "norm1."}, {"residual.2.", "conv1."}, {"residual.3.", "norm2."},
      {"residual.6.", "conv2."}, {"shortcut.", "conv_shortcut."}};
  for (const auto& [from, to] : members)
    if (rest.rfind(from, 0) == 0) return to + rest.substr(from.size());
  return rest;
}

}  // namespace

std::string wan22_vae_diffusers_name(const std::string& key) {
  static const std::regex top(R"(^conv([12])\.(weight|bias)$)");
  static const std::regex conv_in(R"(^(encoder|decoder)\.conv1\.(.*)$)");
  static const std::regex middle(R"(^(encoder|decoder)\.middle\.([0-2])\.(.*)$)");
  static const std::regex head(R"(^(encoder|decoder)\.head\.([02])\.(.*)$)");
  static const std::regex level(R"(^(encoder\.downsamples|decoder\.upsamples)\.(\d+)\.(downsamples|upsamples)\.(\d+)\.(.*)$)");
  std::smatch m;
  if (std::regex_match(key, m, top)) return std::string(m[1] == "1" ? "quant_conv." : "post_quant_conv.") + m[2].str();
  if (std::regex_match(key, m, conv_in)) return m[1].str() + ".conv_in." + m[2].str();
  if (std::regex_match(key, m, middle)) {
    const auto part = m[1].str() + ".mid_block.";
    if (m[2] == "1") return part + "attentions.0." + m[3].str();
    return part + "resnets." + (m[2] == "0" ? "0." : "1.") + resnet_member(m[3].str());
  }
  if (std::regex_match(key, m, head)) return m[1].str() + (m[2] == "0" ? ".norm_out." : ".conv_out.") + m[3].str();
  if (std::regex_match(key, m, level)) {
    const bool enc = m[1].str().rfind("encoder", 0) == 0;
    const auto rest = m[5].str();
    const auto block = std::string(enc ? "encoder.down_blocks." : "decoder.up_blocks.") + m[2].str() + ".";
    if (rest.rfind("resample.", 0) == 0 || rest.rfind("time_conv.", 0) == 0)
      return block + (enc ? "downsampler." : "upsampler.") + rest;
    return block + "resnets." + m[4].str() + "." + resnet_member(rest);
  }
  return key;
}

}  // namespace yeto::wan
