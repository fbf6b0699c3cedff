#include "yeto/nn/linear.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/nn/functional.h>

namespace yeto::nn {

namespace {

// A holder for one adapter matrix, so the parameter is named `<adapter>.weight`.
class LoraMatrixImpl : public torch::nn::Module {
 public:
  explicit LoraMatrixImpl(at::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  at::Tensor weight;
};

at::Tensor matrix_of(const std::shared_ptr<torch::nn::Module>& dict, const std::string& name) {
  for (const auto& child : dict->named_children()) {
    if (child.key() == name) {
      return child.value()->as<LoraMatrixImpl>()->weight;
    }
  }
  throw std::invalid_argument("LoRA adapter '" + name + "' has no matrix");
}

// y = x W^T + b with W = dequantize(codes, scale): forward and backward each dequantise, so
// autograd keeps the codes (1 byte per weight), not a 16-bit copy of W, for the backward pass.
// The codes and scales are frozen; the input and the bias get gradients. Large weights are
// dequantised a block at a time (fp8_linear, fp8_grad_input), so the transient is one block.
struct Fp8LinearFunction : torch::autograd::Function<Fp8LinearFunction> {
  // A layer without bias passes an empty tensor: LibTorch 1.13's custom functions cannot take an
  // undefined input (VariableInfo asks it for its device).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& codes,
                            const at::Tensor& scale, const at::Tensor& bias, at::ScalarType dtype) {
    ctx->save_for_backward({codes, scale});
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(dtype);
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["has_bias"] = has_bias;
    return fp8_linear(x, codes, scale, has_bias ? bias : at::Tensor(), dtype);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor& g = grads[0];
    at::Tensor gx, gb;
    if (ctx->needs_input_grad(0)) gx = fp8_grad_input(g, saved[0], saved[1], dtype);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(3))
      gb = g.reshape({-1, g.size(-1)}).sum(0);
    return {gx, at::Tensor(), at::Tensor(), gb, at::Tensor()};
  }
};

// The layer and its gather for ShardedLinearFunction's backward (the module outlives the step's
// graph; the gather is held, so a layer whose sharding was replaced meanwhile still finds it).
struct LayerRef : torch::CustomClassHolder {
  LayerRef(const LinearImpl* l, std::shared_ptr<const WeightGather> g) : layer(l), gather(std::move(g)) {}
  const LinearImpl* layer;
  std::shared_ptr<const WeightGather> gather;
};

// gather() now, release() when it goes (also on an exception).
class GatheredWeight {
 public:
  GatheredWeight(const WeightGather& g, int use) : g_(g) { g_.gather(use); }
  ~GatheredWeight() { g_.release(); }
  GatheredWeight(const GatheredWeight&) = delete;
  GatheredWeight& operator=(const GatheredWeight&) = delete;

