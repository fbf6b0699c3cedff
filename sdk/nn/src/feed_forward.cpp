#include "yeto/nn/feed_forward.hpp"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>

namespace yeto::nn {

FeedForwardImpl::FeedForwardImpl(std::int64_t dim, std::int64_t hidden_dim, std::int64_t dim_out, Activation a,
                                 bool bias)
    : act(a) {
  const std::int64_t hidden = hidden_dim > 0 ? hidden_dim : 4 * dim;
  auto net = register_module("net", torch::nn::ModuleList());
  auto activation = std::make_shared<torch::nn::Module>();
  proj = activation->register_module("proj", Linear(dim, hidden, bias));
  net->push_back(activation);
  net->push_back(std::make_shared<torch::nn::Module>());  // dropout slot
  out = Linear(hidden, dim_out > 0 ? dim_out : dim, bias);
  net->push_back(out.ptr());
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) { return out(apply_activation(act, proj(x))); }

}  // namespace yeto::nn
