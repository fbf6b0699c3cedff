#include "models/ltx2_audio.hpp"

#include <cmath>
#include <regex>

#include <torch/torch.h>

#include "core/error.hpp"
#include "models/config_json.hpp"

namespace yeto::models {
namespace {

using cfg::bad;

at::Tensor pixel_norm(const at::Tensor& x) { return x / at::sqrt(x.pow(2).mean(1, true) + 1e-6); }

// The child module `name`, or null.
std::shared_ptr<torch::nn::Module> child(torch::nn::Module& m, const std::string& name) {
  const auto children = m.named_children();
  const auto* c = children.find(name);
  return c ? *c : nullptr;
}

std::vector<std::vector<std::int64_t>> get_int_lists(const nlohmann::json& j, const std::string& key,
                                                     const std::vector<std::vector<std::int64_t>>& def,
                                                     const std::string& where) {
  if (!cfg::present(j, key)) return def;
  const auto& v = j.at(key);
  if (!v.is_array()) bad(where, key, "must be a list of integer lists");
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& row : v) {
    if (!row.is_array()) bad(where, key, "must be a list of integer lists");
    std::vector<std::int64_t> r;
    for (const auto& x : row) {
      if (!x.is_number_integer() || x.get<std::int64_t>() <= 0) bad(where, key, "entries must be positive integers");
      r.push_back(x.get<std::int64_t>());
    }
    out.push_back(r);
  }
  return out;
}

// A transposed 1-D convolution in any dtype: LibTorch 1.13's CPU kernels take a bfloat16 / half
// transposed convolution for a plain one (a channel-count error), so on the CPU those run in
// float32 and are rounded back to the input's dtype.
at::Tensor transposed_conv1d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, std::int64_t stride,
                            std::int64_t padding, std::int64_t groups) {
  const std::vector<std::int64_t> s = {stride}, p = {padding}, zero = {0}, one = {1};
  const bool reduced = x.is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
  if (!reduced) return at::conv_transpose1d(x, weight, bias, s, p, zero, groups, one);
  return at::conv_transpose1d(x.to(at::kFloat), weight.to(at::kFloat), bias.defined() ? bias.to(at::kFloat) : bias, s, p,
                              zero, groups, one)
      .to(x.scalar_type());
}

// Replicate padding in any dtype (LibTorch 1.13's CPU kernel has no bfloat16 / half; copying
// values is exact in float32).
at::Tensor replicate_pad1d(const at::Tensor& x, std::vector<std::int64_t> pad) {
  const bool reduced = x.is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
  if (!reduced) return at::replication_pad1d(x, pad);
  return at::replication_pad1d(x.to(at::kFloat), pad).to(x.scalar_type());
}

// 'same' zero padding of a stride-1 convolution: (k - 1) d split left total / 2, right the rest.
at::Tensor same_pad(const at::Tensor& x, std::int64_t kernel, std::int64_t dilation) {
  const auto total = (kernel - 1) * dilation;
  return at::constant_pad_nd(x, {total / 2, total - total / 2});
}

}  // namespace

// ---- AutoencoderKLLTX2Audio ------------------------------------------------------------------

std::int64_t LTX2AudioVaeConfig::decoded_frames(std::int64_t frames) const {
  const auto f = downsample_factor();
  return std::max<std::int64_t>(frames * f - (f - 1), 1);
}

LTX2AudioVaeConfig LTX2AudioVaeConfig::from_json(const nlohmann::json& j, const std::string& where) {
  LTX2AudioVaeConfig c;
  c.base_channels = cfg::get_int(j, "base_channels", c.base_channels, where);
  c.output_channels = cfg::get_int(j, "output_channels", c.output_channels, where);
  c.ch_mult = cfg::get_int_list(j, "ch_mult", c.ch_mult, where);
  c.num_res_blocks = cfg::get_int(j, "num_res_blocks", c.num_res_blocks, where);
  c.in_channels = cfg::get_int(j, "in_channels", c.in_channels, where);
  c.latent_channels = cfg::get_int(j, "latent_channels", c.latent_channels, where);
  c.mel_bins = cfg::get_int(j, "mel_bins", c.mel_bins, where);
  c.double_z = cfg::get_bool(j, "double_z", c.double_z, where);
  c.sample_rate = cfg::get_int(j, "sample_rate", c.sample_rate, where);
  c.mel_hop_length = cfg::get_int(j, "mel_hop_length", c.mel_hop_length, where);
  if (cfg::get_string(j, "norm_type", "pixel", where) != "pixel")
    bad(where, "norm_type", "must be \"pixel\" (LTX-2's audio VAE; group norm is not served)");
  if (cfg::get_string(j, "causality_axis", "height", where) != "height")
    bad(where, "causality_axis", "must be \"height\" (causal along time, as LTX-2's audio VAE)");
  if (cfg::get_bool(j, "mid_block_add_attention", false, where))
    bad(where, "mid_block_add_attention", "must be false (LTX-2's audio VAE has no attention blocks)");
  if (cfg::present(j, "attn_resolutions") && !(j.at("attn_resolutions").is_array() && j.at("attn_resolutions").empty()))
    bad(where, "attn_resolutions", "must be null or empty (LTX-2's audio VAE has no attention blocks)");
  if (cfg::present(j, "is_causal") && !cfg::get_bool(j, "is_causal", true, where))
    bad(where, "is_causal", "must be true");
  if (c.ch_mult.empty()) bad(where, "ch_mult", "must not be empty");
  for (auto m : c.ch_mult)
    if (m <= 0) bad(where, "ch_mult", "entries must be positive");
  for (const auto& [k, v] : {std::pair<const char*, std::int64_t>{"base_channels", c.base_channels},
                             {"output_channels", c.output_channels},
                             {"num_res_blocks", c.num_res_blocks},
                             {"in_channels", c.in_channels},
                             {"latent_channels", c.latent_channels},
                             {"mel_bins", c.mel_bins}})
    if (v <= 0) bad(where, k, "must be positive");
  return c;
}