 private:
  const WeightGather& g_;
};

// y = x W^T + b for a layer whose weight is a shard between uses: forward gathers W for its GEMM
// and releases it; backward gathers it again for the input gradient g W. Autograd keeps no
// reference to W, so a block's recomputed graph holds one layer's whole weight at a time instead
// of all of them. The same GEMMs as autograd's linear (addmm / mm, and mm for the input gradient),
// so the values equal the plain layer's bit for bit.
struct ShardedLinearFunction : torch::autograd::Function<ShardedLinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            const LinearImpl* layer, const std::shared_ptr<const WeightGather>& gather) {
    ctx->saved_data["layer"] = c10::IValue::make_capsule(c10::make_intrusive<LayerRef>(layer, gather));
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    GatheredWeight whole(*gather, WeightGather::kForward);
    return layer->base_forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto ref = c10::static_intrusive_pointer_cast<LayerRef>(ctx->saved_data["layer"].toCapsule());
    const at::Tensor& g = grads[0];
    at::Tensor gx, gb;
    if (ctx->needs_input_grad(0)) {
      GatheredWeight whole(*ref->gather, WeightGather::kBackward);
      gx = ref->layer->base_grad_input(g);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(1)) gb = g.reshape({-1, g.size(-1)}).sum(0);
    return {gx, gb, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::uint8_t encode_e4m3(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;   // NaN
  if (a >= 0x43E00000u) return sign | 0x7E;  // 448 and beyond, infinity: saturate
  if (a < 0x3C800000u) {
    // Below 2^-6: subnormal codes, multiples of 2^-9 (the scaling is exact; nearbyint rounds
    // half to even). 8 is the smallest normal, code 0x08 as well.
    float f;
    std::memcpy(&f, &a, sizeof f);
    return sign | static_cast<std::uint8_t>(std::nearbyint(f * 512.0f));
  }
  // Normal: round the 23-bit mantissa to 3 bits, half to even; a carry moves into the exponent.
  const std::uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);
  const std::uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<std::uint8_t>(code > 0x7Eu ? 0x7Eu : code);
}

float decode_e4m3(std::uint8_t code) {
  const int exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return std::nanf("");
  const float v = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                           : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return (code & 0x80) ? -v : v;
}

at::Tensor e4m3_table() {
  auto t = at::empty({256}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (int c = 0; c < 256; ++c) p[c] = decode_e4m3(static_cast<std::uint8_t>(c));
  return t;
}

std::pair<at::Tensor, at::Tensor> quantize_e4m3_rows(const at::Tensor& w) {
  if (w.dim() != 2 || !w.is_floating_point())
    throw std::invalid_argument("quantize_e4m3_rows: expected a 2-D floating-point weight, got " +
                                std::to_string(w.dim()) + " dimensions of " + std::string(c10::toString(w.scalar_type())));
  at::NoGradGuard no_grad;
  // Read in place (no float32 copy): one pass for the row maxima, one for the codes.
  const auto src = w.detach().to(at::kCPU).contiguous();
  const std::int64_t rows = src.size(0), cols = src.size(1);
  auto scale = at::empty({rows}, at::TensorOptions().dtype(at::kFloat));
  auto codes = at::empty({rows, cols}, at::TensorOptions().dtype(at::kByte));
  float* sc = scale.data_ptr<float>();
  std::uint8_t* dst = codes.data_ptr<std::uint8_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, src.scalar_type(), "quantize_e4m3_rows", [&] {
    const scalar_t* p = src.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const scalar_t* row = p + r * cols;
        float amax = 0.0f;
        for (std::int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(static_cast<float>(row[c])));
        const float k = amax > 0.0f ? amax / 448.0f : 1.0f;
        sc[r] = k;
        for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] = encode_e4m3(static_cast<float>(row[c]) / k);
      }
    });
  });
  return {codes.to(w.device()), scale.to(w.device())};
}

at::Tensor dequantize_e4m3_block(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype,
                                 std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols) {
  at::NoGradGuard no_grad;
  if (codes.dim() != 2 || scale.dim() != 1 || scale.size(0) != codes.size(0))
    throw std::invalid_argument("dequantize_e4m3: expected codes [out, in] and scale [out]");
  if (row0 < 0 || rows < 0 || row0 + rows > codes.size(0) || col0 < 0 || cols < 0 || col0 + cols > codes.size(1))
    throw std::invalid_argument("dequantize_e4m3: block outside the weight");
  if (!codes.is_cpu()) {
    static const at::Tensor table = e4m3_table();
    const auto lut = table.to(codes.device());
    const auto block = codes.narrow(0, row0, rows).narrow(1, col0, cols);
    return (lut.index_select(0, block.flatten().to(at::kInt)).view({rows, cols}) *
            scale.narrow(0, row0, rows).unsqueeze(1))
        .to(dtype);
  }
  const auto c = codes.contiguous();
  const auto s = scale.to(at::kFloat).contiguous();
  auto out = at::empty({rows, cols}, at::TensorOptions().dtype(dtype));
  const std::int64_t stride = c.size(1);
  static const std::vector<float> table = [] {
    std::vector<float> t(256);
    for (int i = 0; i < 256; ++i) t[i] = decode_e4m3(static_cast<std::uint8_t>(i));
    return t;
  }();
  const std::uint8_t* src = c.data_ptr<std::uint8_t>();
  const float* sc = s.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "dequantize_e4m3", [&] {
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const float k = sc[row0 + r];
        const std::uint8_t* in = src + (row0 + r) * stride + col0;
        scalar_t* o = dst + r * cols;
        for (std::int64_t i = 0; i < cols; ++i) o[i] = static_cast<scalar_t>(table[in[i]] * k);
      }
    });
  });
  return out;
}

