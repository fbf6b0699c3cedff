#include "ltx_vae.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "yeto/family/config.hpp"

namespace yeto::ltx {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("AutoencoderKLLTXVideo config: " + what); }

template <typename T>
std::vector<T> reversed(std::vector<T> v) {
  std::reverse(v.begin(), v.end());
  return v;
}

// RMS norm over the channel dimension of [B, C, ...] (eps 1e-8, no weight), as the VAE applies
// Diffusers' RMSNorm after movedim(1, -1).
at::Tensor channel_rms(const at::Tensor& x) { return nn::rms_norm(x.movedim(1, -1), {}, 1e-8).movedim(-1, 1); }

// [B, C*8/s..., F, H, W] -> 2x2x2 depth-to-space, first frame dropped (Diffusers' upsampler layout).
at::Tensor depth_to_space(const at::Tensor& x, std::int64_t b, std::int64_t f, std::int64_t h, std::int64_t w) {
  return x.reshape({b, -1, 2, 2, 2, f, h, w})
      .permute({0, 1, 5, 2, 6, 3, 7, 4})
      .flatten(6, 7)
      .flatten(4, 5)
      .flatten(2, 3)
      .slice(2, 1);
}

}  // namespace

std::int64_t LtxVaeConfig::spatial_ratio() const {
  if (spatial_compression_ratio > 0) return spatial_compression_ratio;
  const auto n = std::count(spatio_temporal_scaling.begin(), spatio_temporal_scaling.end(), true);
  return patch_size * (std::int64_t{1} << n);
}

std::int64_t LtxVaeConfig::temporal_ratio() const {
  if (temporal_compression_ratio > 0) return temporal_compression_ratio;
  const auto n = std::count(spatio_temporal_scaling.begin(), spatio_temporal_scaling.end(), true);
  return patch_size_t * (std::int64_t{1} << n);
}

LtxVaeConfig LtxVaeConfig::from_json(const json& j) {
  const family::ConfigReader in(j, "AutoencoderKLLTXVideo config");
  LtxVaeConfig c;
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.out_channels = in.integer("out_channels", c.out_channels);
  c.latent_channels = in.integer("latent_channels", c.latent_channels);
  c.block_out_channels = in.integers("block_out_channels", c.block_out_channels);
  c.down_block_types = in.strings("down_block_types", c.down_block_types);
  c.decoder_block_out_channels = in.integers("decoder_block_out_channels", c.decoder_block_out_channels);
  c.layers_per_block = in.integers("layers_per_block", c.layers_per_block);
  c.decoder_layers_per_block = in.integers("decoder_layers_per_block", c.decoder_layers_per_block);
  c.spatio_temporal_scaling = in.booleans("spatio_temporal_scaling", c.spatio_temporal_scaling);
  c.decoder_spatio_temporal_scaling = in.booleans("decoder_spatio_temporal_scaling", c.decoder_spatio_temporal_scaling);
  c.decoder_inject_noise = in.booleans("decoder_inject_noise", c.decoder_inject_noise);
  c.downsample_type = in.strings("downsample_type", c.downsample_type);
  c.upsample_residual = in.booleans("upsample_residual", c.upsample_residual);
  c.upsample_factor = in.integers("upsample_factor", c.upsample_factor);
  c.timestep_conditioning = in.boolean("timestep_conditioning", c.timestep_conditioning);
  c.patch_size = in.integer("patch_size", c.patch_size);
  c.patch_size_t = in.integer("patch_size_t", c.patch_size_t);
  c.resnet_norm_eps = in.number("resnet_norm_eps", c.resnet_norm_eps);
  c.scaling_factor = in.number("scaling_factor", c.scaling_factor);
  c.encoder_causal = in.boolean("encoder_causal", c.encoder_causal);
  c.decoder_causal = in.boolean("decoder_causal", c.decoder_causal);
  c.spatial_compression_ratio = in.integer("spatial_compression_ratio", 0);
  c.temporal_compression_ratio = in.integer("temporal_compression_ratio", 0);

  for (const auto* k : {"in_channels", "out_channels", "latent_channels", "patch_size", "patch_size_t"})
    if (in.integer(k, 1) <= 0) bad(std::string("'") + k + "' must be positive");
  if (c.latent_channels < 2) bad("'latent_channels' must be at least 2");
  const auto n = c.block_out_channels.size();
  const auto nd = c.decoder_block_out_channels.size();
  if (n == 0 || nd == 0) bad("'block_out_channels' and 'decoder_block_out_channels' must not be empty");
  auto need = [&](const char* key, std::size_t have, std::size_t want) {
    if (have < want)
      bad(std::string("'") + key + "' has " + std::to_string(have) + " entries, at least " + std::to_string(want) +
          " are needed for the block counts");
  };
  need("down_block_types", c.down_block_types.size(), n);
  need("layers_per_block", c.layers_per_block.size(), n);
  need("spatio_temporal_scaling", c.spatio_temporal_scaling.size(), n);
  need("decoder_layers_per_block", c.decoder_layers_per_block.size(), nd + 1);
  need("decoder_spatio_temporal_scaling", c.decoder_spatio_temporal_scaling.size(), nd);
  need("decoder_inject_noise", c.decoder_inject_noise.size(), nd + 1);
  need("upsample_residual", c.upsample_residual.size(), nd);
  need("upsample_factor", c.upsample_factor.size(), nd);
  for (std::size_t i = 0; i < n; ++i)
    if (c.down_block_types[i] != "LTXVideoDownBlock3D")
      bad("down_block_types[" + std::to_string(i) + "] is " + c.down_block_types[i] +
          "; only LTXVideoDownBlock3D (LTX-Video 0.9.0/0.9.1) is implemented");
  for (const auto v : c.block_out_channels)
    if (v <= 0) bad("'block_out_channels' entries must be positive");
  for (const auto v : c.decoder_block_out_channels)
    if (v <= 0) bad("'decoder_block_out_channels' entries must be positive");
  for (const auto v : c.upsample_factor)
    if (v <= 0 || 8 % v != 0) bad("'upsample_factor' entries must divide 8");
  return c;
}

