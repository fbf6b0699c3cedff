// NAVA's joint audio-video denoiser WanAVModel (Align-then-Fuse MMDiT on a Wan 2.2 TI2V backbone)
// in LibTorch, with NAVA's own parameter names (the WanAVModel state-dict names; the released
// NAVA.safetensors adds the prefix "backbone.").
//
// Structure (nava_src/models/nava/modules/model_mm.py with the release's add_spk_emb and
// no_split_norm_ffn): the video latents [C_v, F, H, W] are patchified by a Conv3d (1, 2, 2), the
// audio latents [L, C_a] embedded by a Conv1d(k 7) -> SiLU -> SwiGLU ConvMLP, per sample, then
// each stream is zero-padded to the batch's maximum length. `num_double_layers` double-stream
// blocks (separate video / audio q, k, v, o, q/k RMSNorms and adaLN modulations; shared norm3 and
// FFN) run one joint self-attention over the valid tokens of both streams, then
// `num_single_layers` single-stream blocks (one set of weights over the concatenated stream),
// then a modulated head per modality. Text cross-attention (no text mask: the zero rows padding
// the text to text_len are attended) and an optional speaker (timbre) token injected into the
// audio context. RoPE: 3-D for video, 1-D for audio on the temporal band only, scaled by
// temporal_rope_scaling_factor; positions restart at 0 per sample and modality; padded tokens
// are not rotated. Every projection is an nn::Linear (LoRA-capable).
//
// Numerics: float32 as the recorded references; the computation follows the model's dtype (a bf16
// model computes its GEMMs in bf16; norms and RoPE in float32 / float64 as upstream).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::nava {

struct NavaConfig {
  std::vector<std::int64_t> patch_size = {1, 2, 2};
  std::string model_type = "ti2v";
  std::int64_t dim = 3072;
  std::int64_t ffn_dim = 14336;
  std::int64_t freq_dim = 256;
  std::int64_t num_heads = 24;
  std::int64_t num_double_layers = 10;
  std::int64_t num_single_layers = 20;
  std::int64_t vid_in_dim = 48;
  std::int64_t vid_out_dim = 48;
  std::int64_t audio_in_dim = 128;
  std::int64_t audio_out_dim = 128;
  std::int64_t text_len = 512;
  std::int64_t text_dim = 4096;
  double eps = 1e-6;
  double temporal_rope_scaling_factor = 0.24;
  bool add_spk_emb = true;
  static constexpr std::int64_t kSpeakerDim = 192;

  std::int64_t head_dim() const { return dim / num_heads; }
  // The ConvMLP's hidden width: 256 * ceil(int(8 dim / 3) / 256).
  std::int64_t audio_hidden() const;
  // Reads a config.json in NAVA_6B.json layout (plus text_dim, add_spk_emb, no_split_norm_ffn).
  // Throws std::invalid_argument naming the key for a wrong type or value, and for the options
  // this implementation does not serve (no_split_norm_ffn false, num_double_final_layers,
  // cross_1d_rope, windowed attention, qk_norm / cross_attn_norm off, the i2v / audio model types).
  static NavaConfig from_json(const nlohmann::json& j);
};

// ---- RoPE ----------------------------------------------------------------------------------

// rope_params(max_seq_len, dim, theta, scaling): the inverse frequencies scaling / theta^(2k/dim),
// k < dim/2, float64.
at::Tensor rope_inv_freq(std::int64_t dim, double scaling = 1.0, double theta = 10000.0);
// The complex dims of a head: video bands (temporal, height, width) = [c - 2 (c//3), c//3, c//3],
// c = head_dim / 2; audio rotates the temporal band only.
struct RopeBands {
  std::int64_t temporal = 0, height = 0, width = 0;
  explicit RopeBands(std::int64_t head_dim);
  std::int64_t total() const { return temporal + height + width; }
};
// WanAVModel.set_rope_params' tables at `positions` (int64 [R]): freqs [R, c, 2] and freqs_audio
// [R, temporal, 2] as (cos, sin) = (real, imag), float64.
std::pair<at::Tensor, at::Tensor> rope_tables(std::int64_t head_dim, double temporal_scaling,
                                              const at::Tensor& positions);

