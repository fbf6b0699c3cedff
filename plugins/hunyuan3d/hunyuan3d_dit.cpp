#include "hunyuan3d_dit.hpp"

#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/custom_function.h>

#include "yeto/family/config.hpp"
#include "yeto/nn/attention.hpp"
#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/norms.hpp"

namespace yeto::hunyuan3d {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "HunYuanDiTPlain config";

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(std::string(kWhere) + ": " + what); }

// Returns x unchanged; backward passes x's gradient through and gives `loss` the gradient 1, so
// that d(loss)/d(parameters) is added to whatever loss is back-propagated through x.
struct AddAuxiliaryLoss : public torch::autograd::Function<AddAuxiliaryLoss> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const at::Tensor& x, const at::Tensor& loss) {
    (void)loss;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad_outputs) {
    return {grad_outputs[0], at::ones({}, grad_outputs[0].options())};
  }
};

}  // namespace

DiTConfig DiTConfig::from_json(const json& j) {
  const family::ConfigReader in(j, kWhere);
  DiTConfig c;
  c.input_size = in.integer("input_size", c.input_size);
  c.in_channels = in.integer("in_channels", c.in_channels);
  c.hidden_size = in.integer("hidden_size", c.hidden_size);
  c.context_dim = in.integer("context_dim", c.context_dim);
  c.depth = in.integer("depth", c.depth);
  c.num_heads = in.integer("num_heads", c.num_heads);
  c.qk_norm = in.boolean("qk_norm", c.qk_norm);
  c.qk_norm_type = in.string("qk_norm_type", c.qk_norm_type);
  c.norm_type = in.string("norm_type", c.norm_type);
  c.qkv_bias = in.boolean("qkv_bias", c.qkv_bias);
  c.text_len = in.integer("text_len", c.text_len);
  c.num_moe_layers = in.integer("num_moe_layers", c.num_moe_layers);
  c.num_experts = in.integer("num_experts", c.num_experts);
  c.moe_top_k = in.integer("moe_top_k", c.moe_top_k);
  if (in.present("guidance_cond_proj_dim")) c.guidance_cond_proj_dim = in.integer("guidance_cond_proj_dim", 0);
  for (const char* k : {"in_channels", "hidden_size", "context_dim", "depth", "num_heads", "num_experts", "moe_top_k"})
    if (in.integer(k, 1) <= 0) bad(std::string("'") + k + "' must be positive");
  if (c.num_moe_layers < 0) bad("'num_moe_layers' must not be negative");
  if (c.guidance_cond_proj_dim < 0) bad("'guidance_cond_proj_dim' must be positive or null");
  if (c.hidden_size % c.num_heads != 0)
    bad("'hidden_size' " + std::to_string(c.hidden_size) + " is not a multiple of 'num_heads' " +
        std::to_string(c.num_heads));
  if (c.hidden_size % 2 != 0) bad("'hidden_size' must be even (sinusoidal timestep embedding)");
  if (c.moe_top_k > c.num_experts)
    bad("'moe_top_k' " + std::to_string(c.moe_top_k) + " exceeds 'num_experts' " + std::to_string(c.num_experts));
  if (c.qk_norm_type != "rms" && c.qk_norm_type != "layer")
    bad("'qk_norm_type' is '" + c.qk_norm_type + "'; supported: rms, layer");
  if (c.norm_type != "layer" && c.norm_type != "rms") bad("'norm_type' is '" + c.norm_type + "'; supported: layer, rms");
  for (const char* k : {"use_pos_emb", "use_attention_pooling", "with_decoupled_ca"})
    if (in.boolean(k, false))
      bad(std::string("'") + k + "' is true; this implementation serves the Hunyuan3D-2.1 denoiser, which has it false");
  return c;
}

// ---- norms -------------------------------------------------------------------------------------