CausalConv3dImpl::CausalConv3dImpl(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride, bool c)
    : kernel(k), causal(c) {
  conv = register_module("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, k).stride(stride).padding(
                                      std::vector<std::int64_t>{0, k / 2, k / 2})));
}

at::Tensor CausalConv3dImpl::forward(const at::Tensor& x) {
  at::Tensor padded;
  if (causal) {
    padded = kernel > 1 ? at::cat({x.slice(2, 0, 1).repeat({1, 1, kernel - 1, 1, 1}), x}, 2) : x;
  } else {
    const auto side = (kernel - 1) / 2;
    padded = side > 0 ? at::cat({x.slice(2, 0, 1).repeat({1, 1, side, 1, 1}), x,
                                 x.slice(2, x.size(2) - 1).repeat({1, 1, side, 1, 1})},
                                2)
                      : x;
  }
  return conv(padded);
}

LtxResnetBlockImpl::LtxResnetBlockImpl(std::int64_t in, std::int64_t out, double eps, bool causal, bool inject_noise,
                                       bool tc) {
  norm1 = register_module("norm1", nn::RMSNorm(in, 1e-8, false));
  conv1 = register_module("conv1", CausalConv3d(in, out, 3, 1, causal));
  norm2 = register_module("norm2", nn::RMSNorm(out, 1e-8, false));
  conv2 = register_module("conv2", CausalConv3d(out, out, 3, 1, causal));
  if (in != out) {
    norm3 = register_module("norm3", nn::LayerNorm(in, eps, true, true));
    conv_shortcut = register_module("conv_shortcut", CausalConv3d(in, out, 1, 1, causal));
  }
  if (inject_noise) {
    per_channel_scale1 = register_parameter("per_channel_scale1", at::zeros({in, 1, 1}));
    per_channel_scale2 = register_parameter("per_channel_scale2", at::zeros({in, 1, 1}));
  }
  if (tc) scale_shift_table = register_parameter("scale_shift_table", at::randn({4, in}) / std::sqrt(double(in)));
}