// The rotation of a batch's tokens as (cos, sin) [B, L, 1, head_dim / 2] float64; rows past a
// sample's tokens are the identity (cos 1, sin 0), so padded tokens pass unchanged.
struct Rotation {
  at::Tensor cos, sin;
  bool defined() const { return cos.defined(); }
};
// Video tokens of grids (f, h, w) per sample, padded to `length`.
Rotation video_rotation(std::int64_t head_dim, const std::vector<std::vector<std::int64_t>>& grids,
                        std::int64_t length);
// Audio tokens of lengths L per sample, padded to `length`.
Rotation audio_rotation(std::int64_t head_dim, double temporal_scaling, const std::vector<std::int64_t>& lengths,
                        std::int64_t length);
// [video; audio] along the token axis (either may be undefined).
Rotation join(const Rotation& video, const Rotation& audio);
// x [B, L, heads, head_dim] rotated in float64 (interleaved pairs), returned in x's dtype.
at::Tensor apply_rotation(const at::Tensor& x, const Rotation& r);

// ---- blocks ---------------------------------------------------------------------------------

// Linear -> GELU(tanh) -> Linear as children "0" and "2" (text_embedding, ffn).
class GeluMlpImpl : public torch::nn::Module {
 public:
  GeluMlpImpl(std::int64_t in, std::int64_t hidden, std::int64_t out);
  at::Tensor forward(const at::Tensor& x);
  nn::Linear fc0{nullptr}, fc2{nullptr};
};
TORCH_MODULE(GeluMlp);

// A modulation table `modulation` [1, n, dim] (ModulationAdd / the head's).
class ModulationImpl : public torch::nn::Module {
 public:
  ModulationImpl(std::int64_t dim, std::int64_t n);
  at::Tensor modulation;
};
TORCH_MODULE(Modulation);

// Projections of one modality: q, k, v, o (+ norm_q, norm_k) or their `_audio` twins.
struct Projections {
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
};

// A self- or cross-attention with one (single-stream) or two (double-stream: q_audio, ...) sets of
// projections.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(std::int64_t dim, std::int64_t heads, double eps, bool two_streams);
  Projections video, audio;  // audio: only with two_streams
  std::int64_t heads;
  bool two_streams;
};
TORCH_MODULE(Attention);

// What the blocks of one forward share.
struct StreamLayout {
  std::int64_t batch = 0;
  std::int64_t video_len = 0, audio_len = 0;      // padded lengths (0: the modality is absent)
  std::vector<std::int64_t> video_seq, audio_seq; // true token counts per sample
  at::Tensor video_keys, audio_keys;              // bool [B, video_len] / [B, audio_len]: valid tokens
  Rotation video_rope, audio_rope;
  bool joint = true;                              // false: masking_modality (each stream attends itself)
  at::Tensor context;                             // [B, text_len, dim]
};

// The modulation of one stream, chunked: six [B, L or 1, dim] tensors (shift, scale, gate of
// attention; shift, scale, gate of the FFN).
using Chunks = std::vector<at::Tensor>;

class DoubleBlockImpl : public torch::nn::Module {
 public:
  DoubleBlockImpl(const NavaConfig& c);
  // x [B, video_len + audio_len, dim]; e_video / e_audio the time projections [B, L or 1, 6, dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& e_video, const at::Tensor& e_audio,
                     const StreamLayout& s);
  Attention self_attn{nullptr}, cross_attn{nullptr};
  nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  GeluMlp ffn{nullptr};
  Modulation modulation{nullptr}, modulation_audio{nullptr};
};
TORCH_MODULE(DoubleBlock);

class SingleBlockImpl : public torch::nn::Module {
 public:
  SingleBlockImpl(const NavaConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& e_video, const at::Tensor& e_audio,
                     const StreamLayout& s);
  Attention self_attn{nullptr}, cross_attn{nullptr};
  nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  GeluMlp ffn{nullptr};
  Modulation modulation{nullptr};
};
TORCH_MODULE(SingleBlock);

// Head: LN(x) (1 + scale) + shift with e + `modulation` [1, 2, dim], then `head` (Linear).
class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(std::int64_t dim, std::int64_t out, double eps);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& e);
  nn::LayerNorm norm{nullptr};
  nn::Linear head{nullptr};
  at::Tensor modulation;
};
TORCH_MODULE(Head);

