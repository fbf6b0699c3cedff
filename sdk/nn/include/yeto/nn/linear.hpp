// A Linear layer that can carry LoRA adapters, laid out the way PEFT lays them out.
//
// Parameter names: the base layer registers `weight` and `bias` directly (so a module built from
// these layers has exactly the Diffusers/transformers state-dict names, e.g.
// `transformer_blocks.0.attn.to_q.weight`), and each adapter adds `lora_A.<adapter>.weight`
// [r, in] and `lora_B.<adapter>.weight` [out, r], PEFT's in-memory names. PEFT files drop the
// adapter name (`...to_q.lora_A.weight`); lora_state_dict()/load_lora_state_dict() convert.
//
// forward(x) = x W^T + b + sum over active, unmerged adapters of scale * B(A(dropout(x))),
// scale = alpha / r (alpha / sqrt(r) with use_rslora), as PEFT computes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace yeto::nn {

struct LoraConfig {
  std::int64_t r = 4;
  double alpha = 4.0;
  double dropout = 0.0;
  bool use_rslora = false;
  // "kaiming" (PEFT's default: A ~ U(-1/sqrt(in), 1/sqrt(in)), B = 0), "gaussian"
  // (A ~ N(0, 1/r), B = 0) or "zeros" (both zero, for loading).
  std::string init = "kaiming";
  double scale() const;  // alpha / r, or alpha / sqrt(r) with use_rslora
};

// ---- fp8 (e4m3) weight-only storage --------------------------------------------------------
//
// float8_e4m3fn: 1 sign, 4 exponent (bias 7) and 3 mantissa bits; no infinities, S.1111.111 is
// NaN, the largest finite value is 448 and the smallest subnormal 2^-9. LibTorch 1.13 has no
// float8 dtype, so codes are held as uint8.
//
// The code of x: round to nearest, ties to even; |x| beyond 448 (and +-inf) saturates to +-448;
// NaN encodes as 0x7F (0xFF with the sign bit set); -0 keeps its sign.
std::uint8_t encode_e4m3(float x);
float decode_e4m3(std::uint8_t code);
// The 256 decoded values (index = code) as a float32 tensor [256].
at::Tensor e4m3_table();

// Quantises a 2-D weight [out, in] row by row: scale[r] = max |w[r, :]| / 448 (1 for an all-zero
// row), codes = encode_e4m3(w / scale[r]). Returns {codes uint8 [out, in], scale float32 [out]},
// on w's device.
std::pair<at::Tensor, at::Tensor> quantize_e4m3_rows(const at::Tensor& w);
// decode(codes) * scale[:, None] in `dtype`: a CPU loop over a lookup table on the CPU, a table
// lookup (index_select) elsewhere.
at::Tensor dequantize_e4m3_rows(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype);
// The same for codes of any rank >= 1 (a convolution's [out, ...]): one scale per index of the
// first dimension.
at::Tensor dequantize_e4m3(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype);
// The block [row0, row0 + rows) x [col0, col0 + cols) of the same, as a contiguous [rows, cols].
at::Tensor dequantize_e4m3_block(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype,
                                 std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols);
// The largest dequantised block the fp8 GEMMs below hold at once (elements: 16 MB in bf16), so a
// layer's transient is a block rather than a 16-bit copy of its weight (a 5120 x 13824 feed-forward
// matrix would be 141 MB per call, forward and backward).
inline constexpr std::int64_t kFp8BlockElements = std::int64_t{8} << 20;
// x W^T + b with W = dequantize(codes, scale) in `dtype`, dequantised `block_elements` at a time
// (equal blocks of output rows, at least 64 each; one GEMM when the weight fits in one block).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& bias,
                      at::ScalarType dtype, std::int64_t block_elements = kFp8BlockElements);
// g W (the input gradient of fp8_linear), dequantised in equal blocks of input columns (>= 64).
at::Tensor fp8_grad_input(const at::Tensor& g, const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype,
                          std::int64_t block_elements = kFp8BlockElements);