at::Tensor LtxResnetBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb) {
  auto h = channel_rms(x);
  std::vector<at::Tensor> ss;
  if (scale_shift_table.defined()) {
    if (!temb.defined() || temb.dim() != 5)
      throw std::invalid_argument("AutoencoderKLLTXVideo: a timestep-conditioned resnet block needs the embedded "
                                  "decode timestep [B, 4C, 1, 1, 1]");
    ss = (temb.unflatten(1, {4, -1}) + scale_shift_table.view({1, 4, -1, 1, 1, 1})).unbind(1);
    h = h * (1 + ss[1]) + ss[0];
  }
  h = conv1(at::silu(h));
  if (per_channel_scale1.defined()) {
    const auto noise = at::randn({h.size(-2), h.size(-1)}, h.options()).unsqueeze(0);
    h = h + (noise * per_channel_scale1).unsqueeze(0).unsqueeze(2);
  }
  h = channel_rms(h);
  if (!ss.empty()) h = h * (1 + ss[3]) + ss[2];
  h = conv2(at::silu(h));
  if (per_channel_scale2.defined()) {
    const auto noise = at::randn({h.size(-2), h.size(-1)}, h.options()).unsqueeze(0);
    h = h + (noise * per_channel_scale2).unsqueeze(0).unsqueeze(2);
  }
  auto in = x;
  if (norm3) in = norm3(in.movedim(1, -1)).movedim(-1, 1);
  if (conv_shortcut) in = conv_shortcut(in);
  return h + in;
}

LtxUpsamplerImpl::LtxUpsamplerImpl(std::int64_t in, bool causal, bool r, std::int64_t f)
    : residual(r), upscale_factor(f) {
  conv = register_module("conv", CausalConv3d(in, in * 8 / f, 3, 1, causal));
}

at::Tensor LtxUpsamplerImpl::forward(const at::Tensor& x) {
  const auto b = x.size(0), f = x.size(2), h = x.size(3), w = x.size(4);
  at::Tensor res;
  if (residual) res = depth_to_space(x, b, f, h, w).repeat({1, 8 / upscale_factor, 1, 1, 1});
  auto out = depth_to_space(conv(x), b, f, h, w);
  return residual ? out + res : out;
}

LtxDownBlockImpl::LtxDownBlockImpl(std::int64_t in, std::int64_t out, std::int64_t layers, double eps, bool scale,
                                   bool causal) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < layers; ++i) resnets->push_back(LtxResnetBlock(in, in, eps, causal, false, false));
  if (scale) {
    downsamplers = register_module("downsamplers", torch::nn::ModuleList());
    downsamplers->push_back(CausalConv3d(in, in, 3, 2, causal));
  }
  if (in != out) conv_out = register_module("conv_out", LtxResnetBlock(in, out, eps, causal, false, false));
}

at::Tensor LtxDownBlockImpl::forward(at::Tensor x) {
  for (const auto& r : *resnets) x = r->as<LtxResnetBlockImpl>()->forward(x);
  if (downsamplers)
    for (const auto& d : *downsamplers) x = d->as<CausalConv3dImpl>()->forward(x);
  if (conv_out) x = conv_out(x);
  return x;
}

LtxMidBlockImpl::LtxMidBlockImpl(std::int64_t channels, std::int64_t layers, double eps, bool causal, bool noise,
                                 bool tc) {
  if (tc) time_embedder = register_module("time_embedder", LtxTimestepEmbeddings(channels * 4));
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < layers; ++i)
    resnets->push_back(LtxResnetBlock(channels, channels, eps, causal, noise, tc));
}

at::Tensor LtxMidBlockImpl::forward(at::Tensor x, const at::Tensor& temb) {
  at::Tensor t = temb;
  if (time_embedder) t = time_embedder(temb.flatten(), x.scalar_type()).view({x.size(0), -1, 1, 1, 1});
  for (const auto& r : *resnets) x = r->as<LtxResnetBlockImpl>()->forward(x, t);
  return x;
}

