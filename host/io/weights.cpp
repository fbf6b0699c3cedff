#include "io/weights.hpp"

#include <set>
#include <unordered_map>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/torch.h>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/tensors.hpp"

namespace yeto::io {
namespace {

bool allowed_missing(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (!p.empty() && p.back() == '*') {
      if (starts_with(name, std::string_view(p).substr(0, p.size() - 1))) return true;
    } else if (p == name) {
      return true;
    }
  }
  return false;
}

void list(std::string& out, const std::string& title, const std::vector<std::string>& names, std::size_t max) {
  if (names.empty()) return;
  out += "\n  " + title + " (" + std::to_string(names.size()) + "):";
  for (std::size_t i = 0; i < names.size() && i < max; ++i) out += " " + names[i];
  if (names.size() > max) out += " ... and " + std::to_string(names.size() - max) + " more";
}

// ---- DeferredInit --------------------------------------------------------------------------
// A thread-local dispatch key, included while a scope is open, routes every operator through the
// kernels below: the initialising fills return their tensor untouched and record it, `_to_copy`
// of a recorded tensor returns a recorded empty tensor, copy_ / fill_ / zero_ into a recorded
// tensor make it real again, and everything else falls through to the ordinary kernels. LibTorch reserves TESTING_ONLY_GenericMode for exactly such thread-local
// modes; nothing else in this process uses it.
constexpr c10::DispatchKey kDeferredKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

struct Placeholders {
  // StorageImpl -> a weak reference, which keeps the StorageImpl object (not its memory) alive,
  // so an address in this map cannot be reused by another storage while the scope is open.
  std::unordered_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
};

thread_local Placeholders* t_placeholders = nullptr;

void record(const at::Tensor& t) {
  if (t_placeholders && t.defined() && t.has_storage())
    t_placeholders->storages.emplace(t.storage().unsafeGetStorageImpl(), t.storage().getWeakStorageImpl());
}

bool recorded(const at::Tensor& t) {
  if (!t_placeholders || !t.defined() || !t.has_storage()) return false;
  const auto it = t_placeholders->storages.find(t.storage().unsafeGetStorageImpl());
  return it != t_placeholders->storages.end() && !it->second.expired();
}

// uniform_(self, from, to, *, generator) / normal_(self, mean, std, *, generator): self, unfilled.
void skip_fill(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto n = op.schema().arguments().size();
  at::Tensor self = (*stack)[stack->size() - n].toTensor();
  torch::jit::drop(*stack, n);
  record(self);
  torch::jit::push(*stack, std::move(self));
}

// _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format).
void convert_placeholder(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto n = op.schema().arguments().size();
  const at::Tensor self = (*stack)[stack->size() - n].toTensor();
  if (!recorded(self)) {
    c10::impl::ExcludeDispatchKeyGuard off(kDeferredKey);
    op.callBoxed(stack);
    return;
  }
  const auto arg = [&](std::size_t i) -> const c10::IValue& { return (*stack)[stack->size() - n + i]; };
  at::TensorOptions o = self.options();
  if (!arg(1).isNone()) o = o.dtype(arg(1).toScalarType());
  if (!arg(3).isNone()) o = o.device(arg(3).toDevice());
  at::Tensor out;
  {
    c10::impl::ExcludeDispatchKeyGuard off(kDeferredKey);
    out = at::empty(self.sizes(), o);
  }
  torch::jit::drop(*stack, n);
  record(out);
  torch::jit::push(*stack, std::move(out));
}

// copy_ / fill_ / zero_ into a placeholder (a component that loads by copying): it is real now.
void write_through(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto n = op.schema().arguments().size();
  const at::Tensor self = (*stack)[stack->size() - n].toTensor();
  if (t_placeholders && self.has_storage()) t_placeholders->storages.erase(self.storage().unsafeGetStorageImpl());
  c10::impl::ExcludeDispatchKeyGuard off(kDeferredKey);
  op.callBoxed(stack);
}

void register_deferred_kernels() {
  static const bool done = [] {
    static torch::Library fallback(torch::Library::IMPL, "_", kDeferredKey, __FILE__, __LINE__);
    fallback.fallback(torch::CppFunction::makeFallthrough());
    static torch::Library aten(torch::Library::IMPL, "aten", kDeferredKey, __FILE__, __LINE__);
    aten.impl("uniform_", torch::CppFunction::makeFromBoxedFunction<&skip_fill>());
    aten.impl("normal_", torch::CppFunction::makeFromBoxedFunction<&skip_fill>());
    aten.impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&convert_placeholder>());
    for (const char* name : {"copy_", "fill_.Scalar", "fill_.Tensor", "zero_"})
      aten.impl(name, torch::CppFunction::makeFromBoxedFunction<&write_through>());
    return true;
  }();
  (void)done;
}

}  // namespace

