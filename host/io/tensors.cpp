#include "io/tensors.hpp"

#include <cmath>
#include <cstring>

#include <torch/torch.h>

#include "core/error.hpp"

namespace yeto::io {
namespace {

float decode_e4m3(std::uint8_t b) {
  // float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities, S.1111.111 is NaN.
  const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  float v;
  if (exp == 15 && man == 7) return std::nanf("");
  if (exp == 0) v = std::ldexp(static_cast<float>(man) / 8.0f, -6);
  else v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return sign ? -v : v;
}

float decode_e5m2(std::uint8_t b) {
  // float8_e5m2 is the top byte of an IEEE half.
  const int sign = b >> 7, exp = (b >> 2) & 31, man = b & 3;
  float v;
  if (exp == 31) v = man ? std::nanf("") : INFINITY;
  else if (exp == 0) v = std::ldexp(static_cast<float>(man) / 4.0f, -14);
  else v = std::ldexp(1.0f + static_cast<float>(man) / 4.0f, exp - 15);
  return sign ? -v : v;
}

}  // namespace

c10::ScalarType scalar_type_for(DType d) {
  switch (d) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F8_E4M3:
    case DType::F8_E5M2: return at::kFloat;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  throw Error("unknown dtype");
}

DType dtype_for(c10::ScalarType t, const std::string& tensor_name) {
  switch (t) {
    case at::kDouble: return DType::F64;
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kLong: return DType::I64;
    case at::kInt: return DType::I32;
    case at::kShort: return DType::I16;
    case at::kChar: return DType::I8;
    case at::kByte: return DType::U8;
    case at::kBool: return DType::BOOL;
    default:
      throw Error("tensor '" + tensor_name + "' has dtype " + std::string(c10::toString(t)) +
                      ", which safetensors cannot store",
                  ExitCode::bad_input);
  }
}

at::Tensor to_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  auto out = at::empty(info.shape, at::TensorOptions().dtype(scalar_type_for(info.dtype)).device(at::kCPU));
  if (info.dtype == DType::F8_E4M3 || info.dtype == DType::F8_E5M2) {
    float* dst = out.data_ptr<float>();
    const auto* b = reinterpret_cast<const std::uint8_t*>(file.data(info));
    const bool e4m3 = info.dtype == DType::F8_E4M3;
    for (std::uint64_t i = 0; i < info.nbytes; ++i) dst[i] = e4m3 ? decode_e4m3(b[i]) : decode_e5m2(b[i]);
    return out;
  }
  if (info.nbytes) file.copy_to(info, out.data_ptr());
  return out;
}

at::Tensor mapped_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  if (info.dtype == DType::F8_E4M3 || info.dtype == DType::F8_E5M2) return {};
  const std::byte* p = file.data(info);
  const auto type = scalar_type_for(info.dtype);
  if (reinterpret_cast<std::uintptr_t>(p) % c10::elementSize(type) != 0) return {};
  // The deleter holds a copy of the file: the mapping lives as long as any view of it.
  return at::from_blob(const_cast<std::byte*>(p), info.shape, [keep = file](void*) {},
                       at::TensorOptions().dtype(type).device(at::kCPU));
}

at::Tensor fp8_codes(const SafetensorsFile& file, const TensorInfo& info) {
  if (info.dtype != DType::F8_E4M3)
    throw Error("tensor '" + info.name + "' is " + dtype_name(info.dtype) + ", not float8_e4m3fn codes",
                ExitCode::bad_input);
  return at::from_blob(const_cast<std::byte*>(file.data(info)), info.shape, [keep = file](void*) {},
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

at::Tensor fp8_row_scales(const SafetensorsFile& file, const TensorInfo* scale, std::int64_t rows) {
  if (!scale) return at::ones({rows}, at::kFloat);
  const at::Tensor s = to_tensor(file, *scale).to(at::kFloat).reshape({-1});
  if (s.numel() == 1) return s.expand({rows}).contiguous();
  if (s.numel() != rows)
    throw Error("scale tensor '" + scale->name + "' has " + std::to_string(s.numel()) + " values for " +
                    std::to_string(rows) + " rows",
                ExitCode::bad_input);
  return s.contiguous();
}

at::Tensor tensor_as(const SafetensorsFile& file, const TensorInfo& info, c10::ScalarType dtype,
                     const c10::Device& device, bool* mapped) {
  if (mapped) *mapped = false;
  at::Tensor m = mapped_tensor(file, info);
  if (!m.defined()) m = to_tensor(file, info);  // float8 (decoded) or unaligned: an owned copy
  const bool convert = m.is_floating_point() && m.scalar_type() != dtype;
  if (!convert && device.is_cpu()) {
    if (mapped) *mapped = m.data_ptr() == static_cast<const void*>(file.data(info));
    return m;
  }
  at::Tensor out = convert ? m.to(device, dtype) : m.to(device);
  m = at::Tensor();
  file.release(info);
  return out;
}

std::map<std::string, at::Tensor> load_safetensors(const std::filesystem::path& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& t : f.tensors()) out.emplace(t.name, to_tensor(f, t));
  return out;
}

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;
  std::vector<SafetensorsEntry> entries;
  keep.reserve(tensors.size());
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error("tensor '" + name + "' is undefined and cannot be saved", ExitCode::bad_input);
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    if (c.is_sparse() || c.is_quantized())
      throw Error("tensor '" + name + "' is sparse or quantized; safetensors stores dense tensors only",
                  ExitCode::bad_input);
    SafetensorsEntry e;
    e.name = name;
    e.dtype = dtype_for(c.scalar_type(), name);
    e.shape = c.sizes().vec();
    e.bytes = {static_cast<const std::byte*>(c.data_ptr()), static_cast<std::size_t>(c.numel() * c.element_size())};
    keep.push_back(std::move(c));
    entries.push_back(std::move(e));
  }
  write_safetensors(path, entries, metadata);
}

}  // namespace yeto::io