NormImpl::NormImpl(std::int64_t dim, const std::string& type, double eps_) : rms(type == "rms"), eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
  if (!rms) bias = register_parameter("bias", at::zeros({dim}));
}

at::Tensor NormImpl::forward(const at::Tensor& x) {
  if (rms) return nn::rms_norm(x, weight, eps);
  return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

// ---- attention ---------------------------------------------------------------------------------

AttentionImpl::AttentionImpl(std::int64_t dim, std::int64_t kv_dim, std::int64_t heads_, bool qkv_bias, bool qk_norm,
                             const std::string& qk_norm_type, bool cross_)
    : heads(heads_), head_dim(dim / heads_), cross(cross_) {
  to_q = register_module("to_q", nn::Linear(dim, dim, qkv_bias));
  to_k = register_module("to_k", nn::Linear(kv_dim, dim, qkv_bias));
  to_v = register_module("to_v", nn::Linear(kv_dim, dim, qkv_bias));
  if (qk_norm) {
    q_norm = register_module("q_norm", Norm(head_dim, qk_norm_type));
    k_norm = register_module("k_norm", Norm(head_dim, qk_norm_type));
  }
  out_proj = register_module("out_proj", nn::Linear(dim, dim, true));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& context) {
  const auto b = x.size(0), n = x.size(1);
  at::Tensor q, k, v;
  std::int64_t m = n;
  if (!cross) {
    // cat([q, k, v]) viewed as [.., heads, 3 * head_dim]: head h takes channels
    // [3 h hd, 3 (h + 1) hd) of the concatenation and splits them into its q, k, v.
    const auto qkv = at::cat({to_q(x), to_k(x), to_v(x)}, -1).view({b, n, heads, 3 * head_dim});
    auto parts = qkv.split(head_dim, -1);
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    m = context.size(1);
    q = to_q(x).view({b, n, heads, head_dim});
    const auto kv = at::cat({to_k(context), to_v(context)}, -1).view({b, m, heads, 2 * head_dim});
    auto parts = kv.split(head_dim, -1);
    k = parts[0];
    v = parts[1];
  }
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  const auto o = nn::attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));  // [B, H, N, hd]
  return out_proj(o.transpose(1, 2).reshape({b, n, heads * head_dim}));
}

// ---- MLP and MoE -------------------------------------------------------------------------------

MlpImpl::MlpImpl(std::int64_t width) {
  fc1 = register_module("fc1", nn::Linear(width, 4 * width, true));
  fc2 = register_module("fc2", nn::Linear(4 * width, width, true));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) { return fc2(at::gelu(fc1(x))); }

MoEBlockImpl::MoEBlockImpl(std::int64_t dim, std::int64_t n_experts, std::int64_t top_k_, double aux_loss_alpha)
    : top_k(top_k_), alpha(aux_loss_alpha) {
  experts = register_module("experts", torch::nn::ModuleList());
  for (std::int64_t e = 0; e < n_experts; ++e)
    experts->push_back(nn::FeedForward(dim, 4 * dim, dim, nn::Activation::gelu, true));
  gate = register_module("gate", std::make_shared<torch::nn::Module>());
  gate_weight = gate->register_parameter("weight", at::empty({n_experts, dim}).normal_(0.0, 0.02));
  shared_experts = register_module("shared_experts", nn::FeedForward(dim, 4 * dim, dim, nn::Activation::gelu, true));
}