LTX2AudioCausalConv2dImpl::LTX2AudioCausalConv2dImpl(std::int64_t in, std::int64_t out, std::int64_t k) : kernel(k) {
  conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, k)));
}

at::Tensor LTX2AudioCausalConv2dImpl::forward(const at::Tensor& x) {
  // (mel left, mel right, time front, time back)
  const auto pw = kernel - 1;
  return conv(at::constant_pad_nd(x, {pw / 2, pw - pw / 2, kernel - 1, 0}));
}

LTX2AudioResnetBlockImpl::LTX2AudioResnetBlockImpl(std::int64_t in, std::int64_t out) {
  conv1 = register_module("conv1", LTX2AudioCausalConv2d(in, out, 3));
  conv2 = register_module("conv2", LTX2AudioCausalConv2d(out, out, 3));
  if (in != out) nin_shortcut = register_module("nin_shortcut", LTX2AudioCausalConv2d(in, out, 1));
}

at::Tensor LTX2AudioResnetBlockImpl::forward(const at::Tensor& x) {
  auto h = conv1(at::silu(pixel_norm(x)));
  h = conv2(at::silu(pixel_norm(h)));
  return (nin_shortcut ? nin_shortcut(x) : x) + h;
}

namespace {

std::shared_ptr<torch::nn::Module> mid_block(std::int64_t ch) {
  auto mid = std::make_shared<torch::nn::Module>();
  mid->register_module("block_1", LTX2AudioResnetBlock(ch, ch));
  mid->register_module("block_2", LTX2AudioResnetBlock(ch, ch));
  return mid;
}

at::Tensor run_mid(torch::nn::Module& mid, const at::Tensor& x) {
  auto h = child(mid, "block_1")->as<LTX2AudioResnetBlockImpl>()->forward(x);
  return child(mid, "block_2")->as<LTX2AudioResnetBlockImpl>()->forward(h);
}

at::Tensor run_blocks(torch::nn::Module& level, const at::Tensor& x) {
  auto h = x;
  for (const auto& b : *std::dynamic_pointer_cast<torch::nn::ModuleListImpl>(child(level, "block")))
    h = b->as<LTX2AudioResnetBlockImpl>()->forward(h);
  return h;
}

}  // namespace

LTX2AudioEncoderImpl::LTX2AudioEncoderImpl(const LTX2AudioVaeConfig& c) {
  conv_in = register_module("conv_in", LTX2AudioCausalConv2d(c.in_channels, c.base_channels, 3));
  down = register_module("down", torch::nn::ModuleList());
  std::int64_t block_in = c.base_channels;
  for (std::size_t i = 0; i < c.ch_mult.size(); ++i) {
    auto level = std::make_shared<torch::nn::Module>();
    auto blocks = level->register_module("block", torch::nn::ModuleList());
    const auto block_out = c.base_channels * c.ch_mult[i];
    for (std::int64_t r = 0; r < c.num_res_blocks; ++r) {
      blocks->push_back(LTX2AudioResnetBlock(block_in, block_out));
      block_in = block_out;
    }
    if (i + 1 != c.ch_mult.size()) {
      auto ds = std::make_shared<torch::nn::Module>();
      ds->register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(block_in, block_in, 3).stride(2)));
      level->register_module("downsample", ds);
    }
    down->push_back(level);
  }
  mid = register_module("mid", mid_block(block_in));
  conv_out = register_module("conv_out",
                             LTX2AudioCausalConv2d(block_in, c.double_z ? 2 * c.latent_channels : c.latent_channels, 3));
}

at::Tensor LTX2AudioEncoderImpl::forward(const at::Tensor& x) {
  auto h = conv_in(x);
  for (const auto& level : *down) {
    h = run_blocks(*level, h);
    if (auto ds = child(*level, "downsample")) {
      // Causal along time: 2 rows in front; mel: 1 column behind; then the stride-2 conv.
      h = child(*ds, "conv")->as<torch::nn::Conv2dImpl>()->forward(at::constant_pad_nd(h, {0, 1, 2, 0}));
    }
  }
  h = run_mid(*mid, h);
  return conv_out(at::silu(pixel_norm(h)));
}

