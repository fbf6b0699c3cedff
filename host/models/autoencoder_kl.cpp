#include "models/autoencoder_kl.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <torch/nn/functional.h>

#include "core/error.hpp"
#include "models/config_json.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::models {

namespace {

constexpr double kResnetEps = 1e-6;  // Diffusers' Encoder/Decoder pass resnet_eps=1e-6

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride = 1,
                       std::int64_t pad = 0) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad));
}

torch::nn::GroupNorm group_norm(std::int64_t groups, std::int64_t channels, double eps) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(eps));
}

}  // namespace

// ---- blocks ------------------------------------------------------------------------------------

ResnetBlock2DImpl::ResnetBlock2DImpl(std::int64_t in, std::int64_t out, std::int64_t groups, double eps,
                                     nn::Activation a)
    : act(a) {
  norm1 = register_module("norm1", group_norm(groups, in, eps));
  conv1 = register_module("conv1", conv(in, out, 3, 1, 1));
  norm2 = register_module("norm2", group_norm(groups, out, eps));
  conv2 = register_module("conv2", conv(out, out, 3, 1, 1));
  if (in != out) conv_shortcut = register_module("conv_shortcut", conv(in, out, 1));
}

at::Tensor ResnetBlock2DImpl::forward(const at::Tensor& x) {
  auto h = conv1(nn::apply_activation(act, nn::group_norm(norm1, x)));
  h = conv2(nn::apply_activation(act, nn::group_norm(norm2, h)));
  const auto skip = conv_shortcut ? conv_shortcut(x) : x;
  return skip + h;
}

Downsample2DImpl::Downsample2DImpl(std::int64_t channels) {
  conv = register_module("conv", models::conv(channels, channels, 3, 2, 0));
}

at::Tensor Downsample2DImpl::forward(const at::Tensor& x) {
  return conv(at::constant_pad_nd(x, {0, 1, 0, 1}, 0.0));
}

Upsample2DImpl::Upsample2DImpl(std::int64_t channels) {
  conv = register_module("conv", models::conv(channels, channels, 3, 1, 1));
}

at::Tensor Upsample2DImpl::forward(const at::Tensor& x) {
  namespace F = torch::nn::functional;
  auto up = F::interpolate(x.is_contiguous() ? x : x.contiguous(),
                           F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kNearest));
  return conv(up);
}

ResnetStackImpl::ResnetStackImpl(Kind k, std::int64_t num_layers, std::int64_t in, std::int64_t out, bool resample,
                                 std::int64_t groups, double eps, nn::Activation act)
    : kind(k) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < num_layers; ++i) {
    resnets->push_back(ResnetBlock2D(i == 0 ? in : out, out, groups, eps, act));
  }
  if (resample) {
    samplers = register_module(k == Kind::down ? "downsamplers" : "upsamplers", torch::nn::ModuleList());
    if (k == Kind::down) {
      samplers->push_back(Downsample2D(out));
    } else {
      samplers->push_back(Upsample2D(out));
    }
  }
}

at::Tensor ResnetStackImpl::forward(const at::Tensor& x) {
  auto h = x;
  for (const auto& r : *resnets) h = r->as<ResnetBlock2DImpl>()->forward(h);
  if (samplers) {
    if (kind == Kind::down) {
      h = samplers->ptr<Downsample2DImpl>(0)->forward(h);
    } else {
      h = samplers->ptr<Upsample2DImpl>(0)->forward(h);
    }
  }
  return h;
}

MidBlock2DImpl::MidBlock2DImpl(std::int64_t channels, std::int64_t groups, double eps, nn::Activation act,
                               bool add_attention) {
  resnets = register_module("resnets", torch::nn::ModuleList());
  resnets->push_back(ResnetBlock2D(channels, channels, groups, eps, act));
  if (add_attention) {
    attentions = register_module("attentions", torch::nn::ModuleList());
    nn::AttentionOptions o;
    o.query_dim = channels;
    o.heads = 1;  // attention_head_dim = channels
    o.dim_head = channels;
    o.bias = true;
    o.eps = eps;
    o.norm_num_groups = groups;
    o.residual_connection = true;
    attentions->push_back(nn::Attention(o));
  }
  resnets->push_back(ResnetBlock2D(channels, channels, groups, eps, act));
}

