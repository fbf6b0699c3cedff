// The memory a LoRA run needs, before it runs: `yeto-host inspect --memory` prints it and the
// fleet planner (`yeto-host launch plan --gpus TABLE`) sizes islands with it. Torch-free.
//
// Inputs:
//   Inventory  what the model holds: every component's parameters (names, shapes, the dtype the
//              run keeps them in), the LoRA tensors the run trains, which components are
//              denoisers, and the family's token geometry (the plan's "memory" section, from
//              the family file). Built without reading a weight (app/memory_inventory.hpp: the
//              components are constructed without allocating pages), so a config of a
//              full-size model with no weights at all is enough.
//   RunShape   what the run does with it: media size, frames, text tokens, micro batch, storage
//              dtype, activation checkpointing, block swap, fsdp ranks, backend.
//
// Output: a Breakdown of the host's and the device's expected peak, by part (frozen base by
// storage dtype, LoRA + gradients + AdamW state, activations, workspace, runtime).
//
// The model (docs/DESIGN.md "Memory model"):
// - frozen base: each parameter's elements x its dtype's bytes; fp8 storage keeps the 2-D
//   weights of the denoisers as one byte per element plus a float32 scale per row;
// - LoRA: each trainable tensor's elements x 16 bytes (float32 master, gradient, AdamW m, v);
// - activations: per denoiser block, the tokens it sees (image tokens from the media size over
//   the family's token_pixels / token_frames, plus text tokens where the attention is joint)
//   times the sum of in + out features of its 2-D weights (what its linear layers keep for
//   backward, with the elementwise results between them) in the compute dtype, times the
//   backend's factor; plus the attention scores a backend without fused attention keeps
//   (heads x Lq x Lk float32, twice: the scores and their softmax). A checkpointed block keeps
//   only its input; one block's activations are rebuilt at a time in backward;
// - encoding (raw media, not cached latents): the VAE's first feature maps, a few maps of the
//   widest convolution that reads pixels at full resolution (encode_frames at a time), float32;
//   a transient before the step, so the peak holds the larger of it and the step's activations;
// - fsdp: each rank keeps 1/N of the blocks plus two whole Linear weights (the one gathered for
//   its GEMM and the next one prefetched; checkpoints every block); block swap: the Linear weights
//   of N blocks live in host memory, two of them (the largest) in flight on the device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::memory {

struct TensorEntry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;  // "f32", "bf16", "f16", "f8_e4m3", "u8", "i64", ...
  std::int64_t numel() const;
};

struct ComponentEntry {
  std::string name;        // model_index.json name ("transformer", "vae", ...)
  std::string class_name;
  bool denoiser = false;
  std::vector<TensorEntry> parameters;  // parameters and buffers, as the run keeps them
};

// The family's token geometry (the plan's "memory" object; docs/PLUGIN_SDK.md).
struct TokenGeometry {
  int token_pixels = 16;   // pixels per latent token along height and width (VAE factor x patch)
  int token_frames = 0;    // frames per latent token along time for video (first frame alone); 0: images
  int text_tokens = 0;     // text tokens the denoiser attends to (the pipeline's max_sequence_length)
  std::string attention = "joint";  // "joint": image and text tokens in one sequence; "self_cross"
  std::string heads_key = "num_attention_heads";  // denoiser config key giving the attention heads
  // Frames the VAE encodes at a time (a causal video VAE's chunk); 0: all of a sample's frames.
  int encode_frames = 0;
  // Linear layers of a block that run once per sample (the timestep modulation), not per token.
  std::vector<std::string> per_sample_linears;
  // Linear layers of a block that see only the text tokens (a joint block's context stream, a
  // cross-attention's keys and values).
  std::vector<std::string> text_linears;
  static TokenGeometry from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_json() const;
};

struct Inventory {
  std::string model;                      // as the run names it
  std::vector<ComponentEntry> components;
  std::vector<TensorEntry> lora;          // the trainable tensors (float32)
  std::map<std::string, int> heads;       // denoiser component -> attention heads (from its config)
  TokenGeometry tokens;
  std::string compute_dtype = "bf16";
  nlohmann::json to_json() const;
  static Inventory from_json(const nlohmann::json& j, const std::string& where);
};

enum class Backend { cpu, cuda };

struct RunShape {
  int height = 1024, width = 1024;
  int frames = 1;                 // video frames (1 for images)
  int text_tokens = 0;            // 0: the family's default
  int micro_batch = 1;
  std::string storage = "auto";   // "auto" (the compute dtype) or "fp8"
  bool checkpointing = false;
  int checkpointing_every = 1;
  int block_swap = 0;             // blocks kept in host memory (CUDA: swapped in as they run)
  int fsdp_ranks = 1;             // > 1: the frozen blocks sharded over the island's ranks
  Backend backend = Backend::cpu;
  bool fused_attention = false;   // SDPA / flash attention: no [L, L] scores kept
  // Data from `yeto-host cache`: no media is encoded during the steps. The VAE and text encoders
  // still count when the pipeline loads them: a repository whose model_index.json lists them as
  // null (as a slim copy for cached training does) has none in its inventory.
  bool cached_latents = false;
};

struct Part {
  std::string name;    // "base bf16", "lora + adamw", "activations", ...
  double host_bytes = 0;
  double device_bytes = 0;
};

struct Breakdown {
  std::vector<Part> parts;
  double host_bytes = 0;     // expected peak resident set of the process
  double device_bytes = 0;   // expected peak of the accelerator's allocator (0 on the CPU backend)
  // Facts the numbers came from.
  std::int64_t base_params = 0, lora_params = 0, blocks = 0;
  std::int64_t image_tokens = 0, text_tokens = 0;
  double blocks_bytes = 0;   // the denoisers' blocks as stored (all of them, on every rank)
  nlohmann::json to_json() const;
};

// The CPU backend's measured constants: a yeto-host process with LibTorch, oneDNN and a family
// plugin loaded, and the bytes kept per token and per linear feature per byte of compute dtype.
inline constexpr double kCpuRuntimeBytes = 210e6;
inline constexpr double kCpuActivationFactor = 1.0;
// glibc's dynamic mmap threshold (up to 32 MiB) keeps freed activation blocks in the heap, so a
// CPU process holds part of a step's transients after they are freed: this fraction of the
// step's activations without checkpointing (measured: a checkpointed Flux mid run peaks at 473 MiB,
// 357 MiB with MALLOC_MMAP_THRESHOLD_=131072).
inline constexpr double kCpuHeapRetention = 0.5;

// The backend's fixed costs and activation factor (measured; docs/BENCHMARKS.md).
struct BackendCosts {
  double runtime_host_bytes;     // the process with LibTorch and the plugin loaded
  double runtime_device_bytes;   // CUDA context and allocator reserve; 0 on the CPU
  double activation_factor;      // bytes kept per (token x linear in+out feature) per compute-dtype byte
  double heap_retention;         // fraction of the uncheckpointed activations the allocator keeps
  static BackendCosts of(Backend b);
};

Breakdown estimate(const Inventory& inv, const RunShape& run);

// Image tokens of one sample and frames after the VAE.
std::int64_t image_tokens(const TokenGeometry& g, int height, int width, int frames);
double dtype_bytes(const std::string& dtype);
std::string format_bytes(double bytes);  // "1.52 GB", "312 MB"

// A plain-text table of a breakdown (inspect --memory).
std::string describe(const Inventory& inv, const RunShape& run, const Breakdown& b);

}  // namespace yeto::memory