LTX2AudioDecoderImpl::LTX2AudioDecoderImpl(const LTX2AudioVaeConfig& c) : config(c) {
  std::int64_t block_in = c.base_channels * c.ch_mult.back();
  conv_in = register_module("conv_in", LTX2AudioCausalConv2d(c.latent_channels, block_in, 3));
  mid = register_module("mid", mid_block(block_in));
  std::vector<std::shared_ptr<torch::nn::Module>> levels(c.ch_mult.size());
  for (auto i = static_cast<std::int64_t>(c.ch_mult.size()) - 1; i >= 0; --i) {
    auto level = std::make_shared<torch::nn::Module>();
    auto blocks = level->register_module("block", torch::nn::ModuleList());
    const auto block_out = c.base_channels * c.ch_mult[static_cast<std::size_t>(i)];
    for (std::int64_t r = 0; r < c.num_res_blocks + 1; ++r) {
      blocks->push_back(LTX2AudioResnetBlock(block_in, block_out));
      block_in = block_out;
    }
    if (i != 0) {
      auto us = std::make_shared<torch::nn::Module>();
      us->register_module("conv", LTX2AudioCausalConv2d(block_in, block_in, 3));
      level->register_module("upsample", us);
    }
    levels[static_cast<std::size_t>(i)] = level;
  }
  up = register_module("up", torch::nn::ModuleList());
  for (auto& l : levels) up->push_back(l);
  conv_out = register_module("conv_out", LTX2AudioCausalConv2d(block_in, c.output_channels, 3));
}

at::Tensor LTX2AudioDecoderImpl::forward(const at::Tensor& z) {
  const auto frames = config.decoded_frames(z.size(2));
  auto h = run_mid(*mid, conv_in(z));
  for (auto i = static_cast<std::int64_t>(up->size()) - 1; i >= 0; --i) {
    auto& level = *up->ptr(static_cast<std::size_t>(i));
    h = run_blocks(level, h);
    if (auto us = child(level, "upsample")) {
      h = at::upsample_nearest2d(h, {h.size(2) * 2, h.size(3) * 2});
      h = child(*us, "conv")->as<LTX2AudioCausalConv2dImpl>()->forward(h);
      h = h.narrow(2, 1, h.size(2) - 1);  // causal: the first time row goes
    }
  }
  h = conv_out(at::silu(pixel_norm(h)));
  // Crop / zero-pad to [frames, mel_bins] (a no-op for the LTX-2 shapes).
  h = h.narrow(2, 0, std::min(h.size(2), frames)).narrow(3, 0, std::min(h.size(3), config.mel_bins));
  if (h.size(2) < frames || h.size(3) < config.mel_bins)
    h = at::constant_pad_nd(h, {0, config.mel_bins - h.size(3), 0, frames - h.size(2)});
  return h;
}

AutoencoderKLLTX2AudioImpl::AutoencoderKLLTX2AudioImpl(const LTX2AudioVaeConfig& config) : config_(config) {
  encoder = register_module("encoder", LTX2AudioEncoder(config));
  decoder = register_module("decoder", LTX2AudioDecoder(config));
  latents_mean = register_buffer("latents_mean", at::zeros({config.base_channels}));
  latents_std = register_buffer("latents_std", at::ones({config.base_channels}));
}

AudioLatentDist AutoencoderKLLTX2AudioImpl::encode(const at::Tensor& mel) {
  if (mel.dim() != 4 || mel.size(1) != config_.in_channels)
    throw Error("AutoencoderKLLTX2Audio encode: expected a log-mel [B, " + std::to_string(config_.in_channels) +
                    ", frames, mel_bins], got " + c10::str(mel.sizes()),
                ExitCode::bad_input);
  const auto h = encoder(mel.to(encoder->conv_in->conv->weight.scalar_type()));
  if (!config_.double_z) return {h, at::zeros_like(h)};
  const auto parts = h.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30.0, 20.0)};
}

at::Tensor AutoencoderKLLTX2AudioImpl::decode(const at::Tensor& z) {
  if (z.dim() != 4 || z.size(1) != config_.latent_channels)
    throw Error("AutoencoderKLLTX2Audio decode: expected latents [B, " + std::to_string(config_.latent_channels) +
                    ", frames, mel_bins / " + std::to_string(config_.downsample_factor()) + "], got " +
                    c10::str(z.sizes()),
                ExitCode::bad_input);
  return decoder(z.to(decoder->conv_in->conv->weight.scalar_type()));
}

at::Tensor AutoencoderKLLTX2AudioImpl::log_mel(const at::Tensor& waveform) const {
  if (waveform.dim() != 3 || waveform.size(1) != config_.in_channels)
    throw Error("AutoencoderKLLTX2Audio log_mel: expected waveforms [B, " + std::to_string(config_.in_channels) +
                    ", samples] at " + std::to_string(config_.sample_rate) + " Hz, got " + c10::str(waveform.sizes()),
                ExitCode::bad_input);
  LTX2MelConfig m;
  m.sample_rate = config_.sample_rate;
  m.hop_length = config_.mel_hop_length;
  m.n_mels = config_.mel_bins;
  return ltx2_log_mel(waveform, m);
}

namespace {
// Slaney's mel scale (torchaudio's mel_scale="slaney"): linear below 1 kHz, logarithmic above.
constexpr double kSlaneySp = 200.0 / 3.0, kMinLogHz = 1000.0, kMinLogMel = kMinLogHz / kSlaneySp;
const double kLogStep = std::log(6.4) / 27.0;
double hz_to_slaney_mel(double hz) {
  return hz >= kMinLogHz ? kMinLogMel + std::log(hz / kMinLogHz) / kLogStep : hz / kSlaneySp;
}
}  // namespace

