// Zero-copy conversion between yeto_tensor handles and at::Tensor (the process's single
// LibTorch), with autograd intact. A handle is an at::TensorImpl* holding one reference;
// NULL stands for an undefined tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include "yeto/plugin.h"

namespace yeto::sdk {

using TensorImplPtr = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// A borrowed handle (an argument) as a tensor holding its own new reference.
inline at::Tensor borrow(yeto_tensor handle) {
  if (!handle) return at::Tensor();
  return at::Tensor(TensorImplPtr::unsafe_reclaim_from_nonowning(reinterpret_cast<c10::TensorImpl*>(handle)));
}

// An owned handle (a result) adopted: the tensor now holds the handle's reference.
inline at::Tensor adopt(yeto_tensor handle) {
  if (!handle) return at::Tensor();
  return at::Tensor(TensorImplPtr::reclaim(reinterpret_cast<c10::TensorImpl*>(handle)));
}

// Gives up one reference of `t` as an owned handle for the receiver to release.
inline yeto_tensor to_handle(at::Tensor t) {
  if (!t.defined()) return nullptr;
  return reinterpret_cast<yeto_tensor>(t.unsafeReleaseIntrusivePtr().release());
}

// Drops an owned handle (what yeto_host_api.tensor_release does).
inline void release(yeto_tensor handle) { (void)adopt(handle); }

}  // namespace yeto::sdk