at::Tensor MoEBlockImpl::forward(const at::Tensor& x) {
  const auto dim = x.size(-1);
  const auto n_experts = static_cast<std::int64_t>(experts->size());
  const auto flat = x.reshape({-1, dim});
  const auto scores = at::linear(flat, gate_weight).softmax(-1);  // [T, E]
  // Top-k weights as they are (no renormalisation over the chosen experts).
  const auto [topk_weight, topk_idx] = scores.topk(top_k, -1, /*largest=*/true, /*sorted=*/false);

  // Each expert runs on the tokens routed to it; its output, weighted by the gate score, is added
  // to those tokens' rows.
  at::Tensor y = at::zeros_like(flat);
  for (std::int64_t e = 0; e < n_experts; ++e) {
    const auto chosen = topk_idx.eq(e);  // [T, k]
    const auto rows = chosen.any(-1).nonzero().view({-1});
    // An expert no token chose still runs (on no rows) when gradients flow, so that its
    // parameters get the zero gradient upstream gives them rather than none.
    if (rows.numel() == 0 && !at::GradMode::is_enabled()) continue;
    const auto w = (topk_weight * chosen.to(topk_weight.scalar_type())).sum(-1).index_select(0, rows);
    auto* expert = experts[static_cast<std::size_t>(e)]->as<nn::FeedForwardImpl>();
    const auto out = expert->forward(flat.index_select(0, rows)) * w.unsqueeze(-1);
    y = y.index_add(0, rows, out);
  }
  y = y.view(x.sizes());

  last_aux_loss = at::Tensor();
  if (is_training() && alpha > 0.0) {
    // Load balancing: the mean gate score of each expert times the fraction of routed slots it
    // received (counts carry no gradient), scaled by the number of experts and alpha.
    const auto counts = at::bincount(topk_idx.reshape({-1}), {}, n_experts).to(scores.scalar_type());
    const auto ce = counts / static_cast<double>(topk_idx.numel());
    const auto pi = scores.mean(0);
    last_aux_loss = (pi * ce * static_cast<double>(n_experts)).sum() * alpha;
    if (at::GradMode::is_enabled() && last_aux_loss.requires_grad()) y = AddAuxiliaryLoss::apply(y, last_aux_loss);
  }
  return y + shared_experts(x);
}

// ---- blocks ------------------------------------------------------------------------------------

DiTBlockImpl::DiTBlockImpl(const DiTConfig& c, std::int64_t index) {
  const auto d = c.hidden_size;
  norm1 = register_module("norm1", Norm(d, c.norm_type));
  attn1 = register_module("attn1", Attention(d, d, c.num_heads, c.qkv_bias, c.qk_norm, c.qk_norm_type, false));
  norm2 = register_module("norm2", Norm(d, c.norm_type));
  attn2 = register_module("attn2",
                          Attention(d, c.context_dim, c.num_heads, c.qkv_bias, c.qk_norm, c.qk_norm_type, true));
  norm3 = register_module("norm3", Norm(d, c.norm_type));
  if (c.skip_block(index)) {
    skip_norm = register_module("skip_norm", Norm(d, c.norm_type));
    skip_linear = register_module("skip_linear", nn::Linear(2 * d, d, true));
  }
  if (c.moe_block(index))
    moe = register_module("moe", MoEBlock(d, c.num_experts, c.moe_top_k, c.moe_aux_loss_alpha));
  else
    mlp = register_module("mlp", Mlp(d));
}

at::Tensor DiTBlockImpl::forward(const at::Tensor& x_in, const at::Tensor& context, const at::Tensor& skip) {
  at::Tensor x = x_in;
  if (skip_linear) x = skip_norm(skip_linear(at::cat({skip, x}, -1)));
  x = x + attn1(norm1(x));
  x = x + attn2(norm2(x), context);
  const auto h = norm3(x);
  return x + (moe ? moe(h) : mlp(h));
}

// ---- the model ---------------------------------------------------------------------------------