at::Tensor slaney_mel_filterbank(std::int64_t n_freqs, double f_min, double f_max, std::int64_t n_mels,
                                 std::int64_t sample_rate) {
  // float32 throughout, in torchaudio's order of operations.
  const auto all_freqs = at::linspace(0, static_cast<double>(sample_rate / 2), n_freqs, at::kFloat);
  const auto m_pts = at::linspace(hz_to_slaney_mel(f_min), hz_to_slaney_mel(f_max), n_mels + 2, at::kFloat);
  auto f_pts = kSlaneySp * m_pts;
  const auto log_t = m_pts >= kMinLogMel;
  f_pts = at::where(log_t, kMinLogHz * at::exp(kLogStep * (m_pts - kMinLogMel)), f_pts);
  const auto f_diff = f_pts.narrow(0, 1, n_mels + 1) - f_pts.narrow(0, 0, n_mels + 1);
  const auto slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1);  // [n_freqs, n_mels + 2]
  const auto down = (-1.0 * slopes.narrow(1, 0, n_mels)) / f_diff.narrow(0, 0, n_mels);
  const auto up = slopes.narrow(1, 2, n_mels) / f_diff.narrow(0, 1, n_mels);
  auto fb = at::clamp_min(at::min(down, up), 0.0);
  const auto enorm = 2.0 / (f_pts.narrow(0, 2, n_mels) - f_pts.narrow(0, 0, n_mels));
  return fb * enorm.unsqueeze(0);
}

at::Tensor ltx2_log_mel(const at::Tensor& waveform, const LTX2MelConfig& c) {
  if (waveform.dim() != 3)
    throw Error("log-mel: expected waveforms [B, channels, samples], got " + c10::str(waveform.sizes()),
                ExitCode::bad_input);
  const auto pad = c.n_fft / 2;
  if (waveform.size(2) <= pad)
    throw Error("log-mel: a clip of " + std::to_string(waveform.size(2)) + " samples is too short; at least " +
                    std::to_string(pad + 1) + " samples (" + std::to_string(c.n_fft) + " / 2 + 1) are needed at " +
                    std::to_string(c.sample_rate) + " Hz",
                ExitCode::bad_input);
  const auto b = waveform.size(0), ch = waveform.size(1);
  auto x = waveform.to(at::kFloat).reshape({b * ch, 1, waveform.size(2)});
  x = at::reflection_pad1d(x, {pad, pad}).squeeze(1);
  const auto window = at::hann_window(c.n_fft, true, at::kFloat);
  const auto spec = at::stft(x, c.n_fft, c.hop_length, c.n_fft, window, false, true, true).abs();  // [N, F, T]
  const auto fb = slaney_mel_filterbank(c.n_fft / 2 + 1, 0.0, c.sample_rate / 2.0, c.n_mels, c.sample_rate);
  const auto mel = at::matmul(spec.transpose(1, 2), fb);  // [N, T, n_mels]
  return at::log(at::clamp_min(mel, 1e-5)).reshape({b, ch, mel.size(1), c.n_mels}).to(waveform.scalar_type());
}

at::Tensor ltx2_pack_audio_latents(const at::Tensor& latents) {
  if (latents.dim() != 4)
    throw Error("pack audio latents: expected [B, C, T, M], got " + c10::str(latents.sizes()), ExitCode::bad_input);
  return latents.transpose(1, 2).flatten(2, 3);
}

at::Tensor ltx2_unpack_audio_latents(const at::Tensor& packed, std::int64_t num_mel_bins) {
  if (packed.dim() != 3 || num_mel_bins <= 0 || packed.size(2) % num_mel_bins != 0)
    throw Error("unpack audio latents: expected [B, T, C * " + std::to_string(num_mel_bins) + "], got " +
                    c10::str(packed.sizes()),
                ExitCode::bad_input);
  return packed.unflatten(2, {packed.size(2) / num_mel_bins, num_mel_bins}).transpose(1, 2);
}

namespace {
void check_stats(const at::Tensor& packed, const at::Tensor& mean, const at::Tensor& std, const char* what) {
  if (packed.dim() != 3 || mean.dim() != 1 || std.dim() != 1 || mean.size(0) != packed.size(2) ||
      std.size(0) != packed.size(2))
    throw Error(std::string(what) + " audio latents: expected packed [B, T, F] and statistics [F], got " +
                    c10::str(packed.sizes()) + ", " + c10::str(mean.sizes()) + ", " + c10::str(std.sizes()),
                ExitCode::bad_input);
}
}  // namespace

at::Tensor ltx2_normalize_audio_latents(const at::Tensor& packed, const at::Tensor& mean, const at::Tensor& std) {
  check_stats(packed, mean, std, "normalize");
  return (packed - mean.to(packed)) / std.to(packed);
}

at::Tensor ltx2_denormalize_audio_latents(const at::Tensor& packed, const at::Tensor& mean, const at::Tensor& std) {
  check_stats(packed, mean, std, "denormalize");
  return packed * std.to(packed) + mean.to(packed);
}

std::string ltx2_audio_vae_diffusers_name(const std::string& original) {
  std::string s = original.rfind("audio_vae.", 0) == 0 ? original.substr(10) : original;
  if (s == "per_channel_statistics.mean-of-means") return "latents_mean";
  if (s == "per_channel_statistics.std-of-means") return "latents_std";
  return s;
}

