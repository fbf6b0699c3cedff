#include "yeto/nn/attention.hpp"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>

#include "yeto/nn/embeddings.hpp"
#include "yeto/nn/norms.hpp"
#include "yeto/torch_compat.hpp"

namespace yeto::nn {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     bool is_causal, double scale) {
  std::optional<double> s;
  if (scale > 0.0) s = scale;
  return compat::scaled_dot_product_attention(q, k, v, mask, is_causal, s);
}

at::Tensor split_heads(const at::Tensor& x, std::int64_t heads) {
  const auto b = x.size(0);
  const auto l = x.size(1);
  return x.view({b, l, heads, x.size(2) / heads}).transpose(1, 2);
}

at::Tensor merge_heads(const at::Tensor& x) {
  const auto b = x.size(0);
  const auto l = x.size(2);
  return x.transpose(1, 2).reshape({b, l, x.size(1) * x.size(3)});
}

namespace {

std::shared_ptr<torch::nn::Module> make_qk_norm(const std::string& kind, std::int64_t dim, double eps) {
  if (kind == "rms_norm") return std::make_shared<RMSNormImpl>(dim, eps);
  if (kind == "layer_norm") return std::make_shared<LayerNormImpl>(dim, eps);
  throw std::invalid_argument("Attention: unknown qk_norm '" + kind + "' (expected rms_norm or layer_norm)");
}

}  // namespace