at::Tensor MidBlock2DImpl::forward(const at::Tensor& x) {
  auto h = resnets->ptr<ResnetBlock2DImpl>(0)->forward(x);
  if (attentions) h = attentions->ptr<nn::AttentionImpl>(0)->forward(h);
  return resnets->ptr<ResnetBlock2DImpl>(1)->forward(h);
}

EncoderImpl::EncoderImpl(const CoderOptions& o) : act(o.act) {
  const auto& boc = o.block_out_channels;
  conv_in = register_module("conv_in", conv(o.in_channels, boc.front(), 3, 1, 1));
  down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  auto out_ch = boc.front();
  for (std::size_t i = 0; i < boc.size(); ++i) {
    const auto in_ch = out_ch;
    out_ch = boc[i];
    const bool last = i + 1 == boc.size();
    down_blocks->push_back(ResnetStack(ResnetStackImpl::Kind::down, o.layers_per_block, in_ch, out_ch, !last,
                                       o.norm_num_groups, kResnetEps, o.act));
  }
  mid_block = register_module(
      "mid_block", MidBlock2D(boc.back(), o.norm_num_groups, kResnetEps, o.act, o.mid_block_add_attention));
  conv_norm_out = register_module("conv_norm_out", group_norm(o.norm_num_groups, boc.back(), kResnetEps));
  conv_out = register_module("conv_out", conv(boc.back(), 2 * o.out_channels, 3, 1, 1));
}

at::Tensor EncoderImpl::forward(const at::Tensor& x) {
  auto h = conv_in(x);
  for (const auto& b : *down_blocks) h = b->as<ResnetStackImpl>()->forward(h);
  h = mid_block(h);
  return conv_out(nn::apply_activation(act, nn::group_norm(conv_norm_out, h)));
}

DecoderImpl::DecoderImpl(const CoderOptions& o) : act(o.act) {
  const auto& boc = o.block_out_channels;
  std::vector<std::int64_t> rev(boc.rbegin(), boc.rend());
  conv_in = register_module("conv_in", conv(o.in_channels, rev.front(), 3, 1, 1));
  mid_block = register_module(
      "mid_block", MidBlock2D(rev.front(), o.norm_num_groups, kResnetEps, o.act, o.mid_block_add_attention));
  up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  auto out_ch = rev.front();
  for (std::size_t i = 0; i < rev.size(); ++i) {
    const auto prev = out_ch;
    out_ch = rev[i];
    const bool last = i + 1 == rev.size();
    up_blocks->push_back(ResnetStack(ResnetStackImpl::Kind::up, o.layers_per_block + 1, prev, out_ch, !last,
                                     o.norm_num_groups, kResnetEps, o.act));
  }
  conv_norm_out = register_module("conv_norm_out", group_norm(o.norm_num_groups, boc.front(), kResnetEps));
  conv_out = register_module("conv_out", conv(boc.front(), o.out_channels, 3, 1, 1));
}

at::Tensor DecoderImpl::forward(const at::Tensor& z) {
  auto h = conv_in(z);
  h = mid_block(h);
  // Diffusers runs the up blocks in their parameters' dtype (an fp32 decoder tail under an
  // upcast VAE).
  h = h.to(conv_out->weight.scalar_type());
  for (const auto& b : *up_blocks) h = b->as<ResnetStackImpl>()->forward(h);
  return conv_out(nn::apply_activation(act, nn::group_norm(conv_norm_out, h)));
}

// ---- config ------------------------------------------------------------------------------------

