// LTX-2's audio codecs with Diffusers' parameter names: AutoencoderKLLTX2Audio (the causal 2-D
// VAE over stereo log-mel spectrograms), LTX2Vocoder (LTX-2.0's HiFi-GAN style vocoder, mel ->
// 24 kHz) and LTX2VocoderWithBWE (LTX-2.3's: a SnakeBeta vocoder to 16 kHz, a causal log-mel of
// that waveform, a bandwidth-extension generator whose output is added to a 3x Hann-sinc
// resampling: 48 kHz), plus LTX2Pipeline's audio-latent helpers.
//
// Audio VAE: time is the "height" axis and every convolution is causal along it (k - 1 rows in
// front); pixel norm x / sqrt(mean_c(x^2) + 1e-6), SiLU; the encoder downsamples time and mel 2x
// per level (front pad 2 on time, 1 behind on mel, stride-2 conv), the decoder upsamples nearest
// 2x, convolves causally and drops the first time row, so T latent frames decode to 4 T - 3 mel
// frames (three levels). Latents [B, C, T, M] are packed for a denoiser as [B, T, C * M] (feature
// c * M + m) and normalised there by latents_mean / latents_std of that packed length.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace yeto::models {

// ---- AutoencoderKLLTX2Audio ----------------------------------------------------------------

struct LTX2AudioVaeConfig {
  std::int64_t base_channels = 128;
  std::int64_t output_channels = 2;
  std::vector<std::int64_t> ch_mult = {1, 2, 4};
  std::int64_t num_res_blocks = 2;
  std::int64_t in_channels = 2;
  std::int64_t latent_channels = 8;
  std::int64_t mel_bins = 64;  // the decoder's output mel bins
  bool double_z = true;
  std::int64_t sample_rate = 16000;
  std::int64_t mel_hop_length = 160;

  // 2^(len(ch_mult) - 1): the time and mel compression.
  std::int64_t downsample_factor() const { return std::int64_t{1} << (ch_mult.size() - 1); }
  // Mel frames a latent of `frames` decodes to: f * frames - (f - 1), at least 1.
  std::int64_t decoded_frames(std::int64_t frames) const;

  // Refuses (yeto::Error bad_input, naming `where` and the key) what LTX-2 does not use: group
  // norm, a causality axis other than "height", attention blocks.
  static LTX2AudioVaeConfig from_json(const nlohmann::json& j, const std::string& where = "config.json");
};

// Conv2d padded causally on the time (height) axis; parameters `conv.weight`, `conv.bias`.
class LTX2AudioCausalConv2dImpl : public torch::nn::Module {
 public:
  LTX2AudioCausalConv2dImpl(std::int64_t in, std::int64_t out, std::int64_t kernel);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv{nullptr};
  std::int64_t kernel;
};
TORCH_MODULE(LTX2AudioCausalConv2d);

class LTX2AudioResnetBlockImpl : public torch::nn::Module {
 public:
  LTX2AudioResnetBlockImpl(std::int64_t in, std::int64_t out);
  at::Tensor forward(const at::Tensor& x);
  LTX2AudioCausalConv2d conv1{nullptr}, conv2{nullptr}, nin_shortcut{nullptr};
};
TORCH_MODULE(LTX2AudioResnetBlock);

class LTX2AudioEncoderImpl : public torch::nn::Module {
 public:
  explicit LTX2AudioEncoderImpl(const LTX2AudioVaeConfig& c);
  at::Tensor forward(const at::Tensor& x);
  LTX2AudioCausalConv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down{nullptr};
  std::shared_ptr<torch::nn::Module> mid;
};
TORCH_MODULE(LTX2AudioEncoder);

class LTX2AudioDecoderImpl : public torch::nn::Module {
 public:
  explicit LTX2AudioDecoderImpl(const LTX2AudioVaeConfig& c);
  at::Tensor forward(const at::Tensor& z);
  LTX2AudioCausalConv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList up{nullptr};
  std::shared_ptr<torch::nn::Module> mid;
  LTX2AudioVaeConfig config;
};
TORCH_MODULE(LTX2AudioDecoder);

struct AudioLatentDist {
  at::Tensor mean, logvar;  // logvar clamped to [-30, 20]
};