std::string ltx2_vocoder_diffusers_name(const std::string& original, bool bwe) {
  std::string s = original;
  // A combined checkpoint's component prefix (the BWE model's first stage is itself `vocoder`).
  static const std::regex bwe_prefixed(R"(^vocoder\.((vocoder|bwe_generator|mel_stft|resampler)\..*)$)");
  static const std::regex plain_prefixed(R"(^vocoder\.((conv_pre|conv_post|ups|resblocks|act_post)\..*)$)");
  std::smatch m;
  if (std::regex_match(s, m, bwe ? bwe_prefixed : plain_prefixed)) s = m[1].str();
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"((^|\.)ups\.(\d+)\.)"), "$1upsamplers.$2."},
      {std::regex(R"((^|\.)resblocks\.)"), "$1resnets."},
      {std::regex(R"((^|\.)conv_pre\.)"), "$1conv_in."},
      {std::regex(R"((^|\.)conv_post\.)"), "$1conv_out."},
      {std::regex(R"((^|\.)act_post\.)"), "$1act_out."},
      {std::regex(R"(\.downsample\.lowpass\.)"), ".downsample."}};
  for (const auto& [re, to] : rules) s = std::regex_replace(s, re, to);
  return s;
}

// ---- vocoders ------------------------------------------------------------------------------

std::int64_t LTX2VocoderConfig::upsample_total() const {
  std::int64_t f = 1;
  for (auto u : upsample_factors) f *= u;
  return f;
}

LTX2VocoderConfig LTX2VocoderConfig::from_json(const nlohmann::json& j, const std::string& where,
                                               const std::string& p) {
  LTX2VocoderConfig c;
  c.in_channels = cfg::get_int(j, p + "in_channels", c.in_channels, where);
  c.hidden_channels = cfg::get_int(j, p + "hidden_channels", c.hidden_channels, where);
  c.out_channels = cfg::get_int(j, p + "out_channels", c.out_channels, where);
  c.upsample_kernel_sizes = cfg::get_int_list(j, p + "upsample_kernel_sizes", c.upsample_kernel_sizes, where);
  c.upsample_factors = cfg::get_int_list(j, p + "upsample_factors", c.upsample_factors, where);
  c.resnet_kernel_sizes = cfg::get_int_list(j, p + "resnet_kernel_sizes", c.resnet_kernel_sizes, where);
  c.resnet_dilations = get_int_lists(j, p + "resnet_dilations", c.resnet_dilations, where);
  c.act_fn = cfg::get_string(j, p + "act_fn", c.act_fn, where);
  c.leaky_relu_negative_slope = cfg::get_double(j, p + "leaky_relu_negative_slope", c.leaky_relu_negative_slope, where);
  c.antialias = cfg::get_bool(j, p + "antialias", c.antialias, where);
  c.antialias_ratio = cfg::get_int(j, p + "antialias_ratio", c.antialias_ratio, where);
  c.antialias_kernel_size = cfg::get_int(j, p + "antialias_kernel_size", c.antialias_kernel_size, where);
  // final_act_fn: null is "no final activation" (the key's absence keeps the default, tanh).
  if (j.is_object() && j.contains(p + "final_act_fn"))
    c.final_act_fn = j.at(p + "final_act_fn").is_null() ? "" : cfg::get_string(j, p + "final_act_fn", "", where);
  c.final_bias = cfg::get_bool(j, p + "final_bias", c.final_bias, where);
  c.output_sampling_rate = cfg::get_int(j, p + "output_sampling_rate", c.output_sampling_rate, where);
  if (c.act_fn != "leaky_relu" && c.act_fn != "snake" && c.act_fn != "snakebeta")
    bad(where, p + "act_fn", "must be leaky_relu, snake or snakebeta (got \"" + c.act_fn + "\")");
  if (!c.final_act_fn.empty() && c.final_act_fn != "tanh" && c.final_act_fn != "clamp")
    bad(where, p + "final_act_fn", "must be tanh, clamp or null (got \"" + c.final_act_fn + "\")");
  if (c.upsample_factors.size() != c.upsample_kernel_sizes.size() || c.upsample_factors.empty())
    bad(where, p + "upsample_factors", "and " + p + "upsample_kernel_sizes must be non-empty lists of one length");
  if (c.resnet_kernel_sizes.size() != c.resnet_dilations.size() || c.resnet_kernel_sizes.empty())
    bad(where, p + "resnet_kernel_sizes", "and " + p + "resnet_dilations must be non-empty lists of one length");
  for (std::size_t i = 0; i < c.upsample_factors.size(); ++i)
    if (c.upsample_factors[i] <= 0 || c.upsample_kernel_sizes[i] < c.upsample_factors[i])
      bad(where, p + "upsample_kernel_sizes", "entries must be at least the upsample factor");
  if ((c.hidden_channels >> c.upsample_factors.size()) <= 0)
    bad(where, p + "hidden_channels", "halves per upsampler and must stay positive over " +
                                          std::to_string(c.upsample_factors.size()) + " upsamplers");
  if (c.antialias && (c.antialias_ratio <= 0 || c.antialias_kernel_size < c.antialias_ratio))
    bad(where, p + "antialias_kernel_size", "must be at least antialias_ratio");
  return c;
}

