#include "io/weights.hpp"

#include <set>

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

}  // namespace

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
    at::Tensor t = to_tensor(l.file, *l.info);
    target.copy_(t);
    l.file.release(*l.info);
    report.bytes_read += l.info->nbytes;
    report.loaded.push_back(file_name.substr(options.prefix.size()));
  }
  return report;
}

}  // namespace yeto::io
