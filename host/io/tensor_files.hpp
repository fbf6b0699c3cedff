// Tensor files other than safetensors, as users have them: Python torch.save archives
// (.pt / .pth / .bin, loaded weights-only) and NumPy .npy arrays.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

namespace yeto::io {

// The object a torch.save zip archive holds, as an IValue tree: tensors (CPU, owned; views of
// one storage share it as in Python), dicts (string or int keys; OrderedDict order kept),
// lists, tuples, None, bool, int, float, str (bytes come as str). Throws yeto::Error
// (bad_input) for a legacy (pre-1.6) archive, any refused pickle global/opcode, or storage
// bytes that do not cover a tensor.
c10::IValue load_pt(const std::filesystem::path& path);

// Every tensor in a .pt file with a dotted name: dict keys and list/tuple indices joined by
// '.'; a bare tensor is named "". Non-tensor leaves are skipped.
std::vector<std::pair<std::string, at::Tensor>> load_pt_tensors(const std::filesystem::path& path);
std::vector<std::pair<std::string, at::Tensor>> flatten_tensors(const c10::IValue& value);

// A .npy array as a contiguous CPU tensor (Fortran-ordered data is reordered).
at::Tensor load_npy(const std::filesystem::path& path);

// Any tensor file by extension: .safetensors, .pt/.pth/.bin/.ckpt, .npy (one tensor named "").
std::vector<std::pair<std::string, at::Tensor>> load_tensor_file(const std::filesystem::path& path);

}  // namespace yeto::io