at::Tensor dequantize_e4m3_rows(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype) {
  return dequantize_e4m3_block(codes, scale, dtype, 0, codes.size(0), 0, codes.size(1));
}

at::Tensor dequantize_e4m3(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype) {
  if (codes.dim() < 1 || codes.size(0) == 0) throw std::invalid_argument("dequantize_e4m3: expected codes [out, ...]");
  const auto rows = codes.reshape({codes.size(0), -1});
  return dequantize_e4m3_rows(rows.contiguous(), scale, dtype).view(codes.sizes());
}

namespace {
// Splits `extent` into equal blocks of about `target` (at least 64, so each block's GEMM stays a
// real GEMM with the library's fast, float-accumulating kernels): the block size.
std::int64_t balanced_block(std::int64_t extent, std::int64_t target) {
  const std::int64_t want = std::max<std::int64_t>(64, target);
  if (want >= extent) return extent;
  const std::int64_t blocks = (extent + want - 1) / want;
  return (extent + blocks - 1) / blocks;
}
}  // namespace

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& bias,
                      at::ScalarType dtype, std::int64_t block_elements) {
  const std::int64_t out = codes.size(0), in = codes.size(1);
  const std::int64_t rows = balanced_block(out, block_elements / std::max<std::int64_t>(1, in));
  if (rows >= out) return at::linear(x, dequantize_e4m3_rows(codes, scale, dtype), bias);
  // Output features in blocks of `rows`: each output element is still one GEMM's full
  // reduction over `in`, only the weight rows it needs are dequantised.
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = at::empty(sizes, x.options().dtype(dtype));
  for (std::int64_t r0 = 0; r0 < out; r0 += rows) {
    const std::int64_t n = std::min(rows, out - r0);
    const auto w = dequantize_e4m3_block(codes, scale, dtype, r0, n, 0, in);
    y.narrow(-1, r0, n).copy_(at::linear(x, w, bias.defined() ? bias.narrow(0, r0, n) : at::Tensor()));
  }
  return y;
}

at::Tensor fp8_grad_input(const at::Tensor& g, const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype,
                          std::int64_t block_elements) {
  const std::int64_t out = codes.size(0), in = codes.size(1);
  const std::int64_t cols = balanced_block(in, block_elements / std::max<std::int64_t>(1, out));
  if (cols >= in) return at::matmul(g, dequantize_e4m3_rows(codes, scale, dtype));
  // Input features in blocks of `cols`: g [.., out] @ W[:, c0:c0+n], each a full reduction over `out`.
  auto sizes = g.sizes().vec();
  sizes.back() = in;
  auto gx = at::empty(sizes, g.options());
  for (std::int64_t c0 = 0; c0 < in; c0 += cols) {
    const std::int64_t n = std::min(cols, in - c0);
    gx.narrow(-1, c0, n).copy_(at::matmul(g, dequantize_e4m3_block(codes, scale, dtype, 0, out, c0, n)));
  }
  return gx;
}

double LoraConfig::scale() const {
  if (r <= 0) return 0.0;
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

LinearImpl::LinearImpl(std::int64_t in_features, std::int64_t out_features, bool with_bias)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0 || out_features <= 0) {
    throw std::invalid_argument("Linear: features must be positive (got in=" + std::to_string(in_features) +
                                ", out=" + std::to_string(out_features) + ")");
  }
  // torch.nn.Linear's default initialisation; real weights are loaded over it.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", at::empty({out_features, in_features}).uniform_(-bound, bound));
  if (with_bias) {
    bias = register_parameter("bias", at::empty({out_features}).uniform_(-bound, bound));
  }
}

at::Tensor LinearImpl::base_forward(const at::Tensor& x) const {
  if (!compute_dtype_) return at::linear(x, weight, bias);
  return fp8_linear(x, weight, weight_scale_, bias, *compute_dtype_);
}