at::Tensor kaiser_sinc_filter(double cutoff, double half_width, std::int64_t kernel) {
  const auto half = kernel / 2;
  const double delta_f = 4 * half_width;
  const double a = 2.285 * static_cast<double>(half - 1) * M_PI * delta_f + 7.95;
  const double beta = a > 50.0 ? 0.1102 * (a - 8.7) : a >= 21.0 ? 0.5842 * std::pow(a - 21.0, 0.4) + 0.07886 * (a - 21.0)
                                                                 : 0.0;
  const auto window = at::kaiser_window(kernel, false, beta, at::kFloat);
  const auto time = kernel % 2 == 0 ? at::arange(-half, half, at::kFloat) + 0.5 : at::arange(kernel, at::kFloat) - half;
  if (cutoff == 0.0) return at::zeros_like(time);
  const auto t = 2 * cutoff * time;
  const auto sinc = at::where(t == 0, at::ones_like(t), at::sin(M_PI * t) / M_PI / t);
  auto f = 2 * cutoff * window * sinc;
  return f / f.sum();
}

SnakeBetaImpl::SnakeBetaImpl(std::int64_t channels, bool use_beta) {
  alpha = register_parameter("alpha", at::zeros({channels}));
  if (use_beta) beta = register_parameter("beta", at::zeros({channels}));
}

at::Tensor SnakeBetaImpl::forward(const at::Tensor& x) {
  const auto a = at::exp(alpha).view({1, -1, 1});
  const auto b = beta.defined() ? at::exp(beta).view({1, -1, 1}) : a;
  return x + (1.0 / (b + 1e-9)) * at::sin(x * a).pow(2);
}

AntiAliasActivationImpl::AntiAliasActivationImpl(std::int64_t channels, bool use_beta, std::int64_t r, std::int64_t k)
    : ratio(r), kernel(k) {
  const auto f = kaiser_sinc_filter(0.5 / static_cast<double>(r), 0.6 / static_cast<double>(r), k).view({1, 1, k});
  auto up = std::make_shared<torch::nn::Module>();
  up_filter = up->register_buffer("filter", f.clone());
  register_module("upsample", up);
  act = register_module("act", SnakeBeta(channels, use_beta));
  auto down = std::make_shared<torch::nn::Module>();
  down_filter = down->register_buffer("filter", f.clone());
  register_module("downsample", down);
}

at::Tensor AntiAliasActivationImpl::forward(const at::Tensor& x) {
  const auto c = x.size(1);
  // Kaiser-sinc 2x upsampling: replicate-pad kernel / ratio - 1, transposed conv, crop.
  const auto pad = kernel / ratio - 1;
  const auto crop_l = pad * ratio + (kernel - ratio) / 2, crop_r = pad * ratio + (kernel - ratio + 1) / 2;
  auto h = replicate_pad1d(x, {pad, pad});
  const std::vector<std::int64_t> stride = {ratio}, zero = {0}, one = {1};
  h = ratio * transposed_conv1d(h, up_filter.to(x.scalar_type()).expand({c, 1, kernel}), at::Tensor(), ratio, 0, c);
  h = h.narrow(2, crop_l, h.size(2) - crop_l - crop_r);
  h = act(h);
  // Kaiser-sinc low-pass and decimation.
  h = replicate_pad1d(h, {kernel / 2 + kernel % 2 - 1, kernel / 2});
  return at::conv1d(h, down_filter.to(h.scalar_type()).expand({c, 1, kernel}), at::Tensor(), stride, zero, one, c);
}

LTX2VocoderResBlockImpl::LTX2VocoderResBlockImpl(std::int64_t channels, std::int64_t k,
                                                 const std::vector<std::int64_t>& d, const LTX2VocoderConfig& c)
    : dilations(d), kernel(k), slope(c.leaky_relu_negative_slope), leaky(c.act_fn == "leaky_relu") {
  convs1 = register_module("convs1", torch::nn::ModuleList());
  convs2 = register_module("convs2", torch::nn::ModuleList());
  acts1 = register_module("acts1", torch::nn::ModuleList());
  acts2 = register_module("acts2", torch::nn::ModuleList());
  for (auto dil : d) {
    convs1->push_back(torch::nn::Conv1d(torch::nn::Conv1dOptions(channels, channels, k).dilation(dil)));
    convs2->push_back(torch::nn::Conv1d(torch::nn::Conv1dOptions(channels, channels, k)));
    for (auto* acts : {&acts1, &acts2}) {
      if (leaky) (*acts)->push_back(std::make_shared<torch::nn::Module>());  // no parameters
      else if (c.antialias)
        (*acts)->push_back(AntiAliasActivation(channels, c.act_fn == "snakebeta", c.antialias_ratio,
                                               c.antialias_kernel_size));
      else (*acts)->push_back(SnakeBeta(channels, c.act_fn == "snakebeta"));
    }
  }
}

at::Tensor LTX2VocoderResBlockImpl::forward(const at::Tensor& x_in) {
  auto act = [&](const std::shared_ptr<torch::nn::Module>& m, const at::Tensor& t) {
    if (leaky) return at::leaky_relu(t, slope);
    if (auto* a = m->as<AntiAliasActivationImpl>()) return a->forward(t);
    return m->as<SnakeBetaImpl>()->forward(t);
  };
  auto x = x_in;
  for (std::size_t i = 0; i < dilations.size(); ++i) {
    auto h = act(acts1[i], x);
    h = convs1[i]->as<torch::nn::Conv1dImpl>()->forward(same_pad(h, kernel, dilations[i]));
    h = act(acts2[i], h);
    h = convs2[i]->as<torch::nn::Conv1dImpl>()->forward(same_pad(h, kernel, 1));
    x = x + h;
  }
  return x;
}