HunYuanDiTPlainImpl::HunYuanDiTPlainImpl(const DiTConfig& c) : config_(c) {
  const auto d = c.hidden_size;
  x_embedder = register_module("x_embedder", nn::Linear(c.in_channels, d, true));
  t_embedder = register_module("t_embedder", std::make_shared<torch::nn::Module>());
  auto mlp = t_embedder->register_module("mlp", std::make_shared<torch::nn::Module>());
  t_mlp0 = mlp->register_module("0", nn::Linear(d, 4 * d, true));
  t_mlp2 = mlp->register_module("2", nn::Linear(4 * d, d, true));
  if (c.guidance_cond_proj_dim > 0) {
    // Present in checkpoints of configs that set guidance_cond_proj_dim; upstream adds it to the
    // timestep embedding only when a guidance condition is passed, which its pipeline never does.
    auto cond = t_embedder->register_module("cond_proj", std::make_shared<torch::nn::Module>());
    t_cond_proj = cond->register_parameter("weight", at::zeros({4 * d, c.guidance_cond_proj_dim}), false);
  }
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.depth; ++i) blocks->push_back(DiTBlock(c, i));
  final_layer = register_module("final_layer", std::make_shared<torch::nn::Module>());
  norm_final = final_layer->register_module("norm_final", Norm(d, "layer"));
  final_linear = final_layer->register_module("linear", nn::Linear(d, c.in_channels, true));
}

at::Tensor HunYuanDiTPlainImpl::forward(const at::Tensor& x_in, const at::Tensor& t_in, const at::Tensor& ctx_in) {
  const auto& c = config_;
  if (x_in.dim() != 3 || x_in.size(2) != c.in_channels)
    throw std::invalid_argument("HunYuanDiTPlain: x must be [B, N, " + std::to_string(c.in_channels) + "], got " +
                                c10::str(x_in.sizes()));
  const auto b = x_in.size(0);
  if (ctx_in.dim() != 3 || ctx_in.size(0) != b || ctx_in.size(2) != c.context_dim)
    throw std::invalid_argument("HunYuanDiTPlain: the conditioning must be [" + std::to_string(b) + ", M, " +
                                std::to_string(c.context_dim) + "], got " + c10::str(ctx_in.sizes()));
  if (t_in.numel() != b && t_in.numel() != 1)
    throw std::invalid_argument("HunYuanDiTPlain: t must hold one value or one per sample (" + std::to_string(b) +
                                "), got " + c10::str(t_in.sizes()));
  const auto dtype = x_embedder->compute_dtype();
  const auto device = x_embedder->weight.device();
  const auto x = x_in.to(device, dtype);
  const auto context = ctx_in.to(device, dtype);
  const auto t = t_in.reshape({-1}).to(device, at::kFloat).expand({b});

  // Timestep token: Timesteps(hidden) (sin first, no shift, no scaling) -> Linear -> GELU -> Linear.
  const auto t_freq = nn::timestep_embedding(t, c.hidden_size, /*flip_sin_to_cos=*/false,
                                             /*downscale_freq_shift=*/0.0)
                          .to(dtype);
  const auto t_emb = t_mlp2(at::gelu(t_mlp0(t_freq))).unsqueeze(1);

  at::Tensor h = at::cat({t_emb, x_embedder(x)}, 1);
  std::vector<at::Tensor> skips;
  for (std::int64_t i = 0; i < c.depth; ++i) {
    at::Tensor skip;
    if (c.skip_block(i)) {
      skip = skips.back();
      skips.pop_back();
    }
    h = blocks[static_cast<std::size_t>(i)]->as<DiTBlockImpl>()->forward(h, context, skip);
    if (i < c.depth / 2) skips.push_back(h);
  }
  return final_linear(norm_final(h).narrow(1, 1, h.size(1) - 1));
}

std::vector<std::pair<std::string, at::Tensor>> HunYuanDiTPlainImpl::moe_aux_losses() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::int64_t i = 0; i < config_.depth; ++i) {
    const auto* block = blocks->ptr(static_cast<std::size_t>(i))->as<DiTBlockImpl>();
    if (block->moe && block->moe->last_aux_loss.defined())
      out.emplace_back("blocks." + std::to_string(i) + ".moe.gate", block->moe->last_aux_loss);
  }
  return out;
}

}  // namespace yeto::hunyuan3d