at::Tensor LinearImpl::base_grad_input(const at::Tensor& g) const {
  if (compute_dtype_) return fp8_grad_input(g, weight, weight_scale_, *compute_dtype_);
  // What autograd's addmm / mm backward computes for the input: grad.mm(W) on the rows.
  auto sizes = g.sizes().vec();
  sizes.back() = in_;
  return g.reshape({-1, g.size(-1)}).mm(weight).view(sizes);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  at::Tensor y;
  if (weight_gather_) {
    if (at::GradMode::is_enabled() && (x.requires_grad() || (bias.defined() && bias.requires_grad()))) {
      y = ShardedLinearFunction::apply(x, bias.defined() ? bias : at::empty({0}, x.options()), this, weight_gather_);
    } else {
      GatheredWeight whole(*weight_gather_, WeightGather::kInference);
      y = base_forward(x);
    }
  } else if (!compute_dtype_)
    y = at::linear(x, weight, bias);
  else if (at::GradMode::is_enabled() && (x.requires_grad() || (bias.defined() && bias.requires_grad())))
    y = Fp8LinearFunction::apply(x, weight, weight_scale_, bias.defined() ? bias : at::empty({0}, x.options()),
                                 *compute_dtype_);
  else
    y = fp8_linear(x, weight, weight_scale_, bias, *compute_dtype_);
  for (const auto& name : order_) {
    const auto& a = adapters_.at(name);
    if (!a.active || a.merged) continue;
    // The adapter runs in the frozen base's compute dtype, as autocast runs a float32 weight
    // under bf16: the float32 masters are cast (r x in and out x r, small) for the two GEMMs and
    // their gradients come back to the masters in float32; the activations are never copied to
    // float32. Dropout 0 is no pass at all, and the scale rides on the add.
    const auto compute = x.scalar_type();
    auto A = matrix_of(lora_A_, name);
    auto B = matrix_of(lora_B_, name);
    if (at::isFloatingType(compute) && A.scalar_type() != compute) {
      A = A.to(compute);
      B = B.to(compute);
    }
    auto h = x.scalar_type() == A.scalar_type() ? x : x.to(A.scalar_type());
    if (a.config.dropout > 0.0) {
      h = at::dropout(h, a.config.dropout, is_training());
    }
    const double s = a.config.scale() * a.multiplier;
    auto delta = at::linear(at::linear(h, A), B);
    y = delta.scalar_type() == y.scalar_type() ? at::add(y, delta, s) : y + (delta * s).to(y.scalar_type());
  }
  return y;
}

void LinearImpl::add_adapter(const std::string& name, const LoraConfig& config,
                             std::optional<at::Generator> generator) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument("LoRA adapter name '" + name + "' must be non-empty and contain no '.'");
  }
  if (config.r <= 0) {
    throw std::invalid_argument("LoRA adapter '" + name + "': rank r must be positive (got " +
                                std::to_string(config.r) + ")");
  }
  if (adapters_.count(name)) {
    throw std::invalid_argument("LoRA adapter '" + name + "' already exists on this layer");
  }
  if (!lora_A_) {
    lora_A_ = register_module("lora_A", std::make_shared<torch::nn::Module>("lora_A"));
    lora_B_ = register_module("lora_B", std::make_shared<torch::nn::Module>("lora_B"));
  }
  const auto opts = weight.options().dtype(at::kFloat);
  auto A = at::zeros({config.r, in_}, opts);
  auto B = at::zeros({out_, config.r}, opts);
  {
    at::NoGradGuard no_grad;
    c10::optional<at::Generator> gen;
    if (generator) gen = *generator;
    if (config.init == "kaiming") {
      // kaiming_uniform_(a = sqrt(5)) on [r, in]: bound = 1 / sqrt(in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
      if (A.is_cpu() || !gen) {
        A.uniform_(-bound, bound, gen);
      } else {
        A.copy_(at::empty(A.sizes()).uniform_(-bound, bound, gen));
      }
    } else if (config.init == "gaussian") {
      if (A.is_cpu() || !gen) {
        A.normal_(0.0, 1.0 / static_cast<double>(config.r), gen);
      } else {
        A.copy_(at::empty(A.sizes()).normal_(0.0, 1.0 / static_cast<double>(config.r), gen));
      }
    } else if (config.init != "zeros") {
      throw std::invalid_argument("LoRA adapter '" + name + "': unknown init '" + config.init +
                                  "' (expected kaiming, gaussian or zeros)");
    }
  }
  lora_A_->register_module(name, std::make_shared<LoraMatrixImpl>(A));
  lora_B_->register_module(name, std::make_shared<LoraMatrixImpl>(B));
  adapters_[name] = Adapter{config};
  order_.push_back(name);
  set_base_trainable(false);
}