AutoencoderKLConfig AutoencoderKLConfig::from_json(const nlohmann::json& j, const std::string& where) {
  AutoencoderKLConfig c;
  c.in_channels = cfg::get_int(j, "in_channels", c.in_channels, where);
  c.out_channels = cfg::get_int(j, "out_channels", c.out_channels, where);
  c.latent_channels = cfg::get_int(j, "latent_channels", c.latent_channels, where);
  c.block_out_channels = cfg::get_int_list(j, "block_out_channels", c.block_out_channels, where);
  c.down_block_types = cfg::get_string_list(j, "down_block_types", c.down_block_types, where);
  c.up_block_types = cfg::get_string_list(j, "up_block_types", c.up_block_types, where);
  c.layers_per_block = cfg::get_int(j, "layers_per_block", c.layers_per_block, where);
  c.norm_num_groups = cfg::get_int(j, "norm_num_groups", c.norm_num_groups, where);
  c.act_fn = cfg::get_string(j, "act_fn", c.act_fn, where);
  if (cfg::present(j, "sample_size") && j.at("sample_size").is_array()) {
    const auto sizes = cfg::get_int_list(j, "sample_size", {}, where);
    if (sizes.empty()) cfg::bad(where, "sample_size", "must not be an empty list");
    c.sample_size = sizes.front();
  } else {
    c.sample_size = cfg::get_int(j, "sample_size", c.sample_size, where);
  }
  c.scaling_factor = cfg::get_double(j, "scaling_factor", c.scaling_factor, where);
  c.shift_factor = cfg::get_opt_double(j, "shift_factor", where);
  c.latents_mean = cfg::get_double_list(j, "latents_mean", where);
  c.latents_std = cfg::get_double_list(j, "latents_std", where);
  c.use_quant_conv = cfg::get_bool(j, "use_quant_conv", c.use_quant_conv, where);
  c.use_post_quant_conv = cfg::get_bool(j, "use_post_quant_conv", c.use_post_quant_conv, where);
  c.mid_block_add_attention = cfg::get_bool(j, "mid_block_add_attention", c.mid_block_add_attention, where);
  c.force_upcast = cfg::get_bool(j, "force_upcast", c.force_upcast, where);

  if (c.block_out_channels.empty()) cfg::bad(where, "block_out_channels", "must not be empty");
  if (c.down_block_types.size() != c.block_out_channels.size()) {
    cfg::bad(where, "down_block_types", "must have one entry per block_out_channels entry");
  }
  if (c.up_block_types.size() != c.block_out_channels.size()) {
    cfg::bad(where, "up_block_types", "must have one entry per block_out_channels entry");
  }
  for (const auto& t : c.down_block_types) {
    if (t != "DownEncoderBlock2D") {
      cfg::bad(where, "down_block_types", "has '" + t + "'; AutoencoderKL supports DownEncoderBlock2D only");
    }
  }
  for (const auto& t : c.up_block_types) {
    if (t != "UpDecoderBlock2D") {
      cfg::bad(where, "up_block_types", "has '" + t + "'; AutoencoderKL supports UpDecoderBlock2D only");
    }
  }
  for (auto ch : c.block_out_channels) {
    if (c.norm_num_groups <= 0 || ch % c.norm_num_groups != 0) {
      cfg::bad(where, "norm_num_groups", "(" + std::to_string(c.norm_num_groups) +
                                             ") must divide every block_out_channels entry");
    }
  }
  try {
    (void)nn::parse_activation(c.act_fn);
  } catch (const std::invalid_argument& e) {
    cfg::bad(where, "act_fn", e.what());
  }
  return c;
}

std::int64_t AutoencoderKLConfig::downscale_factor() const {
  return std::int64_t{1} << (block_out_channels.size() - 1);
}

// ---- distribution ------------------------------------------------------------------------------

DiagonalGaussian diagonal_gaussian(const at::Tensor& moments) {
  auto parts = moments.chunk(2, 1);
  DiagonalGaussian d;
  d.mean = parts[0];
  d.logvar = at::clamp(parts[1], -30.0, 20.0);
  d.std = at::exp(0.5 * d.logvar);
  d.var = at::exp(d.logvar);
  return d;
}

at::Tensor DiagonalGaussian::sample(std::optional<at::Generator> generator) const {
  c10::optional<at::Generator> gen;
  if (generator) gen = *generator;
  // Drawn where the generator lives (CPU for a seeded CPU stream), then moved, as randn_tensor.
  const bool cpu_gen = !generator || generator->device().is_cpu();
  auto opts = mean.options();
  if (cpu_gen) opts = opts.device(at::kCPU);
  auto eps = at::randn(mean.sizes(), gen, opts).to(mean.device());
  return mean + std * eps;
}

at::Tensor DiagonalGaussian::kl() const {
  return 0.5 * at::sum(at::pow(mean, 2) + var - 1.0 - logvar, {1, 2, 3});
}

// ---- model -------------------------------------------------------------------------------------

