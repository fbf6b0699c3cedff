#include "io/tensor_files.hpp"

#include <cstring>
#include <map>

#include <torch/torch.h>

#include "core/error.hpp"
#include "io/npy.hpp"
#include "io/pickle.hpp"
#include "io/tensors.hpp"
#include "io/zip_archive.hpp"

namespace yeto::io {
namespace fs = std::filesystem;

namespace {

using K = PyValue::Kind;

[[noreturn]] void bad(const fs::path& p, const std::string& what) {
  throw Error(p.string() + ": " + what, ExitCode::bad_input);
}

class PtBuilder {
 public:
  PtBuilder(const ZipArchive& zip, std::string prefix) : zip_(zip), prefix_(std::move(prefix)) {}

  c10::IValue build(const PyValue* v, int depth = 0) {
    if (depth > 64) bad(zip_.path(), "the saved object is nested more than 64 levels deep");
    switch (v->kind) {
      case K::none: return c10::IValue();
      case K::boolean: return c10::IValue(v->boolean);
      case K::integer: return c10::IValue(v->integer);
      case K::floating: return c10::IValue(v->floating);
      case K::string:
      case K::bytes: return c10::IValue(v->text);
      case K::tensor: return c10::IValue(tensor(*v));
      case K::list: {
        c10::impl::GenericList l(c10::AnyType::get());
        for (const PyValue* x : v->items) l.push_back(build(x, depth + 1));
        return c10::IValue(l);
      }
      case K::tuple: {
        std::vector<c10::IValue> xs;
        for (const PyValue* x : v->items) xs.push_back(build(x, depth + 1));
        return c10::IValue(c10::ivalue::Tuple::create(std::move(xs)));
      }
      case K::dict: {
        bool all_str = true, all_int = true;
        for (const auto& [k, x] : v->entries) {
          all_str = all_str && k->kind == K::string;
          all_int = all_int && k->kind == K::integer;
        }
        if (!all_str && !all_int && !v->entries.empty())
          bad(zip_.path(), "a dict with keys other than all-strings or all-integers is not supported");
        c10::impl::GenericDict d(all_str ? c10::TypePtr(c10::StringType::get()) : c10::TypePtr(c10::IntType::get()),
                                 c10::AnyType::get());
        for (const auto& [k, x] : v->entries)
          d.insert_or_assign(all_str ? c10::IValue(k->text) : c10::IValue(k->integer), build(x, depth + 1));
        return c10::IValue(d);
      }
      case K::storage:
      case K::global: bad(zip_.path(), std::string("the saved object holds a bare ") + PyValue::kind_name(v->kind));
    }
    bad(zip_.path(), "unknown value");
  }

 private:
  at::Tensor storage(const PyValue& s) {
    const auto it = storages_.find(s.storage_key);
    if (it != storages_.end()) return it->second;
    const std::string entry = prefix_ + "data/" + s.storage_key;
    const ZipEntry* e = zip_.find(entry);
    if (!e) bad(zip_.path(), "the archive lacks the storage '" + entry + "'");
    const std::string_view bytes = zip_.read(*e);
    const std::uint64_t need = s.storage_numel * dtype_size(s.storage_dtype);
    if (s.storage_numel > (1ull << 62) / 8 || bytes.size() < need)
      bad(zip_.path(), "storage '" + entry + "' holds " + std::to_string(bytes.size()) + " bytes, fewer than its " +
                           std::to_string(s.storage_numel) + " x " + dtype_name(s.storage_dtype) + " elements");
    at::Tensor t = at::empty({static_cast<std::int64_t>(s.storage_numel)},
                             at::TensorOptions().dtype(scalar_type_for(s.storage_dtype)));
    if (need) std::memcpy(t.data_ptr(), bytes.data(), need);
    storages_.emplace(s.storage_key, t);
    return t;
  }

  at::Tensor tensor(const PyValue& v) {
    const at::Tensor flat = storage(*v.storage);
    // Check that every element the view reaches lies inside the storage before building it.
    const std::int64_t numel = flat.numel();
    if (v.storage_offset < 0) bad(zip_.path(), "a tensor has a negative storage offset");
    std::int64_t last = v.storage_offset;
    bool empty = false;
    for (std::size_t i = 0; i < v.size.size(); ++i) {
      if (v.size[i] < 0 || v.stride[i] < 0) bad(zip_.path(), "a tensor has a negative size or stride");
      if (v.size[i] == 0) empty = true;
      else if (v.stride[i] > 0 && (v.size[i] - 1) > (INT64_MAX - last) / v.stride[i])
        bad(zip_.path(), "a tensor's strides overflow");
      else last += (v.size[i] - 1) * v.stride[i];
    }
    if (!empty && last >= numel)
      bad(zip_.path(), "a tensor of size " + shape_str(v.size) + " reaches element " + std::to_string(last) +
                           " of a storage of " + std::to_string(numel));
    at::Tensor t = empty ? at::empty(v.size, flat.options()) : flat.as_strided(v.size, v.stride, v.storage_offset);
    if (v.requires_grad) t = t.detach().requires_grad_(t.is_floating_point());
    return t;
  }

