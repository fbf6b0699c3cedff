// A weights-only unpickler for Python torch.save archives. It accepts exactly what a state
// dict or a tensor container needs: tensor rebuilds (torch._utils._rebuild_tensor_v2,
// _rebuild_parameter) over storages named by persistent ids, dict / OrderedDict / list /
// tuple, and primitive values. Every other global and every object-building opcode is
// refused, so loading a file never runs code the file names. Torch-free: tensors come out as
// references to storages, which pt.hpp turns into LibTorch tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/safetensors.hpp"

namespace yeto::io {

struct PyValue {
  enum class Kind { none, boolean, integer, floating, string, bytes, list, tuple, dict, tensor, storage, global };
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0;
  std::string text;                                     // string, bytes, global ("module.name")
  std::vector<const PyValue*> items;                    // list, tuple
  std::vector<std::pair<const PyValue*, const PyValue*>> entries;  // dict, in insertion order
  bool ordered = false;                                 // an OrderedDict
  // storage (from a persistent id)
  std::string storage_key;
  DType storage_dtype = DType::F32;
  std::uint64_t storage_numel = 0;
  std::string location;
  // tensor
  const PyValue* storage = nullptr;
  std::int64_t storage_offset = 0;
  std::vector<std::int64_t> size, stride;
  bool requires_grad = false;

  static const char* kind_name(Kind k);
};

// Owns every value the pickle created (flat, so hostile nesting or cycles cannot overflow the
// stack when it is destroyed).
struct PickleResult {
  std::vector<std::unique_ptr<PyValue>> arena;
  const PyValue* root = nullptr;
};

// Runs the pickle program. `label` names it in errors (yeto::Error, ExitCode::bad_input).
PickleResult unpickle_weights_only(std::string_view program, const std::string& label);

// The storage dtype a torch storage class name stands for ("FloatStorage" -> F32).
bool storage_dtype_from_name(std::string_view storage_class, DType& out);

}  // namespace yeto::io