void LinearImpl::remove_adapter(const std::string& name) {
  auto& a = adapter(name);
  if (a.merged) {
    // Take it out of the base weight first so removal never leaves a merged remnant.
    at::NoGradGuard no_grad;
    weight.sub_(delta_weight(name));
  }
  adapters_.erase(name);
  order_.erase(std::find(order_.begin(), order_.end(), name));
  // LibTorch cannot unregister a child; rebuild the two holders without it.
  auto rebuild = [&](std::shared_ptr<torch::nn::Module>& dict, const char* label) {
    auto fresh = std::make_shared<torch::nn::Module>(label);
    for (const auto& child : dict->named_children()) {
      if (child.key() != name) fresh->register_module(child.key(), child.value());
    }
    dict = replace_module(label, fresh);
  };
  rebuild(lora_A_, "lora_A");
  rebuild(lora_B_, "lora_B");
}

bool LinearImpl::has_adapter(const std::string& name) const { return adapters_.count(name) != 0; }

std::vector<std::string> LinearImpl::adapters() const { return order_; }

const LinearImpl::Adapter& LinearImpl::adapter(const std::string& name) const {
  auto it = adapters_.find(name);
  if (it == adapters_.end()) {
    std::string known;
    for (const auto& n : order_) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("no LoRA adapter '" + name + "' on this layer (adapters: " +
                                (known.empty() ? std::string("none") : known) + ")");
  }
  return it->second;
}

LinearImpl::Adapter& LinearImpl::adapter(const std::string& name) {
  return const_cast<Adapter&>(static_cast<const LinearImpl*>(this)->adapter(name));
}

const LoraConfig& LinearImpl::adapter_config(const std::string& name) const { return adapter(name).config; }

void LinearImpl::set_active_adapters(const std::vector<std::string>& names) {
  for (const auto& n : names) (void)adapter(n);
  for (auto& [n, a] : adapters_) {
    a.active = std::find(names.begin(), names.end(), n) != names.end();
  }
}

std::vector<std::string> LinearImpl::active_adapters() const {
  std::vector<std::string> out;
  for (const auto& n : order_) {
    if (adapters_.at(n).active) out.push_back(n);
  }
  return out;
}

void LinearImpl::set_scale_multiplier(const std::string& name, double multiplier) {
  auto& a = adapter(name);
  if (a.merged) {
    throw std::invalid_argument("LoRA adapter '" + name + "' is merged; unmerge before changing its scale");
  }
  a.multiplier = multiplier;
}

double LinearImpl::scale(const std::string& name) const {
  const auto& a = adapter(name);
  return a.config.scale() * a.multiplier;
}

at::Tensor LinearImpl::lora_A(const std::string& name) const {
  (void)adapter(name);
  return matrix_of(lora_A_, name);
}

at::Tensor LinearImpl::lora_B(const std::string& name) const {
  (void)adapter(name);
  return matrix_of(lora_B_, name);
}

at::Tensor LinearImpl::delta_weight(const std::string& name) const {
  const double s = scale(name);
  auto A = matrix_of(lora_A_, name).to(at::kFloat);
  auto B = matrix_of(lora_B_, name).to(at::kFloat);
  return (at::matmul(B, A) * s).to(compute_dtype_ ? *compute_dtype_ : weight.scalar_type());
}

void LinearImpl::merge() {
  if (compute_dtype_)
    throw std::invalid_argument("Linear: cannot merge LoRA adapters into an fp8-stored base weight");
  if (weight_gather_)
    throw std::invalid_argument("Linear: cannot merge LoRA adapters into a weight sharded across ranks");
  at::NoGradGuard no_grad;
  for (const auto& name : order_) {
    auto& a = adapters_.at(name);
    if (!a.active || a.merged) continue;
    weight.add_(delta_weight(name));
    a.merged = true;
  }
}