class AutoencoderKLLTX2AudioImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLLTX2AudioImpl(const LTX2AudioVaeConfig& config);
  // Log-mel [B, in_channels, frames, mel_bins] -> the posterior [B, latent_channels, T, M].
  AudioLatentDist encode(const at::Tensor& mel);
  // Raw latents [B, latent_channels, T, M] -> mel [B, output_channels, 4 T - 3, mel_bins].
  at::Tensor decode(const at::Tensor& z);
  // The log-mel this VAE encodes, from waveforms [B, in_channels, samples] at its sample_rate
  // (ltx2_log_mel with its mel_hop_length and mel_bins, n_fft 1024 as ltx-core).
  at::Tensor log_mel(const at::Tensor& waveform) const;
  const LTX2AudioVaeConfig& config() const { return config_; }

  LTX2AudioEncoder encoder{nullptr};
  LTX2AudioDecoder decoder{nullptr};
  at::Tensor latents_mean, latents_std;  // buffers [base_channels], the packed-latent statistics

 private:
  LTX2AudioVaeConfig config_;
};
TORCH_MODULE(AutoencoderKLLTX2Audio);

// LTX-2's audio front end (ltx-core's AudioProcessor, torchaudio's MelSpectrogram): waveforms
// [B, C, samples] at `sample_rate` -> log-mel [B, C, 1 + samples / hop, n_mels]: periodic Hann
// window of n_fft samples, centred frames (reflect padding n_fft / 2), STFT magnitude (power 1),
// Slaney-scale mel filters with Slaney area normalisation over 0 .. sample_rate / 2,
// log(clamp(., 1e-5)). The clip must be longer than n_fft / 2 samples.
struct LTX2MelConfig {
  std::int64_t sample_rate = 16000;
  std::int64_t n_fft = 1024;
  std::int64_t hop_length = 160;
  std::int64_t n_mels = 64;
};
at::Tensor ltx2_log_mel(const at::Tensor& waveform, const LTX2MelConfig& config);
// torchaudio.functional.melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate, norm="slaney",
// mel_scale="slaney"): [n_freqs, n_mels], float32.
at::Tensor slaney_mel_filterbank(std::int64_t n_freqs, double f_min, double f_max, std::int64_t n_mels,
                                 std::int64_t sample_rate);

// LTX2Pipeline's audio-latent helpers. pack: [B, C, T, M] -> [B, T, C * M]; unpack is its
// inverse for `num_mel_bins` = M; normalize / denormalize act on the packed (last) axis.
at::Tensor ltx2_pack_audio_latents(const at::Tensor& latents);
at::Tensor ltx2_unpack_audio_latents(const at::Tensor& packed, std::int64_t num_mel_bins);
at::Tensor ltx2_normalize_audio_latents(const at::Tensor& packed, const at::Tensor& mean, const at::Tensor& std);
at::Tensor ltx2_denormalize_audio_latents(const at::Tensor& packed, const at::Tensor& mean, const at::Tensor& std);

// The Diffusers name of an audio VAE tensor named as ltx-core stores it (LTX-2's release, e.g.
// `ltx-2.3-22b-dev_audio_vae.safetensors`, or the `audio_vae.` part of a combined checkpoint): the
// `audio_vae.` prefix goes, per_channel_statistics.mean-of-means / std-of-means become
// latents_mean / latents_std (Diffusers' conversion); every other name is already Diffusers'.
std::string ltx2_audio_vae_diffusers_name(const std::string& original);

// ---- vocoders ------------------------------------------------------------------------------