AutoencoderKLImpl::AutoencoderKLImpl(const AutoencoderKLConfig& c) : config_(c) {
  CoderOptions eo;
  eo.in_channels = c.in_channels;
  eo.out_channels = c.latent_channels;
  eo.block_out_channels = c.block_out_channels;
  eo.layers_per_block = c.layers_per_block;
  eo.norm_num_groups = c.norm_num_groups;
  eo.act = nn::parse_activation(c.act_fn);
  eo.mid_block_add_attention = c.mid_block_add_attention;
  encoder = register_module("encoder", Encoder(eo));
  CoderOptions dop = eo;
  dop.in_channels = c.latent_channels;
  dop.out_channels = c.out_channels;
  decoder = register_module("decoder", Decoder(dop));
  if (c.use_quant_conv) {
    quant_conv = register_module("quant_conv", conv(2 * c.latent_channels, 2 * c.latent_channels, 1));
  }
  if (c.use_post_quant_conv) {
    post_quant_conv = register_module("post_quant_conv", conv(c.latent_channels, c.latent_channels, 1));
  }
}

at::Tensor AutoencoderKLImpl::encode_moments(const at::Tensor& x) {
  auto h = encoder(x);
  return quant_conv ? quant_conv(h) : h;
}

DiagonalGaussian AutoencoderKLImpl::encode(const at::Tensor& x) {
  if (x.dim() != 4 || x.size(1) != config_.in_channels) {
    throw Error("AutoencoderKL.encode: expected images [B, " + std::to_string(config_.in_channels) +
                    ", H, W], got " + std::to_string(x.dim()) + "-D input",
                ExitCode::bad_input);
  }
  const auto tile = tile_sample_min_size();
  if (tiling_.enabled && (x.size(-1) > tile || x.size(-2) > tile)) return tiled_encode(x);
  return diagonal_gaussian(encode_moments(x));
}

at::Tensor AutoencoderKLImpl::decode(const at::Tensor& z) {
  if (z.dim() != 4 || z.size(1) != config_.latent_channels) {
    throw Error("AutoencoderKL.decode: expected latents [B, " + std::to_string(config_.latent_channels) +
                    ", h, w], got " + std::to_string(z.dim()) + "-D input",
                ExitCode::bad_input);
  }
  const auto tile = tile_latent_min_size();
  if (tiling_.enabled && (z.size(-1) > tile || z.size(-2) > tile)) return tiled_decode(z);
  auto h = post_quant_conv ? post_quant_conv(z) : z;
  return decoder(h);
}

void AutoencoderKLImpl::enable_tiling(const TilingOptions& options) {
  tiling_ = options;
  tiling_.enabled = true;
}

void AutoencoderKLImpl::disable_tiling() { tiling_.enabled = false; }

std::int64_t AutoencoderKLImpl::tile_sample_min_size() const {
  return tiling_.tile_sample_min_size > 0 ? tiling_.tile_sample_min_size : config_.sample_size;
}

std::int64_t AutoencoderKLImpl::tile_latent_min_size() const {
  return static_cast<std::int64_t>(static_cast<double>(tile_sample_min_size()) /
                                   static_cast<double>(config_.downscale_factor()));
}

namespace {

// b's first `extent` rows/columns fade from a's last ones (Diffusers' blend_v / blend_h).
at::Tensor blend(const at::Tensor& a, at::Tensor b, std::int64_t extent, std::int64_t dim) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  if (extent <= 0) return b;
  b = b.clone();
  for (std::int64_t y = 0; y < extent; ++y) {
    const double w = static_cast<double>(y) / static_cast<double>(extent);
    auto from_a = a.select(dim, a.size(dim) - extent + y);
    auto row = b.select(dim, y);
    row.copy_(from_a * (1.0 - w) + row * w);
  }
  return b;
}