// The whole weight of a Linear that keeps only a shard of it between uses (train.shard = "fsdp":
// BlockShards gathers every Linear weight of a block as its own unit). gather() points the
// layer's `weight` at the whole weight (a collective: every rank calls it in the same order),
// release() empties it again. gather's argument says what for (the sharding learns the order of
// its gathers from it to prefetch the next one).
struct WeightGather {
  enum Use : int { kInference = 0, kForward = 1, kBackward = 2 };  // no grad, forward with grad, input gradient
  std::function<void(int use)> gather;
  std::function<void()> release;
};

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  at::Tensor forward(const at::Tensor& x);

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  // Adds an adapter. Adding the first adapter freezes the base weight and bias
  // (requires_grad = false), as PEFT does; the adapter's tensors require grad. `generator`
  // seeds the A initialisation (a CPU generator; the default generator when absent). Throws
  // std::invalid_argument for r <= 0, a name containing '.', or an existing name.
  void add_adapter(const std::string& name, const LoraConfig& config,
                   std::optional<at::Generator> generator = std::nullopt);
  void remove_adapter(const std::string& name);
  bool has_adapter(const std::string& name) const;
  std::vector<std::string> adapters() const;  // in the order they were added
  const LoraConfig& adapter_config(const std::string& name) const;

  // Adapters that forward() applies (all, by default). Unknown names throw.
  void set_active_adapters(const std::vector<std::string>& names);
  std::vector<std::string> active_adapters() const;
  // Multiplies an adapter's alpha/r scale (PEFT's set_scale / the `scale` of load_lora_weights).
  void set_scale_multiplier(const std::string& name, double multiplier);
  double scale(const std::string& name) const;  // alpha/r x multiplier

  at::Tensor lora_A(const std::string& name) const;
  at::Tensor lora_B(const std::string& name) const;
  // scale * B @ A, [out, in], computed in float32 and returned in the weight's dtype.
  at::Tensor delta_weight(const std::string& name) const;

  // Folds the active adapters into the base weight (W += scale B A); forward then skips them.
  // unmerge() subtracts them again. Both are no-ops for adapters already in that state.
  void merge();
  void unmerge();
  bool merged(const std::string& name) const;

  // Base parameters trainable or frozen (adapters are unaffected).
  void set_base_trainable(bool trainable);

  // fp8 weight-only storage of the frozen base weight: `weight` becomes its e4m3 codes (uint8
  // [out, in], frozen) and the buffer `weight_scale` (float32 [out]) its per-row scales
  // (quantize_e4m3_rows of w); forward dequantises the weight per call to the compute dtype
  // (w's dtype; Module::to changes it and moves the codes without converting them) and, when
  // gradients flow, again in backward instead of keeping the dequantised copy. The bias and
  // adapters keep their dtypes. merge() is refused (there is no 16-bit weight to fold into).
  void store_fp8(const at::Tensor& w);
  // The same from codes already made (a scaled fp8 checkpoint's weight): `codes` uint8 [out, in]
  // kept as they are (no copy), `scale` float32 [out] on their device, computing in `dtype`.
  void store_fp8_codes(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype);
  bool fp8() const { return compute_dtype_.has_value(); }
  // The dtype the layer computes in (its inputs' dtype): the weight's, or under fp8 storage the
  // dtype the codes are dequantised to. Families take their activations' dtype from here, not
  // from `weight` (uint8 codes under fp8).
  at::ScalarType compute_dtype() const { return compute_dtype_ ? *compute_dtype_ : weight.scalar_type(); }
  // The weight as the layer computes with it: dequantised under fp8 storage, else `weight`.
  at::Tensor base_weight() const;

  using torch::nn::Module::to;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;

  // With a WeightGather set, forward gathers the weight just for its GEMM and releases it, and
  // when gradients flow the input gradient gathers it again in backward (autograd keeps no
  // reference to the whole weight in between); the values are those of the plain layer. Unset
  // (nullptr): the weight is always whole.
  void set_weight_gather(std::shared_ptr<const WeightGather> g) { weight_gather_ = std::move(g); }
  bool weight_gathered() const { return weight_gather_ != nullptr; }

  // x W^T + b without the adapters and outside autograd (the weight must be whole), and the
  // input gradient g W of the same: the pieces the sharded path runs between a gather and a
  // release.
  at::Tensor base_forward(const at::Tensor& x) const;
  at::Tensor base_grad_input(const at::Tensor& g) const;

  at::Tensor weight;
  at::Tensor bias;  // undefined when the layer has no bias

 private:
  struct Adapter {
    LoraConfig config;
    double multiplier = 1.0;
    bool active = true;
    bool merged = false;
  };
  const Adapter& adapter(const std::string& name) const;
  Adapter& adapter(const std::string& name);

  std::int64_t in_;
  std::int64_t out_;
  std::optional<at::ScalarType> compute_dtype_;  // set under fp8 storage
  at::Tensor weight_scale_;
  std::shared_ptr<const WeightGather> weight_gather_;
  std::vector<std::string> order_;
  std::map<std::string, Adapter> adapters_;
  std::shared_ptr<torch::nn::Module> lora_A_;  // children named by adapter, each holding `weight`
  std::shared_ptr<torch::nn::Module> lora_B_;
};
TORCH_MODULE(Linear);

// Every LoRA-capable Linear under `root`, with its dotted path from root.
std::vector<std::pair<std::string, Linear>> lora_capable_layers(torch::nn::Module& root);

// PEFT's target matching: a layer at path P is targeted by key K when P == K or P ends with
// "." + K. An empty target list means every LoRA-capable layer.
bool matches_target(const std::string& path, const std::vector<std::string>& targets);

// Adds adapter `name` to every targeted layer and returns the paths adapted (sorted). Throws
// std::invalid_argument when no layer matches, listing a few layer paths that exist.
std::vector<std::string> add_lora(torch::nn::Module& root, const std::vector<std::string>& targets,
                                  const LoraConfig& config, const std::string& name = "default",
                                  std::optional<at::Generator> generator = std::nullopt);

// The adapter's tensors under PEFT file names: "<path>.lora_A.weight" / "<path>.lora_B.weight"
// (no adapter name), optionally with a prefix such as "transformer." or "base_model.model.".
std::map<std::string, at::Tensor> lora_state_dict(torch::nn::Module& root, const std::string& name = "default",
                                                  const std::string& prefix = "");

// Loads PEFT/Diffusers-format LoRA tensors ("<path>.lora_A.weight", "<path>.lora_A.<adapter>.weight"
// or with the `prefix` stripped first) into adapter `name`, creating it on each layer found with
// `config` (its r is taken from the tensors). Returns the layer paths loaded. Throws
// std::invalid_argument for a key whose layer does not exist or has the wrong shape.
std::vector<std::string> load_lora_state_dict(torch::nn::Module& root,
                                              const std::map<std::string, at::Tensor>& tensors,
                                              const LoraConfig& config, const std::string& name = "default",
                                              const std::string& prefix = "");

}  // namespace yeto::nn