LtxUpBlockImpl::LtxUpBlockImpl(std::int64_t in, std::int64_t out, std::int64_t layers, double eps, bool scale,
                               bool causal, bool noise, bool tc, bool residual, std::int64_t upscale_factor) {
  if (tc) time_embedder = register_module("time_embedder", LtxTimestepEmbeddings(in * 4));
  if (in != out) conv_in = register_module("conv_in", LtxResnetBlock(in, out, eps, causal, noise, tc));
  if (scale) {
    upsamplers = register_module("upsamplers", torch::nn::ModuleList());
    upsamplers->push_back(LtxUpsampler(out * upscale_factor, causal, residual, upscale_factor));
  }
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < layers; ++i) resnets->push_back(LtxResnetBlock(out, out, eps, causal, noise, tc));
}

at::Tensor LtxUpBlockImpl::forward(at::Tensor x, const at::Tensor& temb) {
  // As upstream: conv_in sees the raw decode timestep, the resnets the embedded one.
  if (conv_in) x = conv_in(x, temb);
  at::Tensor t = temb;
  if (time_embedder) t = time_embedder(temb.flatten(), x.scalar_type()).view({x.size(0), -1, 1, 1, 1});
  if (upsamplers)
    for (const auto& u : *upsamplers) x = u->as<LtxUpsamplerImpl>()->forward(x);
  for (const auto& r : *resnets) x = r->as<LtxResnetBlockImpl>()->forward(x, t);
  return x;
}

LtxEncoderImpl::LtxEncoderImpl(const LtxVaeConfig& c) : patch_size(c.patch_size), patch_size_t(c.patch_size_t) {
  const auto& ch = c.block_out_channels;
  const auto n = ch.size();
  std::int64_t out = ch[0];
  conv_in = register_module("conv_in", CausalConv3d(c.in_channels * c.patch_size * c.patch_size, out,
                                                    3, 1, c.encoder_causal));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (std::size_t i = 0; i < n; ++i) {
    const auto in = out;
    out = i + 1 < n ? ch[i + 1] : ch[i];
    down_blocks->push_back(LtxDownBlock(in, out, c.layers_per_block[i], c.resnet_norm_eps,
                                        c.spatio_temporal_scaling[i], c.encoder_causal));
  }
  mid_block = register_module("mid_block", LtxMidBlock(out, c.layers_per_block.back(), c.resnet_norm_eps,
                                                       c.encoder_causal, false, false));
  conv_out = register_module("conv_out", CausalConv3d(out, c.latent_channels + 1, 3, 1, c.encoder_causal));
}

at::Tensor LtxEncoderImpl::forward(const at::Tensor& x) {
  const auto p = patch_size, pt = patch_size_t;
  const auto b = x.size(0), c = x.size(1), f = x.size(2), h = x.size(3), w = x.size(4);
  auto y = x.reshape({b, c, f / pt, pt, h / p, p, w / p, p}).permute({0, 1, 3, 7, 5, 2, 4, 6}).flatten(1, 4);
  y = conv_in(y);
  for (const auto& d : *down_blocks) y = d->as<LtxDownBlockImpl>()->forward(y);
  y = mid_block(y);
  y = conv_out(at::silu(channel_rms(y)));
  const auto last = y.slice(1, y.size(1) - 1).repeat({1, y.size(1) - 2, 1, 1, 1});
  return at::cat({y, last}, 1);
}

