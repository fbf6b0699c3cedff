#include "yeto/nn/state_dict.hpp"

#include <set>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

namespace yeto::nn {

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s << (i ? ", " : "") << t.size(i);
  s << "]";
  return s.str();
}

std::string some(const std::vector<std::string>& names) {
  std::ostringstream s;
  for (std::size_t i = 0; i < names.size() && i < 6; ++i) s << (i ? ", " : "") << names[i];
  if (names.size() > 6) s << ", ... (" << names.size() << " in all)";
  return s.str();
}

bool is_lora_name(const std::string& n) {
  return n.find(".lora_A.") != std::string::npos || n.find(".lora_B.") != std::string::npos ||
         n.rfind("lora_A.", 0) == 0 || n.rfind("lora_B.", 0) == 0;
}

}  // namespace

bool name_matches(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (!p.empty() && p.back() == '*') {
      if (name.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0) return true;
    } else if (name == p) {
      return true;
    }
  }
  return false;
}

std::map<std::string, at::Tensor> named_tensors(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : module.named_parameters(true)) out[p.key()] = p.value();
  for (const auto& b : module.named_buffers(true)) out[b.key()] = b.value();
  return out;
}

LoadReport load_named_tensors(torch::nn::Module& module, const std::map<std::string, at::Tensor>& tensors,
                              const LoadOptions& options) {
  auto targets = named_tensors(module);
  LoadReport report;
  std::set<std::string> seen;
  at::NoGradGuard no_grad;
  for (const auto& [raw, src] : tensors) {
    const std::string name = options.rename ? options.rename(raw) : raw;
    auto it = targets.find(name);
    if (it == targets.end()) {
      if (!name_matches(name, options.ignore_unexpected) && !name_matches(raw, options.ignore_unexpected)) {
        report.unexpected.push_back(raw);
      }
      continue;
    }
    auto& dst = it->second;
    if (!src.sizes().equals(dst.sizes())) {
      // Some upstream checkpoints store 1x1 convolutions where the module has a linear layer
      // (the VAE's legacy attention): accept [out, in, 1, 1] for [out, in].
      if (!(src.dim() == dst.dim() + 2 && src.numel() == dst.numel() && src.size(-1) == 1 && src.size(-2) == 1)) {
        throw std::invalid_argument("tensor '" + raw + "' has shape " + shape_of(src) + " but the model expects " +
                                    shape_of(dst) + " for '" + name + "' (wrong config.json for these weights?)");
      }
    }
    if (seen.count(name)) {
      throw std::invalid_argument("tensor '" + name + "' is given twice (after renaming '" + raw + "')");
    }
    dst.copy_(src.reshape(dst.sizes()));
    seen.insert(name);
    report.loaded.push_back(name);
  }
  for (const auto& [name, t] : targets) {
    if (seen.count(name) || is_lora_name(name) || name_matches(name, options.optional_missing)) continue;
    report.missing.push_back(name);
  }
  if (options.strict && (!report.missing.empty() || !report.unexpected.empty())) {
    std::ostringstream msg;
    msg << "weights do not match the model:";
    if (!report.missing.empty()) msg << " missing " << some(report.missing) << ";";
    if (!report.unexpected.empty()) msg << " unexpected " << some(report.unexpected) << ";";
    msg << " check that the checkpoint belongs to this model class and config";
    throw std::invalid_argument(msg.str());
  }
  return report;
}

}  // namespace yeto::nn
