#include "io/fp8_scaled.hpp"

#include "core/error.hpp"

namespace yeto::io {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_marker(const std::string& n) { return n == "scaled_fp8" || ends_with(n, ".scaled_fp8"); }

// The weight a scale belongs to ("" when `n` is not a scale's name).
std::string weight_of_scale(const std::string& n) {
  if (ends_with(n, ".weight_scale")) return n.substr(0, n.size() - 6);              // NAVA's FP8Linear
  if (ends_with(n, ".scale_weight")) return n.substr(0, n.size() - 12) + "weight";  // ComfyUI
  return {};
}

bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64; }

}  // namespace

Fp8Layout pair_fp8_scales(const std::vector<std::pair<std::string, const TensorInfo*>>& tensors,
                          const std::string& where) {
  Fp8Layout out;
  std::map<std::string, const TensorInfo*> by_name;
  for (const auto& [n, info] : tensors) by_name.emplace(n, info);
  bool scaled = false;
  for (const auto& [n, info] : tensors) {
    if (is_marker(n)) {
      out.consumed.insert(n);
      scaled = true;
      continue;
    }
    if (ends_with(n, ".scale_input")) {
      out.consumed.insert(n);
      ++out.input_scales;
      continue;
    }
    const auto w = weight_of_scale(n);
    if (w.empty()) continue;
    const auto it = by_name.find(w);
    if (it == by_name.end() || it->second->dtype != DType::F8_E4M3)
      throw Error(where + ": scale tensor '" + n + "' has no float8_e4m3fn weight '" + w + "' (" +
                      (it == by_name.end() ? std::string("there is no such tensor")
                                           : "it is " + dtype_name(it->second->dtype)) +
                      "); a scaled fp8 checkpoint stores each e4m3 weight with its scale",
                  ExitCode::bad_input);
    if (!is_float(info->dtype))
      throw Error(where + ": scale tensor '" + n + "' is " + dtype_name(info->dtype) + "; expected a float scale",
                  ExitCode::bad_input);
    const auto& ws = it->second->shape;
    const auto& ss = info->shape;
    const bool per_tensor = info->numel() == 1 && ss.size() <= 1;
    const bool per_row = !ws.empty() && ((ss.size() == 1 && ss[0] == ws[0]) ||
                                         (ss.size() == 2 && ss[0] == ws[0] && ss[1] == 1));
    if (!per_tensor && !per_row)
      throw Error(where + ": scale tensor '" + n + "' has shape " + shape_str(ss) + " for the weight '" + w +
                      "' of shape " + shape_str(ws) + "; a scale is one value ([] or [1]) or one per output row ([" +
                      (ws.empty() ? std::string("out") : std::to_string(ws[0])) + "] or [" +
                      (ws.empty() ? std::string("out") : std::to_string(ws[0])) + ", 1])",
                  ExitCode::bad_input);
    if (const auto [at, fresh] = out.scale_of.emplace(w, n); !fresh)
      throw Error(where + ": the weight '" + w + "' has two scales, '" + at->second + "' and '" + n + "'",
                  ExitCode::bad_input);
    out.consumed.insert(n);
    scaled = true;
  }
  for (const auto& [n, info] : tensors) {
    if (out.consumed.count(n)) continue;
    if (info->dtype != DType::F8_E4M3 || out.scale_of.count(n)) continue;
    if (scaled)
      throw Error(where + ": the float8_e4m3fn tensor '" + n + "' has no scale ('" + n + "_scale' or '" +
                      (ends_with(n, ".weight") ? n.substr(0, n.size() - 6) : n + ".") +
                      "scale_weight') in a checkpoint whose other fp8 weights have one; the file is incomplete",
                  ExitCode::bad_input);
    out.scale_of.emplace(n, std::string());
  }
  return out;
}

}  // namespace yeto::io