// Runs `fn` on overlapping tiles of `input` and blends the results, Diffusers' tiling scheme.
template <typename Fn>
at::Tensor tiled(const at::Tensor& input, std::int64_t in_tile, std::int64_t out_tile, double overlap, Fn fn) {
  const auto stride = static_cast<std::int64_t>(static_cast<double>(in_tile) * (1.0 - overlap));
  const auto extent = static_cast<std::int64_t>(static_cast<double>(out_tile) * overlap);
  const auto limit = out_tile - extent;
  if (stride <= 0) {
    throw Error("VAE tiling: tile size " + std::to_string(in_tile) + " with overlap " + std::to_string(overlap) +
                    " leaves no stride; use a larger tile",
                ExitCode::usage);
  }
  std::vector<std::vector<at::Tensor>> rows;
  for (std::int64_t i = 0; i < input.size(2); i += stride) {
    std::vector<at::Tensor> row;
    for (std::int64_t j = 0; j < input.size(3); j += stride) {
      auto tile = input.narrow(2, i, std::min(in_tile, input.size(2) - i))
                      .narrow(3, j, std::min(in_tile, input.size(3) - j));
      row.push_back(fn(tile));
    }
    rows.push_back(std::move(row));
  }
  std::vector<at::Tensor> result_rows;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<at::Tensor> result_row;
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      auto t = rows[i][j];
      if (i > 0) t = blend(rows[i - 1][j], t, extent, 2);
      if (j > 0) t = blend(rows[i][j - 1], t, extent, 3);
      rows[i][j] = t;  // later neighbours blend against the blended tile, as upstream
      result_row.push_back(t.narrow(2, 0, std::min(limit, t.size(2))).narrow(3, 0, std::min(limit, t.size(3))));
    }
    result_rows.push_back(at::cat(result_row, 3));
  }
  return at::cat(result_rows, 2);
}

}  // namespace

DiagonalGaussian AutoencoderKLImpl::tiled_encode(const at::Tensor& x) {
  auto moments = tiled(x, tile_sample_min_size(), tile_latent_min_size(), tiling_.overlap_factor,
                       [this](const at::Tensor& t) { return encode_moments(t); });
  return diagonal_gaussian(moments);
}

at::Tensor AutoencoderKLImpl::tiled_decode(const at::Tensor& z) {
  return tiled(z, tile_latent_min_size(), tile_sample_min_size(), tiling_.overlap_factor, [this](const at::Tensor& t) {
    return decoder(post_quant_conv ? post_quant_conv(t) : t);
  });
}

at::Tensor AutoencoderKLImpl::scale_latents(const at::Tensor& sample_latents) const {
  auto z = config_.shift_factor ? sample_latents - *config_.shift_factor : sample_latents;
  return z * config_.scaling_factor;
}

at::Tensor AutoencoderKLImpl::unscale_latents(const at::Tensor& latents) const {
  auto z = latents / config_.scaling_factor;
  return config_.shift_factor ? z + *config_.shift_factor : z;
}

std::string autoencoder_kl_rename(const std::string& name) {
  static const std::pair<const char*, const char*> legacy[] = {
      {".query.", ".to_q."}, {".key.", ".to_k."}, {".value.", ".to_v."}, {".proj_attn.", ".to_out.0."}};
  if (name.find(".attentions.") == std::string::npos) return name;
  for (const auto& [from, to] : legacy) {
    const auto pos = name.find(from);
    if (pos != std::string::npos) {
      return name.substr(0, pos) + to + name.substr(pos + std::string(from).size());
    }
  }
  return name;
}

// ---- the pixel codec ---------------------------------------------------------------------------