// patch_embedding_audio: Conv1d(C_a, dim, 7, pad 3) as "0", SiLU, ConvMLP as "2" (w1, w2, w3).
class AudioEmbeddingImpl : public torch::nn::Module {
 public:
  AudioEmbeddingImpl(std::int64_t in, std::int64_t dim, std::int64_t hidden);
  // [L, C_a] -> [L, dim]
  at::Tensor forward(const at::Tensor& audio);
  torch::nn::Conv1d conv{nullptr};
  std::shared_ptr<torch::nn::Module> mlp;
  torch::nn::Conv1d w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(AudioEmbedding);

// SpkToken: LayerNorm(192) "net.0", Linear "net.1", SiLU, Linear "net.3", LayerNorm "out_norm";
// a row with sum(x^2) <= 1e-6 ("no reference") gives the learned null_token.
class SpeakerEmbeddingImpl : public torch::nn::Module {
 public:
  explicit SpeakerEmbeddingImpl(std::int64_t dim);
  at::Tensor forward(const at::Tensor& spk);  // [n, 192] -> [n, dim]
  std::shared_ptr<torch::nn::Module> net;
  nn::LayerNorm in_norm{nullptr}, out_norm{nullptr};
  nn::Linear fc1{nullptr}, fc3{nullptr};
  at::Tensor null_token;
};
TORCH_MODULE(SpeakerEmbedding);

// One forward's inputs. Lists are per sample; an empty video (audio) list means the modality is
// absent (audio-only / video-only). Video latents come channel-first [C_v, F, H, W] with H and W
// multiples of the patch (NAVA.forward pads them); audio [L, C_a]; text [L_text <= text_len,
// text_dim].
struct Inputs {
  std::vector<at::Tensor> video, audio;
  at::Tensor t;  // [B] on the 0..1000 scale
  std::vector<at::Tensor> video_context, audio_context;
  std::int64_t video_seq_len = 0, audio_seq_len = 0;  // 0: the batch maximum
  at::Tensor speaker;                                 // [n, 192] or undefined
  std::vector<std::vector<std::int64_t>> speaker_positions;  // per sample: text rows the speakers take
  bool masking_modality = false;
  bool first_frame_is_clean = false;
};

struct Outputs {
  std::vector<at::Tensor> video;  // [C_v, F, H, W] per sample (padded H / W kept)
  std::vector<at::Tensor> audio;  // [L, C_a]
};

// Named intermediate tensors (intermediate.*), when a forward is asked for them.
using Recorder = std::function<void(const std::string&, const at::Tensor&)>;

class WanAVModelImpl : public torch::nn::Module, public nn::CheckpointedBlocks {
 public:
  explicit WanAVModelImpl(const NavaConfig& config);
  // Throws std::invalid_argument naming the input for shapes the model cannot take.
  Outputs forward(const Inputs& in, const Recorder& record = nullptr);
  const NavaConfig& config() const { return config_; }
  // The dtype the model computes in (its projections').
  at::ScalarType compute_dtype() const { return text_embedding->fc0->compute_dtype(); }
  at::Device device() const { return patch_embedding->weight.device(); }

  torch::nn::Conv3d patch_embedding{nullptr};
  AudioEmbedding patch_embedding_audio{nullptr};
  SpeakerEmbedding speaker_embedding{nullptr};
  GeluMlp text_embedding{nullptr};
  std::shared_ptr<torch::nn::Module> time_embedding, time_projection;
  nn::Linear time_fc0{nullptr}, time_fc2{nullptr}, time_proj{nullptr};
  torch::nn::ModuleList double_blocks{nullptr}, single_blocks{nullptr};
  Head head{nullptr}, head_audio{nullptr};

 private:
  // e [B, T, dim] and e0 [B, T, 6, dim] of timesteps t [B, T].
  std::pair<at::Tensor, at::Tensor> time_embeddings(const at::Tensor& t);
  NavaConfig config_;
};
TORCH_MODULE(WanAVModel);

// sinusoidal_embedding_1d(dim, t) in float64: [cos, sin] of t * 10000^(-k/half).
at::Tensor sinusoidal_embedding(std::int64_t dim, const at::Tensor& t);

}  // namespace yeto::nava