void LinearImpl::unmerge() {
  at::NoGradGuard no_grad;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    auto& a = adapters_.at(*it);
    if (!a.merged) continue;
    weight.sub_(delta_weight(*it));
    a.merged = false;
  }
}

bool LinearImpl::merged(const std::string& name) const { return adapter(name).merged; }

void LinearImpl::store_fp8(const at::Tensor& w) {
  if (w.dim() != 2 || w.size(0) != out_ || w.size(1) != in_)
    throw std::invalid_argument("Linear: store_fp8 expects a weight [" + std::to_string(out_) + ", " +
                                std::to_string(in_) + "]");
  if (!w.is_floating_point()) throw std::invalid_argument("Linear: store_fp8 expects a floating-point weight");
  auto [codes, scale] = quantize_e4m3_rows(w);
  store_fp8_codes(codes, scale, w.scalar_type());
}

void LinearImpl::store_fp8_codes(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dtype) {
  if (codes.scalar_type() != at::kByte || codes.dim() != 2 || codes.size(0) != out_ || codes.size(1) != in_)
    throw std::invalid_argument("Linear: store_fp8_codes expects uint8 codes [" + std::to_string(out_) + ", " +
                                std::to_string(in_) + "], got " + std::string(c10::toString(codes.scalar_type())) +
                                " " + c10::str(codes.sizes()));
  if (scale.scalar_type() != at::kFloat || scale.dim() != 1 || scale.size(0) != out_ ||
      scale.device() != codes.device())
    throw std::invalid_argument("Linear: store_fp8_codes expects float32 scales [" + std::to_string(out_) +
                                "] on the codes' device");
  if (!at::isFloatingType(dtype)) throw std::invalid_argument("Linear: store_fp8_codes needs a floating compute dtype");
  at::NoGradGuard no_grad;
  compute_dtype_ = dtype;
  weight.set_requires_grad(false);
  weight.set_data(codes);
  if (weight_scale_.defined())
    weight_scale_.set_data(scale);
  else
    weight_scale_ = register_buffer("weight_scale", scale);
}

at::Tensor LinearImpl::base_weight() const {
  return compute_dtype_ ? dequantize_e4m3_rows(weight, weight_scale_, *compute_dtype_) : weight;
}

void LinearImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  if (!compute_dtype_) return torch::nn::Module::to(device, dtype, non_blocking);
  // The codes and scales only move; the compute dtype follows the request, as the bias and the
  // adapters do.
  for (auto& child : children()) child->to(device, dtype, non_blocking);
  weight.set_data(weight.to(device, non_blocking));
  weight_scale_.set_data(weight_scale_.to(device, non_blocking));
  if (bias.defined()) bias.set_data(bias.to(device, dtype, non_blocking));
  compute_dtype_ = dtype;
}

void LinearImpl::to(torch::Dtype dtype, bool non_blocking) { to(weight.device(), dtype, non_blocking); }

void LinearImpl::set_base_trainable(bool trainable) {
  if (trainable && compute_dtype_)
    throw std::invalid_argument("Linear: an fp8-stored base weight cannot be trained (use a 16-bit storage)");
  weight.set_requires_grad(trainable);
  if (bias.defined()) bias.set_requires_grad(trainable);
}

std::vector<std::pair<std::string, Linear>> lora_capable_layers(torch::nn::Module& root) {
  std::vector<std::pair<std::string, Linear>> out;
  for (const auto& item : root.named_modules("", /*include_self=*/true)) {
    if (auto lin = std::dynamic_pointer_cast<LinearImpl>(item.value())) {
      out.emplace_back(item.key(), Linear(lin));
    }
  }
  return out;
}