LtxDecoderImpl::LtxDecoderImpl(const LtxVaeConfig& c) : patch_size(c.patch_size), patch_size_t(c.patch_size_t) {
  const auto ch = reversed(c.decoder_block_out_channels);
  const auto scaling = reversed(c.decoder_spatio_temporal_scaling);
  const auto layers = reversed(c.decoder_layers_per_block);
  const auto noise = reversed(c.decoder_inject_noise);
  const auto residual = reversed(c.upsample_residual);
  const auto factor = reversed(c.upsample_factor);
  const bool tc = c.timestep_conditioning;
  std::int64_t out = ch[0];
  conv_in = register_module("conv_in", CausalConv3d(c.latent_channels, out, 3, 1, c.decoder_causal));
  mid_block = register_module("mid_block", LtxMidBlock(out, layers[0], c.resnet_norm_eps, c.decoder_causal, noise[0], tc));
  up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  for (std::size_t i = 0; i < ch.size(); ++i) {
    const auto in = out / factor[i];
    out = ch[i] / factor[i];
    up_blocks->push_back(LtxUpBlock(in, out, layers[i + 1], c.resnet_norm_eps, scaling[i], c.decoder_causal,
                                    noise[i + 1], tc, residual[i], factor[i]));
  }
  conv_out = register_module("conv_out", CausalConv3d(out, c.out_channels * c.patch_size * c.patch_size, 3, 1,
                                                      c.decoder_causal));
  if (tc) {
    timestep_scale_multiplier = register_parameter("timestep_scale_multiplier", at::scalar_tensor(1000.0));
    time_embedder = register_module("time_embedder", LtxTimestepEmbeddings(out * 2));
    scale_shift_table = register_parameter("scale_shift_table", at::randn({2, out}) / std::sqrt(double(out)));
  }
}

at::Tensor LtxDecoderImpl::forward(const at::Tensor& z, const at::Tensor& temb) {
  if (time_embedder && !temb.defined())
    throw std::invalid_argument("AutoencoderKLLTXVideo: this decoder is timestep-conditioned; decode needs 'temb' "
                                "(the decode timestep per batch element)");
  auto h = conv_in(z);
  at::Tensor t = temb;
  if (timestep_scale_multiplier.defined()) t = t * timestep_scale_multiplier;
  h = mid_block(h, t);
  for (const auto& u : *up_blocks) h = u->as<LtxUpBlockImpl>()->forward(h, t);
  h = channel_rms(h);
  if (time_embedder) {
    const auto e = time_embedder(t.flatten(), h.scalar_type()).view({h.size(0), -1, 1, 1, 1}).unflatten(1, {2, -1});
    const auto ss = (e + scale_shift_table.view({1, 2, -1, 1, 1, 1})).unbind(1);
    h = h * (1 + ss[1]) + ss[0];
  }
  h = conv_out(at::silu(h));
  const auto p = patch_size, pt = patch_size_t;
  const auto b = h.size(0), f = h.size(2), hh = h.size(3), w = h.size(4);
  return h.reshape({b, -1, pt, p, p, f, hh, w})
      .permute({0, 1, 5, 2, 6, 4, 7, 3})
      .flatten(6, 7)
      .flatten(4, 5)
      .flatten(2, 3);
}

AutoencoderKLLTXVideoImpl::AutoencoderKLLTXVideoImpl(const LtxVaeConfig& c) : config_(c) {
  encoder = register_module("encoder", LtxEncoder(c));
  decoder = register_module("decoder", LtxDecoder(c));
  latents_mean = register_buffer("latents_mean", at::zeros({c.latent_channels}));
  latents_std = register_buffer("latents_std", at::ones({c.latent_channels}));
}

LtxLatentDist AutoencoderKLLTXVideoImpl::encode(const at::Tensor& x) {
  const auto p = config_.patch_size, pt = config_.patch_size_t;
  if (x.dim() != 5 || x.size(1) != config_.in_channels || x.size(3) % p != 0 || x.size(4) % p != 0 ||
      x.size(2) % pt != 0)
    throw std::invalid_argument("AutoencoderKLLTXVideo.encode: expected a video [B, " +
                                std::to_string(config_.in_channels) + ", F, H, W] with H and W divisible by " +
                                std::to_string(p) + ", got " + c10::str(x.sizes()));
  const auto moments = encoder(x);
  const auto parts = moments.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30.0, 20.0)};
}

at::Tensor AutoencoderKLLTXVideoImpl::decode(const at::Tensor& z, const at::Tensor& temb) {
  if (z.dim() != 5 || z.size(1) != config_.latent_channels)
    throw std::invalid_argument("AutoencoderKLLTXVideo.decode: expected latents [B, " +
                                std::to_string(config_.latent_channels) + ", F, H, W], got " + c10::str(z.sizes()));
  return decoder(z, temb);
}

}  // namespace yeto::ltx