struct LTX2VocoderConfig {
  std::int64_t in_channels = 128;
  std::int64_t hidden_channels = 1024;
  std::int64_t out_channels = 2;
  std::vector<std::int64_t> upsample_kernel_sizes = {16, 15, 8, 4, 4};
  std::vector<std::int64_t> upsample_factors = {6, 5, 2, 2, 2};
  std::vector<std::int64_t> resnet_kernel_sizes = {3, 7, 11};
  std::vector<std::vector<std::int64_t>> resnet_dilations = {{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
  std::string act_fn = "leaky_relu";  // leaky_relu, snake, snakebeta
  double leaky_relu_negative_slope = 0.1;
  bool antialias = false;
  std::int64_t antialias_ratio = 2;
  std::int64_t antialias_kernel_size = 12;
  std::string final_act_fn = "tanh";  // tanh, clamp or "" (none)
  bool final_bias = true;
  std::int64_t output_sampling_rate = 24000;

  std::int64_t upsample_total() const;
  // Reads the keys with `prefix` ("" or "bwe_"); errors name `where` and the key.
  static LTX2VocoderConfig from_json(const nlohmann::json& j, const std::string& where = "config.json",
                                     const std::string& prefix = "");
};

// Kaiser-windowed sinc low-pass (BigVGAN's kaiser_sinc_filter1d), [kernel].
at::Tensor kaiser_sinc_filter(double cutoff, double half_width, std::int64_t kernel);

// SnakeBeta with log-scale parameters `alpha`, `beta` [channels]:
// x + 1 / (exp(beta) + 1e-9) * sin(exp(alpha) x)^2 (Snake: alpha in both places).
class SnakeBetaImpl : public torch::nn::Module {
 public:
  SnakeBetaImpl(std::int64_t channels, bool use_beta);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor alpha, beta;
};
TORCH_MODULE(SnakeBeta);

// An activation wrapped in Kaiser-sinc 2x up / down sampling with replicate padding:
// `upsample.filter`, `act.*`, `downsample.filter` (the filters are checkpoint buffers).
class AntiAliasActivationImpl : public torch::nn::Module {
 public:
  AntiAliasActivationImpl(std::int64_t channels, bool use_beta, std::int64_t ratio, std::int64_t kernel);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor up_filter, down_filter;
  SnakeBeta act{nullptr};
  std::int64_t ratio, kernel;
};
TORCH_MODULE(AntiAliasActivation);

// HiFi-GAN ResBlock: for each dilation d, x += conv2(act(conv1_d(act(x)))) ('same' padding).
class LTX2VocoderResBlockImpl : public torch::nn::Module {
 public:
  LTX2VocoderResBlockImpl(std::int64_t channels, std::int64_t kernel, const std::vector<std::int64_t>& dilations,
                          const LTX2VocoderConfig& c);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::ModuleList convs1{nullptr}, convs2{nullptr}, acts1{nullptr}, acts2{nullptr};
  std::vector<std::int64_t> dilations;
  std::int64_t kernel;
  double slope;
  bool leaky;
};
TORCH_MODULE(LTX2VocoderResBlock);

// Outputs of named submodules during one call (forward hooks upstream), when asked for.
using Intermediates = std::map<std::string, at::Tensor>;

class LTX2VocoderImpl : public torch::nn::Module {
 public:
  explicit LTX2VocoderImpl(const LTX2VocoderConfig& config);
  // Mel [B, C, frames, mel_bins] (C * mel_bins = in_channels; channel c * mel_bins + m) ->
  // waveform [B, out_channels, frames * prod(upsample_factors)]. `inter` receives conv_in,
  // upsamplers.<i> and conv_out (before the final activation).
  at::Tensor forward(const at::Tensor& mel, Intermediates* inter = nullptr);
  const LTX2VocoderConfig& config() const { return config_; }

  torch::nn::Conv1d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList upsamplers{nullptr}, resnets{nullptr};
  AntiAliasActivation act_out{nullptr};  // snake variants

 private:
  LTX2VocoderConfig config_;
};
TORCH_MODULE(LTX2Vocoder);

struct LTX2VocoderBweConfig {
  LTX2VocoderConfig vocoder, bwe;
  std::int64_t filter_length = 512, hop_length = 80, window_length = 512, num_mel_channels = 64;
  std::int64_t input_sampling_rate = 16000, output_sampling_rate = 48000;
  static LTX2VocoderBweConfig from_json(const nlohmann::json& j, const std::string& where = "config.json");
};

// The Diffusers name of a vocoder tensor named as ltx-core stores it (LTX-2.0's Vocoder or LTX-2.3's
// VocoderWithBWE (`bwe`), standalone or under a combined checkpoint's `vocoder.`): ups ->
// upsamplers, resblocks -> resnets, conv_pre / conv_post -> conv_in / conv_out, act_post ->
// act_out, downsample.lowpass -> downsample (Diffusers' LTX-2.0 / 2.3 conversion).
std::string ltx2_vocoder_diffusers_name(const std::string& original, bool bwe);

class LTX2VocoderWithBWEImpl : public torch::nn::Module {
 public:
  explicit LTX2VocoderWithBWEImpl(const LTX2VocoderBweConfig& config);
  // Mel [B, C, frames, mel_bins] -> waveform [B, out_channels, 3 x 160 x frames] at
  // output_sampling_rate. `inter` receives vocoder (the 16 kHz stage), mel_stft (its log-mel
  // [B * C, n_mels, frames']) and bwe_generator (the residual).
  at::Tensor forward(const at::Tensor& mel, Intermediates* inter = nullptr);
  // The causal log-mel of waveforms [N, samples] (zero-padded in front by window - hop):
  // [N, num_mel_channels, samples / hop].
  at::Tensor log_mel(const at::Tensor& waveform);
  const LTX2VocoderBweConfig& config() const { return config_; }

  LTX2Vocoder vocoder{nullptr}, bwe_generator{nullptr};
  std::shared_ptr<torch::nn::Module> mel_stft;
  at::Tensor forward_basis, inverse_basis, mel_basis;  // buffers of mel_stft (checkpoint)
  at::Tensor resampler_filter;  // the Hann-windowed sinc of the 3x resampler, computed here

 private:
  LTX2VocoderBweConfig config_;
};
TORCH_MODULE(LTX2VocoderWithBWE);

}  // namespace yeto::models