struct DeferredInit::State {
  c10::impl::IncludeDispatchKeyGuard include{kDeferredKey};
  Placeholders own;
  Placeholders* outer = nullptr;
};

DeferredInit::DeferredInit() {
  register_deferred_kernels();
  s_ = std::make_unique<State>();
  s_->outer = t_placeholders;
  if (!t_placeholders) t_placeholders = &s_->own;  // nested scopes share the outermost record
}

DeferredInit::~DeferredInit() {
  if (!s_->outer) t_placeholders = nullptr;
}

bool DeferredInit::uninitialized(const at::Tensor& t) { return recorded(t); }

void DeferredInit::check_initialized(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                     const std::string& what) {
  std::vector<std::string> left;
  for (const auto& [n, t] : tensors)
    if (recorded(t)) left.push_back(n);
  if (left.empty()) return;
  std::string msg = what + ": the checkpoint gives no values for " + std::to_string(left.size()) + " tensor(s):";
  for (std::size_t i = 0; i < left.size() && i < 8; ++i) msg += " " + left[i];
  if (left.size() > 8) msg += " ...";
  throw Error(msg + " (they have no initialisation to fall back on; use a checkpoint that holds them)",
              ExitCode::bad_input);
}

std::string LoadReport::describe(std::size_t max_names) const {
  std::string out = std::to_string(loaded.size()) + " tensors loaded";
  list(out, "missing from the checkpoint", missing, max_names);
  list(out, "unexpected in the checkpoint", unexpected, max_names);
  if (!mismatched.empty()) {
    out += "\n  shape mismatches (" + std::to_string(mismatched.size()) + "):";
    for (std::size_t i = 0; i < mismatched.size() && i < max_names; ++i)
      out += " " + mismatched[i].name + " (module " + shape_str(mismatched[i].module_shape) + ", checkpoint " +
             shape_str(mismatched[i].file_shape) + ")";
    if (mismatched.size() > max_names) out += " ... and " + std::to_string(mismatched.size() - max_names) + " more";
  }
  return out;
}

at::Tensor load_tensor(const WeightSource& source, const std::string& name) {
  const auto l = source.locate(name);
  return to_tensor(l.file, *l.info);
}

LoadReport load_weights(torch::nn::Module& module, WeightSource& source, bool strict) {
  LoadOptions o;
  o.strict = strict;
  return load_weights(module, source, o);
}

LoadReport load_weights(torch::nn::Module& module, WeightSource& source, const LoadOptions& options) {
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& p : module.named_parameters(true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) targets.emplace_back(b.key(), b.value());

  LoadReport report;
  std::set<std::string> wanted;
  std::vector<std::pair<at::Tensor, std::string>> plan;  // target, checkpoint name
  for (const auto& [name, target] : targets) {
    wanted.insert(name);
    const std::string file_name = options.prefix + name;
    if (!source.has(file_name)) {
      if (!allowed_missing(name, options.allow_missing)) report.missing.push_back(name);
      continue;
    }
    const auto l = source.locate(file_name);
    const std::vector<std::int64_t> module_shape = target.sizes().vec();
    if (module_shape != l.info->shape) {
      report.mismatched.push_back({name, module_shape, l.info->shape});
      continue;
    }
    plan.emplace_back(target, file_name);
  }
  for (const auto& n : source.names()) {
    if (!starts_with(n, options.prefix) || !wanted.count(n.substr(options.prefix.size())))
      report.unexpected.push_back(n);
  }
  if (options.strict && !report.ok())
    throw Error("cannot load the weights in " + source.root().string() + " into the module: " +
                    report.describe() + "\n(nothing was loaded)",
                ExitCode::bad_input);

  torch::NoGradGuard no_grad;
  for (auto& [target, file_name] : plan) {
    const auto l = source.locate(file_name);
    at::Tensor t = tensor_as(l.file, *l.info, target.scalar_type(), target.device());
    target.set_data(t.scalar_type() == target.scalar_type() ? t : t.to(target.scalar_type()));
    report.bytes_read += l.info->nbytes;
    report.loaded.push_back(file_name.substr(options.prefix.size()));
  }
  return report;
}

}  // namespace yeto::io