LTX2VocoderImpl::LTX2VocoderImpl(const LTX2VocoderConfig& c) : config_(c) {
  conv_in = register_module("conv_in",
                            torch::nn::Conv1d(torch::nn::Conv1dOptions(c.in_channels, c.hidden_channels, 7).padding(3)));
  upsamplers = register_module("upsamplers", torch::nn::ModuleList());
  resnets = register_module("resnets", torch::nn::ModuleList());
  auto ch = c.hidden_channels;
  for (std::size_t i = 0; i < c.upsample_factors.size(); ++i) {
    const auto k = c.upsample_kernel_sizes[i], s = c.upsample_factors[i];
    upsamplers->push_back(torch::nn::ConvTranspose1d(
        torch::nn::ConvTranspose1dOptions(ch, ch / 2, k).stride(s).padding((k - s) / 2)));
    ch /= 2;
    for (std::size_t r = 0; r < c.resnet_kernel_sizes.size(); ++r)
      resnets->push_back(LTX2VocoderResBlock(ch, c.resnet_kernel_sizes[r], c.resnet_dilations[r], c));
  }
  if (c.act_fn != "leaky_relu")  // always anti-aliased SnakeBeta, as upstream
    act_out = register_module("act_out", AntiAliasActivation(ch, true, c.antialias_ratio, c.antialias_kernel_size));
  conv_out = register_module(
      "conv_out", torch::nn::Conv1d(torch::nn::Conv1dOptions(ch, c.out_channels, 7).padding(3).bias(c.final_bias)));
}

at::Tensor LTX2VocoderImpl::forward(const at::Tensor& mel, Intermediates* inter) {
  const auto& c = config_;
  if (mel.dim() != 4 || mel.size(1) * mel.size(3) != c.in_channels)
    throw Error("LTX2Vocoder: expected a mel [B, C, frames, mel_bins] with C x mel_bins = " +
                    std::to_string(c.in_channels) + ", got " + c10::str(mel.sizes()),
                ExitCode::bad_input);
  auto h = conv_in(mel.to(conv_in->weight.scalar_type()).transpose(2, 3).flatten(1, 2));
  if (inter) (*inter)["conv_in"] = h;
  const auto per = c.resnet_kernel_sizes.size();
  for (std::size_t i = 0; i < c.upsample_factors.size(); ++i) {
    if (c.act_fn == "leaky_relu") h = at::leaky_relu(h, c.leaky_relu_negative_slope);
    const auto& up = *upsamplers[i]->as<torch::nn::ConvTranspose1dImpl>();
    const auto padding = (*c10::get<torch::ExpandingArray<1>>(up.options.padding()))[0];
    h = transposed_conv1d(h, up.weight, up.bias, (*up.options.stride())[0], padding, 1);
    if (inter) (*inter)["upsamplers." + std::to_string(i)] = h;
    // The layer's ResBlocks all see h; their outputs are averaged.
    at::Tensor sum;
    for (std::size_t r = 0; r < per; ++r) {
      const auto y = resnets[i * per + r]->as<LTX2VocoderResBlockImpl>()->forward(h);
      sum = sum.defined() ? sum + y : y;
    }
    h = sum / static_cast<double>(per);
  }
  // LeakyReLU() with its default slope 0.01 before conv_out, as the original code.
  h = act_out ? act_out(h) : at::leaky_relu(h, 0.01);
  h = conv_out(h);
  if (inter) (*inter)["conv_out"] = h;
  if (c.final_act_fn == "tanh") h = at::tanh(h);
  else if (c.final_act_fn == "clamp") h = h.clamp(-1.0, 1.0);
  return h;
}

LTX2VocoderBweConfig LTX2VocoderBweConfig::from_json(const nlohmann::json& j, const std::string& where) {
  LTX2VocoderBweConfig c;
  // LTX2VocoderWithBWE's defaults (LTX-2.3), then the file's keys.
  nlohmann::json stage = {{"hidden_channels", 1536},
                          {"upsample_kernel_sizes", {11, 4, 4, 4, 4, 4}},
                          {"upsample_factors", {5, 2, 2, 2, 2, 2}},
                          {"act_fn", "snakebeta"},
                          {"antialias", true},
                          {"final_act_fn", nullptr},
                          {"final_bias", false},
                          {"bwe_in_channels", 128},
                          {"bwe_hidden_channels", 512},
                          {"bwe_upsample_kernel_sizes", {12, 11, 8, 4, 4}},
                          {"bwe_upsample_factors", {6, 5, 2, 2, 2}},
                          {"bwe_act_fn", "snakebeta"},
                          {"bwe_antialias", true},
                          {"bwe_final_act_fn", nullptr},
                          {"bwe_final_bias", false}};
  if (!j.is_object()) throw Error(where + ": expected a JSON object", ExitCode::bad_input);
  for (const auto& [k, v] : j.items()) stage[k] = v;
  c.vocoder = LTX2VocoderConfig::from_json(stage, where, "");
  c.bwe = LTX2VocoderConfig::from_json(stage, where, "bwe_");
  c.filter_length = cfg::get_int(j, "filter_length", c.filter_length, where);
  c.hop_length = cfg::get_int(j, "hop_length", c.hop_length, where);
  c.window_length = cfg::get_int(j, "window_length", c.window_length, where);
  c.num_mel_channels = cfg::get_int(j, "num_mel_channels", c.num_mel_channels, where);
  c.input_sampling_rate = cfg::get_int(j, "input_sampling_rate", c.input_sampling_rate, where);
  c.output_sampling_rate = cfg::get_int(j, "output_sampling_rate", c.output_sampling_rate, where);
  if (c.hop_length <= 0 || c.window_length < c.hop_length || c.filter_length < c.window_length)
    bad(where, "hop_length", "must be positive, with hop_length <= window_length <= filter_length");
  if (c.input_sampling_rate <= 0 || c.output_sampling_rate % c.input_sampling_rate != 0)
    bad(where, "output_sampling_rate", "must be a multiple of input_sampling_rate");
  if (c.bwe.in_channels != c.vocoder.out_channels * c.num_mel_channels)
    bad(where, "bwe_in_channels", "must be out_channels x num_mel_channels = " +
                                      std::to_string(c.vocoder.out_channels * c.num_mel_channels));
  if (c.bwe.upsample_total() * c.input_sampling_rate != c.hop_length * c.output_sampling_rate)
    bad(where, "bwe_upsample_factors", "must multiply to hop_length x output / input rate = " +
                                           std::to_string(c.hop_length * c.output_sampling_rate / c.input_sampling_rate));
  return c;
}