bool matches_target(const std::string& path, const std::vector<std::string>& targets) {
  if (targets.empty()) return true;
  for (const auto& t : targets) {
    if (path == t) return true;
    if (path.size() > t.size() && path.compare(path.size() - t.size(), t.size(), t) == 0 &&
        path[path.size() - t.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

std::vector<std::string> add_lora(torch::nn::Module& root, const std::vector<std::string>& targets,
                                  const LoraConfig& config, const std::string& name,
                                  std::optional<at::Generator> generator) {
  std::vector<std::string> done;
  auto layers = lora_capable_layers(root);
  // Deterministic: initialise in sorted path order whatever the registration order.
  std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [path, layer] : layers) {
    if (!matches_target(path, targets)) continue;
    layer->add_adapter(name, config, generator);
    done.push_back(path);
  }
  if (done.empty()) {
    std::ostringstream msg;
    msg << "LoRA targets matched no layer:";
    for (const auto& t : targets) msg << " '" << t << "'";
    msg << ". Linear layers here include:";
    std::size_t shown = 0;
    for (const auto& [path, layer] : layers) {
      if (shown++ == 8) {
        msg << " ...";
        break;
      }
      msg << " " << path;
    }
    throw std::invalid_argument(msg.str());
  }
  return done;
}

std::map<std::string, at::Tensor> lora_state_dict(torch::nn::Module& root, const std::string& name,
                                                  const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (auto& [path, layer] : lora_capable_layers(root)) {
    if (!layer->has_adapter(name)) continue;
    const std::string base = prefix + path + (path.empty() ? "" : ".");
    out[base + "lora_A.weight"] = layer->lora_A(name).detach();
    out[base + "lora_B.weight"] = layer->lora_B(name).detach();
  }
  return out;
}

std::vector<std::string> load_lora_state_dict(torch::nn::Module& root,
                                              const std::map<std::string, at::Tensor>& tensors,
                                              const LoraConfig& config, const std::string& name,
                                              const std::string& prefix) {
  std::map<std::string, Linear> by_path;
  for (auto& [path, layer] : lora_capable_layers(root)) by_path.emplace(path, layer);

  struct Pair {
    at::Tensor A, B;
  };
  std::map<std::string, Pair> pairs;
  for (const auto& [key, t] : tensors) {
    std::string k = key;
    if (!prefix.empty()) {
      if (k.rfind(prefix, 0) != 0) continue;
      k = k.substr(prefix.size());
    }
    for (const char* which : {".lora_A.", ".lora_B."}) {
      const auto pos = k.find(which);
      if (pos == std::string::npos) continue;
      const std::string rest = k.substr(pos + 8);
      if (rest != "weight" && rest != name + ".weight") continue;
      auto& p = pairs[k.substr(0, pos)];
      (which[6] == 'A' ? p.A : p.B) = t;
    }
  }
  std::vector<std::string> loaded;
  for (auto& [path, p] : pairs) {
    auto it = by_path.find(path);
    if (it == by_path.end()) {
      throw std::invalid_argument("LoRA tensor for '" + prefix + path + "' names no Linear layer of this model");
    }
    if (!p.A.defined() || !p.B.defined()) {
      throw std::invalid_argument("LoRA layer '" + prefix + path + "' has only one of lora_A / lora_B");
    }
    auto& layer = it->second;
    const auto r = p.A.size(0);
    if (p.A.dim() != 2 || p.B.dim() != 2 || p.A.size(1) != layer->in_features() ||
        p.B.size(0) != layer->out_features() || p.B.size(1) != r) {
      throw std::invalid_argument("LoRA layer '" + prefix + path + "': lora_A " + std::to_string(p.A.size(0)) +
                                  "x" + std::to_string(p.A.dim() > 1 ? p.A.size(1) : 0) + " / lora_B do not fit a " +
                                  std::to_string(layer->in_features()) + " -> " +
                                  std::to_string(layer->out_features()) + " layer");
    }
    LoraConfig cfg = config;
    cfg.r = r;
    cfg.init = "zeros";
    if (layer->has_adapter(name)) layer->remove_adapter(name);
    layer->add_adapter(name, cfg);
    at::NoGradGuard no_grad;
    layer->lora_A(name).copy_(p.A);
    layer->lora_B(name).copy_(p.B);
    loaded.push_back(path);
  }
  return loaded;
}

}  // namespace yeto::nn