AttentionImpl::AttentionImpl(const AttentionOptions& o) : opt_(o) {
  if (o.query_dim <= 0 || o.heads <= 0 || o.dim_head <= 0) {
    throw std::invalid_argument("Attention: query_dim, heads and dim_head must be positive");
  }
  inner_dim_ = o.heads * o.dim_head;
  const auto cross = o.cross_attention_dim > 0 ? o.cross_attention_dim : o.query_dim;
  const auto out_dim = o.out_dim > 0 ? o.out_dim : o.query_dim;
  if (o.norm_num_groups > 0) {
    group_norm = register_module(
        "group_norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(o.norm_num_groups, o.query_dim).eps(o.eps)));
  }
  to_q = register_module("to_q", Linear(o.query_dim, inner_dim_, o.bias));
  to_k = register_module("to_k", Linear(cross, inner_dim_, o.bias));
  to_v = register_module("to_v", Linear(cross, inner_dim_, o.bias));
  if (!o.qk_norm.empty()) {
    norm_q = register_module("norm_q", make_qk_norm(o.qk_norm, o.dim_head, o.eps));
    norm_k = register_module("norm_k", make_qk_norm(o.qk_norm, o.dim_head, o.eps));
  }
  if (o.added_kv_proj_dim > 0) {
    add_k_proj = register_module("add_k_proj", Linear(o.added_kv_proj_dim, inner_dim_, o.added_proj_bias));
    add_v_proj = register_module("add_v_proj", Linear(o.added_kv_proj_dim, inner_dim_, o.added_proj_bias));
    add_q_proj = register_module("add_q_proj", Linear(o.added_kv_proj_dim, inner_dim_, o.added_proj_bias));
    if (!o.context_pre_only) {
      to_add_out = register_module("to_add_out", Linear(inner_dim_, out_dim, o.out_bias));
    }
    if (!o.qk_norm.empty()) {
      norm_added_q = register_module("norm_added_q", make_qk_norm(o.qk_norm, o.dim_head, o.eps));
      norm_added_k = register_module("norm_added_k", make_qk_norm(o.qk_norm, o.dim_head, o.eps));
    }
  }
  if (!o.pre_only) {
    to_out = register_module("to_out", torch::nn::ModuleList());
    to_out->push_back(Linear(inner_dim_, out_dim, o.out_bias));
    to_out->push_back(torch::nn::Dropout(0.0));
  }
}

at::Tensor AttentionImpl::qk_normed(const std::shared_ptr<torch::nn::Module>& norm, const at::Tensor& t) const {
  if (!norm) return t;
  if (auto rms = std::dynamic_pointer_cast<RMSNormImpl>(norm)) return rms->forward(t);
  return std::static_pointer_cast<LayerNormImpl>(norm)->forward(t);
}

at::Tensor AttentionImpl::project_out(const at::Tensor& t) {
  if (!to_out) return t;
  return to_out->ptr<LinearImpl>(0)->forward(t);  // to_out.1 is dropout(0): identity
}

at::Tensor AttentionImpl::forward(const at::Tensor& x_in, const at::Tensor& context, const at::Tensor& mask,
                                  const at::Tensor& rope_cos, const at::Tensor& rope_sin) {
  const bool spatial = x_in.dim() == 4;
  std::int64_t b = 0, c = 0, h = 0, w = 0;
  at::Tensor x = x_in;
  if (spatial) {
    b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    x = x.view({b, c, h * w}).transpose(1, 2);
  }
  const auto residual = x;
  if (group_norm) {
    x = nn::group_norm(group_norm, x.transpose(1, 2)).transpose(1, 2);
  }
  const auto& kv_src = context.defined() ? context : x;
  auto q = qk_normed(norm_q, split_heads(to_q(x), opt_.heads));
  auto k = qk_normed(norm_k, split_heads(to_k(kv_src), opt_.heads));
  auto v = split_heads(to_v(kv_src), opt_.heads);
  if (rope_cos.defined()) {
    q = apply_rotary_emb(q, rope_cos, rope_sin);
    k = apply_rotary_emb(k, rope_cos, rope_sin);
  }
  auto o = merge_heads(attention(q, k, v, mask, false, opt_.scale)).to(q.scalar_type());
  o = project_out(o);
  if (spatial) {
    // The residual of the deprecated VAE attention block is added in token layout, then the
    // tensor goes back to [B, C, H, W].
    if (opt_.residual_connection) o = o + residual;
    o = o.transpose(1, 2).reshape({b, c, h, w});
  } else if (opt_.residual_connection) {
    o = o + residual;
  }
  if (opt_.rescale_output_factor != 1.0) o = o / opt_.rescale_output_factor;
  return o;
}

std::pair<at::Tensor, at::Tensor> AttentionImpl::forward_joint(const at::Tensor& x, const at::Tensor& context,
                                                               const at::Tensor& mask, const at::Tensor& rope_cos,
                                                               const at::Tensor& rope_sin) {
  if (!add_k_proj) {
    throw std::invalid_argument("Attention::forward_joint needs added_kv_proj_dim > 0");
  }
  auto q = qk_normed(norm_q, split_heads(to_q(x), opt_.heads));
  auto k = qk_normed(norm_k, split_heads(to_k(x), opt_.heads));
  auto v = split_heads(to_v(x), opt_.heads);
  auto cq = qk_normed(norm_added_q, split_heads(add_q_proj(context), opt_.heads));
  auto ck = qk_normed(norm_added_k, split_heads(add_k_proj(context), opt_.heads));
  auto cv = split_heads(add_v_proj(context), opt_.heads);
  const bool cf = opt_.context_first;
  q = cf ? at::cat({cq, q}, 2) : at::cat({q, cq}, 2);
  k = cf ? at::cat({ck, k}, 2) : at::cat({k, ck}, 2);
  v = cf ? at::cat({cv, v}, 2) : at::cat({v, cv}, 2);
  if (rope_cos.defined()) {
    q = apply_rotary_emb(q, rope_cos, rope_sin);
    k = apply_rotary_emb(k, rope_cos, rope_sin);
  }
  auto o = merge_heads(attention(q, k, v, mask, false, opt_.scale)).to(x.scalar_type());
  const auto lc = context.size(1);
  const auto lx = x.size(1);
  auto ctx_out = cf ? o.narrow(1, 0, lc) : o.narrow(1, lx, lc);
  auto x_out = cf ? o.narrow(1, lc, lx) : o.narrow(1, 0, lx);
  x_out = project_out(x_out);
  if (to_add_out) ctx_out = to_add_out(ctx_out);
  return {x_out, ctx_out};
}

}  // namespace yeto::nn