void set_pixel_codec_weights(const AutoencoderKLConfig& c, std::vector<std::pair<std::string, at::Tensor>>& params,
                             const std::string& where) {
  const std::int64_t rgb = c.in_channels;
  if (c.norm_num_groups != 1)
    cfg::bad(where, "norm_num_groups", "must be 1 for the pixel codec (got " + std::to_string(c.norm_num_groups) + ")");
  if (c.out_channels != rgb)
    cfg::bad(where, "out_channels", "must equal in_channels (" + std::to_string(rgb) + ") for the pixel codec");
  if (c.latent_channels < rgb)
    cfg::bad(where, "latent_channels", "must be at least in_channels (" + std::to_string(rgb) + ") for the pixel codec");
  for (auto ch : c.block_out_channels)
    if (ch < 2 * rgb + 2)
      cfg::bad(where, "block_out_channels", "entries must be at least 2 * in_channels + 2 = " + std::to_string(2 * rgb + 2) +
                                                " for the pixel codec (got " + std::to_string(ch) + ")");
  // Channel layout inside encoder and decoder: 0..rgb-1 the signal, rgb..2rgb-1 its negation,
  // 2rgb and 2rgb+1 the constants +k and -k; the rest stay 0.
  constexpr double k = 100.0;     // the constant pair: the GroupNorm's scale, whatever the signal
  constexpr double shift = 20.0;  // SiLU(x + 20) = x + 20 to float precision for |x| <= 1
  constexpr double logvar = -30.0;  // the lower clamp: std 3e-7, a sample is the mean
  auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  auto eye_1x1 = [](at::Tensor& w) {  // [out, in, 1, 1] (or [out, in, 3, 3]: the centre tap)
    w.zero_();
    const std::int64_t n = std::min(w.size(0), w.size(1)), mid = w.size(2) / 2;
    for (std::int64_t i = 0; i < n; ++i) w[i][i][mid][mid] = 1.0;
  };
  // conv_in: signal, its negation and the constant pair from `from` channels.
  auto conv_in = [&](at::Tensor& w, at::Tensor& b) {
    w.zero_();
    b.zero_();
    for (std::int64_t i = 0; i < rgb; ++i) {
      w[i][i][1][1] = 1.0;
      w[rgb + i][i][1][1] = -1.0;
    }
    b[2 * rgb] = k;
    b[2 * rgb + 1] = -k;
  };
  // conv_norm_out: mean 0 and variance (2|s|^2 + 2k^2)/C per position, so gamma = k*sqrt(2/C)
  // gives the signal back; the shift keeps SiLU linear; everything else is dropped.
  auto norm_out = [&](at::Tensor& w, at::Tensor& b) {
    const double gamma = k * std::sqrt(2.0 / static_cast<double>(w.size(0)));
    w.zero_();
    b.zero_();
    for (std::int64_t i = 0; i < rgb; ++i) {
      w[i] = gamma;
      b[i] = shift;
    }
  };
  auto conv_out = [&](at::Tensor& w, at::Tensor& b, std::int64_t logvar_from) {
    w.zero_();
    b.zero_();
    for (std::int64_t i = 0; i < rgb; ++i) {
      w[i][i][1][1] = 1.0;
      b[i] = -shift;
    }
    if (logvar_from > 0) b.narrow(0, logvar_from, b.size(0) - logvar_from).fill_(logvar);
  };
  std::map<std::string, at::Tensor*> by_name;
  for (auto& [n, t] : params) by_name[n] = &t;
  auto get = [&](const std::string& n) -> at::Tensor& {
    const auto it = by_name.find(n);
    if (it == by_name.end())
      throw Error(where + ": the pixel codec needs the parameter '" + n + "', which this AutoencoderKL does not have",
                  ExitCode::bad_input);
    return *it->second;
  };
  at::NoGradGuard no_grad;
  for (auto& [n, t] : params) {
    if (has(n, ".resnets.") && (ends(n, ".conv2.weight") || ends(n, ".conv2.bias"))) {
      t.zero_();  // the residual branch adds 0
    } else if (has(n, ".attentions.") && (ends(n, ".to_out.0.weight") || ends(n, ".to_out.0.bias"))) {
      t.zero_();  // so does the mid-block attention
    } else if (ends(n, ".conv_shortcut.weight") || ends(n, "quant_conv.weight")) {
      eye_1x1(t);
    } else if (ends(n, ".conv_shortcut.bias") || ends(n, "quant_conv.bias")) {
      t.zero_();
    } else if (has(n, ".downsamplers.") && ends(n, ".conv.weight")) {
      // Diffusers pads the right and bottom by one before the stride-2 3x3 convolution, so the
      // top-left 2x2 taps of each window are exactly one 2x2 block: average it.
      t.zero_();
      for (std::int64_t i = 0; i < std::min(t.size(0), t.size(1)); ++i) t[i][i].narrow(0, 0, 2).narrow(1, 0, 2).fill_(0.25);
    } else if (has(n, ".upsamplers.") && ends(n, ".conv.weight")) {
      eye_1x1(t);  // after the nearest-neighbour doubling
    } else if ((has(n, ".downsamplers.") || has(n, ".upsamplers.")) && ends(n, ".conv.bias")) {
      t.zero_();
    }
  }
  conv_in(get("encoder.conv_in.weight"), get("encoder.conv_in.bias"));
  norm_out(get("encoder.conv_norm_out.weight"), get("encoder.conv_norm_out.bias"));
  conv_out(get("encoder.conv_out.weight"), get("encoder.conv_out.bias"), c.latent_channels);
  conv_in(get("decoder.conv_in.weight"), get("decoder.conv_in.bias"));
  norm_out(get("decoder.conv_norm_out.weight"), get("decoder.conv_norm_out.bias"));
  conv_out(get("decoder.conv_out.weight"), get("decoder.conv_out.bias"), 0);
}

}  // namespace yeto::models