LTX2VocoderWithBWEImpl::LTX2VocoderWithBWEImpl(const LTX2VocoderBweConfig& c) : config_(c) {
  vocoder = register_module("vocoder", LTX2Vocoder(c.vocoder));
  bwe_generator = register_module("bwe_generator", LTX2Vocoder(c.bwe));
  mel_stft = register_module("mel_stft", std::make_shared<torch::nn::Module>());
  auto stft = mel_stft->register_module("stft_fn", std::make_shared<torch::nn::Module>());
  const auto n_freqs = c.filter_length / 2 + 1;
  // Zeros until the checkpoint's bases arrive, as upstream.
  forward_basis = stft->register_buffer("forward_basis", at::zeros({2 * n_freqs, 1, c.filter_length}));
  inverse_basis = stft->register_buffer("inverse_basis", at::zeros({2 * n_freqs, 1, c.filter_length}));
  mel_basis = mel_stft->register_buffer("mel_basis", at::zeros({c.num_mel_channels, n_freqs}));
  // The Hann-windowed sinc of the resampler (rolloff 0.99, 6 zero crossings), float32 as upstream.
  const auto ratio = c.output_sampling_rate / c.input_sampling_rate;
  const double rolloff = 0.99;
  const double width_zc = 6.0;
  const auto width = static_cast<std::int64_t>(std::ceil(width_zc / rolloff));
  const auto k = 2 * width * ratio + 1;
  const auto t = (at::arange(k, at::kFloat) / static_cast<double>(ratio) - static_cast<double>(width)) * rolloff;
  const auto window = at::cos(t.clamp(-width_zc, width_zc) * M_PI / width_zc / 2).pow(2);
  resampler_filter = (at::sinc(t) * window * rolloff / static_cast<double>(ratio)).view({1, 1, -1});
}

at::Tensor LTX2VocoderWithBWEImpl::log_mel(const at::Tensor& waveform) {
  const auto& c = config_;
  auto x = waveform.dim() == 2 ? waveform.unsqueeze(1) : waveform;
  x = at::constant_pad_nd(x, {std::max<std::int64_t>(0, c.window_length - c.hop_length), 0});
  const std::vector<std::int64_t> hop = {c.hop_length};
  const auto spec = at::conv1d(x, forward_basis.to(x.scalar_type()), at::Tensor(), hop);
  const auto n = spec.size(1) / 2;
  const auto re = spec.narrow(1, 0, n), im = spec.narrow(1, n, n);
  const auto magnitude = at::sqrt(re.pow(2) + im.pow(2));
  return at::log(at::clamp_min(at::matmul(mel_basis.to(magnitude.scalar_type()), magnitude), 1e-5));
}

at::Tensor LTX2VocoderWithBWEImpl::forward(const at::Tensor& mel, Intermediates* inter) {
  const auto& c = config_;
  auto x = vocoder(mel);
  if (inter) (*inter)["vocoder"] = x;
  const auto b = x.size(0), channels = x.size(1), samples = x.size(2);
  if (const auto rem = samples % c.hop_length; rem != 0) x = at::constant_pad_nd(x, {0, c.hop_length - rem});
  auto lm = log_mel(x.flatten(0, 1));
  if (inter) (*inter)["mel_stft"] = lm;
  const auto residual = bwe_generator(lm.unflatten(0, {b, channels}).transpose(2, 3));
  if (inter) (*inter)["bwe_generator"] = residual;
  // The 3x Hann-sinc resampling of the (padded) 16 kHz waveform: replicate-pad, transposed conv, crop.
  const auto ratio = c.output_sampling_rate / c.input_sampling_rate;
  const auto k = resampler_filter.size(2);
  const auto width = (k - 1) / (2 * ratio);
  auto skip = replicate_pad1d(x, {width, width});
  skip = ratio * transposed_conv1d(skip, resampler_filter.to(skip).expand({channels, 1, k}), at::Tensor(), ratio, 0,
                                  channels);
  const auto crop_l = 2 * width * ratio, crop_r = k - ratio;
  skip = skip.narrow(2, crop_l, skip.size(2) - crop_l - crop_r);
  const auto out = (residual + skip).clamp(-1.0, 1.0);
  return out.narrow(2, 0, samples * c.output_sampling_rate / c.input_sampling_rate);
}

}  // namespace yeto::models