  const ZipArchive& zip_;
  std::string prefix_;
  std::map<std::string, at::Tensor> storages_;
};

void flatten(const c10::IValue& v, const std::string& name, std::vector<std::pair<std::string, at::Tensor>>& out,
             int depth) {
  if (depth > 64) return;
  auto child = [&](const std::string& k) { return name.empty() ? k : name + "." + k; };
  if (v.isTensor()) {
    out.emplace_back(name, v.toTensor());
  } else if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict())
      flatten(e.value(), child(e.key().isString() ? e.key().toStringRef() : std::to_string(e.key().toInt())), out,
              depth + 1);
  } else if (v.isList()) {
    const auto l = v.toList();
    for (std::size_t i = 0; i < l.size(); ++i) flatten(l.get(i), child(std::to_string(i)), out, depth + 1);
  } else if (v.isTuple()) {
    const auto& xs = v.toTupleRef().elements();
    for (std::size_t i = 0; i < xs.size(); ++i) flatten(xs[i], child(std::to_string(i)), out, depth + 1);
  }
}

std::string lower_ext(const fs::path& p) {
  std::string e = p.extension().string();
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace

c10::IValue load_pt(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("cannot open '" + path.string() + "': no such file", ExitCode::not_found);
  if (!ZipArchive::looks_like_zip(path))
    bad(path, "not a zip-format torch.save file; legacy (pre-1.6) archives are not read: re-save it with "
              "torch.save(obj, path) from PyTorch >= 1.6, or convert it to safetensors");
  const ZipArchive zip = ZipArchive::open(path);
  const ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") {
      pkl = &e;
      break;
    }
  }
  if (!pkl) bad(path, "the archive has no <name>/data.pkl: not a torch.save file");
  const std::string prefix = pkl->name.substr(0, pkl->name.find('/') + 1);
  if (const ZipEntry* bo = zip.find(prefix + "byteorder"))
    if (zip.read(*bo) != "little") bad(path, "the archive was written on a big-endian machine, which is not supported");
  const PickleResult r = unpickle_weights_only(zip.read(*pkl), path.string());
  PtBuilder b(zip, prefix);
  return b.build(r.root);
}

std::vector<std::pair<std::string, at::Tensor>> flatten_tensors(const c10::IValue& value) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  flatten(value, "", out, 0);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> load_pt_tensors(const fs::path& path) {
  return flatten_tensors(load_pt(path));
}

at::Tensor load_npy(const fs::path& path) {
  NpyArray a = read_npy(path);
  const auto opts = at::TensorOptions().dtype(scalar_type_for(a.dtype));
  if (!a.fortran_order) {
    at::Tensor t = at::empty(a.shape, opts);
    if (!a.data.empty()) std::memcpy(t.data_ptr(), a.data.data(), a.data.size());
    return t;
  }
  // Column-major: the bytes are the C-order array of the reversed shape; permute back.
  std::vector<std::int64_t> rev(a.shape.rbegin(), a.shape.rend());
  at::Tensor t = at::empty(rev, opts);
  if (!a.data.empty()) std::memcpy(t.data_ptr(), a.data.data(), a.data.size());
  std::vector<std::int64_t> perm;
  for (std::int64_t i = static_cast<std::int64_t>(rev.size()) - 1; i >= 0; --i) perm.push_back(i);
  return t.permute(perm).contiguous();
}

std::vector<std::pair<std::string, at::Tensor>> load_tensor_file(const fs::path& path) {
  const std::string ext = lower_ext(path);
  if (ext == ".safetensors") {
    std::vector<std::pair<std::string, at::Tensor>> out;
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& t : f.tensors()) out.emplace_back(t.name, to_tensor(f, t));
    return out;
  }
  if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt") return load_pt_tensors(path);
  if (ext == ".npy") return {{"", load_npy(path)}};
  throw Error("'" + path.string() + "': unknown tensor file type '" + ext +
                  "' (expected .safetensors, .pt, .pth, .bin, .ckpt or .npy)",
              ExitCode::bad_input);
}

}  // namespace yeto::io
